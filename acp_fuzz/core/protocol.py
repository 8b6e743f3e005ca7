"""Protocol versions: what acp-fuzz offers in ``initialize`` and what it accepts back (pure).

ACP has two major versions that differ on the wire (docs/rules.md): v1 is current, v2
moves the capabilities under ``capabilities.session``, drops ``session/load`` for
``session/resume`` with ``replayFrom``, and splits a turn in two (``session/prompt`` answers
with a ``messageId`` once the message is inserted; ``state_update`` notifications report it
``running`` and then ``idle`` with a ``stopReason``). One connection speaks one version.

The client offers a version and the agent answers the highest version it supports at or below
it (INIT-VERSION-NEGOTIATE-DEF; the v2 schema's ``InitializeResponse.protocolVersion``). The
user picks what is offered with ``--protocol``:

* ``1`` or ``2``: offer that version and speak only it. An agent that answers another version
  ends the run with a one-line error: acp-fuzz tests the version it was asked to test.
* ``auto``: offer the newest (2) and speak whatever supported version the agent answers.

An answer that is not a version acp-fuzz speaks (above the offer, or unknown) is a broken
negotiation: the client closes the connection, as the rule says, and reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_fuzz.core.errors import AcpFuzzError

__all__ = ["CHOICES", "NEWEST", "SUPPORTED", "NegotiationError", "agent_info", "answered",
           "initialize_params", "negotiate", "offer_for", "parse_choice"]

#: The protocol versions acp-fuzz speaks.
SUPPORTED = (1, 2)
NEWEST = max(SUPPORTED)
#: What ``--protocol`` accepts.
CHOICES = ("1", "2", "auto")


class NegotiationError(AcpFuzzError):
    """The agent's ``initialize`` answer leaves no version both sides speak."""


def parse_choice(value: str) -> str:
    """Check a ``--protocol`` value; ``ValueError`` with a one-line reason otherwise."""
    if value not in CHOICES:
        raise ValueError(f"--protocol must be one of {', '.join(CHOICES)}, not {value!r}")
    return value


def offer_for(choice: str) -> int:
    """The version offered in ``initialize`` for a ``--protocol`` choice."""
    return NEWEST if parse_choice(choice) == "auto" else int(choice)


def initialize_params(offer: int, *, choice: str, info: Mapping[str, Any],
                      v1_capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """The ``initialize`` params for an offer of ``offer``.

    v1 names the client ``clientInfo`` and ``clientCapabilities``; v2 names them ``info``
    (required) and ``capabilities``. With ``auto`` the agent may answer either, so the offer
    carries both spellings: a v1 agent ignores the v2 keys and still learns what the client
    can do, and both schemas allow the extra keys."""
    v1 = {"clientCapabilities": dict(v1_capabilities), "clientInfo": dict(info)}
    if offer == 1:
        return {"protocolVersion": 1, **v1}
    v2 = {"info": dict(info), "capabilities": {}}
    return {"protocolVersion": offer, **v2, **(v1 if choice == "auto" else {})}


def answered(init: Any) -> int:
    """The version an ``initialize`` result settled on: its ``protocolVersion`` when that
    is one acp-fuzz speaks, else 1 (a cassette from before v2, or none)."""
    version = init.get("protocolVersion") if isinstance(init, Mapping) else None
    return version if version in SUPPORTED and not isinstance(version, bool) else 1


def agent_info(init: Any) -> Mapping[str, Any]:
    """The agent's ``{name, version, title?}`` from an ``initialize`` result: ``agentInfo``
    in v1, ``info`` in v2; empty when missing or malformed."""
    if not isinstance(init, Mapping):
        return {}
    info = init.get("info" if answered(init) >= 2 else "agentInfo")
    return info if isinstance(info, Mapping) else {}


def negotiate(choice: str, answer: Any) -> int:
    """The version the connection speaks, from the agent's ``initialize`` result.

    Raises :class:`NegotiationError` with a one-line reason when the agent answered a version
    that acp-fuzz does not speak or that the user did not ask for."""
    offer = offer_for(choice)
    version = answer.get("protocolVersion") if isinstance(answer, Mapping) else None
    if not isinstance(version, int) or isinstance(version, bool):
        if choice == "1":
            # Offered only v1, there is nothing to choose: go on in v1, and let the oracles
            # report the malformed answer (protocol.malformed) with everything else.
            return 1
        raise NegotiationError(
            f"the agent's initialize answer has no integer protocolVersion ({version!r})")
    if version > offer:
        raise NegotiationError(
            f"the agent answered protocolVersion {version} to an offer of {offer}: an agent "
            f"answers the offered version or an older one it supports "
            f"(INIT-VERSION-NEGOTIATE-DEF); acp-fuzz closed the connection")
    if version not in SUPPORTED:
        raise NegotiationError(
            f"the agent answered protocolVersion {version}, which acp-fuzz does not speak "
            f"(it speaks {', '.join(map(str, SUPPORTED))}); acp-fuzz closed the connection "
            f"(INIT-VERSION-NEGOTIATE-DEF)")
    if choice != "auto" and version != offer:
        raise NegotiationError(
            f"the agent answered protocolVersion {version} to an offer of {offer}: it does "
            f"not speak v{offer}; run with --protocol {version} or --protocol auto")
    return version
