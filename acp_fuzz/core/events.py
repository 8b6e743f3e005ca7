"""What a campaign reports while it works: one event stream for agent and client campaigns
(pure data).

A campaign calls its ``on_event`` callback with these, in order: an agent campaign says it
``Started`` and was ``Calibrated``; both say each example is done (``ExampleDone``), that a
failure was found (``FailureFound``), is being shrunk (``Shrinking``) and confirmed
(``Confirming``), or that it shrank to a bug already reported (``ShrankToKnown``). What an
example is differs by direction: an agent campaign's is a list of steps (``steps``, and its
``digest``), a client campaign's a capability set (``capability_set``); each event carries
what its direction has and leaves the rest at its default. The command that ran the campaign
says it is ``Finished`` (with the result), last. The CLI renders these, and hands each to the
``--report`` formats (:mod:`acp_fuzz.reporting.formats`, yours too); a library user may pass
their own callback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp_fuzz.core.baseline import Baseline
    from acp_fuzz.core.calibration import Learned
    from acp_fuzz.core.capability_sets import CapabilitySet
    from acp_fuzz.core.payloads import Capabilities

__all__ = [
    "Calibrated",
    "CampaignEvent",
    "Confirming",
    "ExampleDone",
    "FailureFound",
    "Finished",
    "ShrankToKnown",
    "Shrinking",
    "Started",
]


class CampaignEvent:
    """Base class of what a campaign reports while it works."""


@dataclass(frozen=True)
class Started(CampaignEvent):
    """The agent answered ``initialize``: who it is, and what it advertised."""

    agent: Mapping[str, Any]
    caps: Capabilities
    initialize: Any


@dataclass(frozen=True)
class Calibrated(CampaignEvent):
    """Calibration learned the agent's default instructions."""

    baseline: Baseline
    #: What calibration learned besides, and how (printed on one line by ``target``).
    learned: Learned | None = None


@dataclass(frozen=True)
class ExampleDone(CampaignEvent):
    """One more example ran: ``examples`` so far, and whether this one failed."""

    examples: int
    steps: int
    failing: bool
    #: The example's steps as :func:`acp_fuzz.strategies.example_digest` names them.
    digest: str = ""
    #: A client campaign's example: the capability set the stand-in advertised.
    capability_set: CapabilitySet | None = None


@dataclass(frozen=True)
class FailureFound(CampaignEvent):
    """A failing example that no known failure explains: shrinking starts."""

    oracles: tuple[str, ...]
    #: A client campaign's failing capability set.
    capability_set: CapabilitySet | None = None


@dataclass(frozen=True)
class Shrinking(CampaignEvent):
    """A new failure is being shrunk (the campaign's own passes, after Hypothesis')."""

    steps: int


@dataclass(frozen=True)
class Confirming(CampaignEvent):
    """The shrunk failure is being run again on fresh processes."""

    steps: int
    oracles: tuple[str, ...] = ()
    #: A client campaign's smallest capability set that still failed.
    capability_set: CapabilitySet | None = None


@dataclass(frozen=True)
class ShrankToKnown(CampaignEvent):
    """The failure being shrunk ended in a reproduction already reported: it is the same bug,
    and the search goes on. ``oracles`` are the failure's, ``known`` the report's."""

    oracles: tuple[str, ...]
    known: tuple[str, ...]


@dataclass(frozen=True)
class Finished(CampaignEvent):
    """The campaign is over (the last event, sent by the command that ran it): what a report
    is written from. ``result`` is an agent campaign's
    :class:`~acp_fuzz.engine.campaign.search.CampaignResult` (``direction == "agent"``) or a
    client campaign's :class:`~acp_fuzz.engine.client.campaign.ClientCampaignResult`
    (``"client"``); ``secrets`` are the values a report must not show (``--pass-env``), which
    :class:`acp_fuzz.core.scrub.Scrubber` takes out."""

    direction: str
    result: Any
    elapsed: float
    secrets: tuple[str, ...] = ()
