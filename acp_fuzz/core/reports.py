"""One distinct failure a campaign found, as both directions report it (pure).

An agent campaign (``acp-fuzz target``) reports a
:class:`~acp_fuzz.engine.campaign.search.FindingReport`, a client campaign (``acp-fuzz
client``) a :class:`~acp_fuzz.engine.client.campaign.ClientReport`; both are a :class:`Report`:
the findings of the smallest example that showed the failure, whether it reproduced
(``status``, ``reproduced`` of ``runs``) and its cassette. What each adds (an agent's steps
and requests, a client's capability set) is its own. The reporters read the shared part
here, and a ``--report`` format of a plugin can rely on it for both directions
(:mod:`acp_fuzz.reporting.formats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_fuzz.core.findings import Finding, Status, is_reported

__all__ = ["Report"]


@dataclass(kw_only=True)
class Report:
    """A distinct failure: its findings, how often it reproduced, and its cassette."""

    #: ``failed``, ``flaky`` (a :class:`~acp_fuzz.core.findings.Status`); ``unconfirmed``
    #: when interrupted before the confirmation runs.
    status: Status
    #: The confirmation runs, and how many of them showed the failure again.
    runs: int
    reproduced: int
    #: The findings of the smallest example that showed it.
    findings: list[Finding]
    #: Where it was recorded; ``None`` when not written.
    cassette: Path | None = None

    @property
    def rate(self) -> str:
        """``reproduced/runs``, as the reports show it."""
        return f"{self.reproduced}/{self.runs}"

    @property
    def oracles(self) -> Sequence[str]:
        """The failing oracles, by name (the observed ones for an info report)."""
        failing = {f.oracle for f in self.findings if is_reported(f.severity)}
        return sorted(failing or {f.oracle for f in self.findings})

    def to_wire(self) -> dict[str, Any]:
        """The shared part as data."""
        return {"status": self.status, "runs": self.runs, "reproduced": self.reproduced,
                "findings": [f.to_wire() for f in self.findings],
                "cassette": str(self.cassette) if self.cassette else None}

    def finding_rows(self, **beside: Any) -> list[dict[str, Any]]:
        """One ``findings`` entry of a JSON report per finding: the finding, this failure's
        ``status`` and ``rate``, then ``beside`` (what the direction adds), then its
        ``cassette``."""
        cassette = str(self.cassette) if self.cassette else None
        return [{**f.to_wire(), "status": self.status, "rate": self.rate, **beside,
                 "cassette": cassette} for f in self.findings]

    def case_text(self, head: str, *beside: str) -> str:
        """The text of a JUnit case of one of its findings: ``head`` (the finding), its
        status and rate, ``beside`` (what the direction adds), then its cassette."""
        return "\n".join((head, f"status: {self.status} ({self.rate})", *beside,
                          f"cassette: {self.cassette or 'not written'}"))
