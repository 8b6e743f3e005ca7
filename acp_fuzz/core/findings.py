"""Findings and the oracle catalog (pure).

Every finding names its oracle (a stable id), its severity (``MUST``, ``SHOULD`` or ``info``),
the rule id it rests on (docs/rules.md), the step that exposed it, and its evidence.
``docs/oracles.md`` is the user-facing catalog of the same table.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from acp_fuzz.core.rules import RULES

__all__ = ["CATALOG", "CATALOGS", "CLIENT_CATALOG", "HARNESS_RULES", "SEVERITIES", "Catalog",
           "Finding", "OracleInfo", "Severity", "Status", "is_failure", "is_known",
           "is_reported", "oracle_info"]


class Severity(StrEnum):
    """How strongly the text a finding rests on asks for what the agent did not do.

    A ``str`` (``Severity.MUST == "MUST"``), so that findings read back from a cassette, a
    worker or a JSON report, plain data, compare equal to it."""

    #: The text says MUST (or MUST NOT), or acp-fuzz's own rule argues one from it: fails
    #: every run.
    MUST = "MUST"
    #: The text says SHOULD (or our reading of it is no stronger): reported, shrunk and
    #: confirmed; fails a run under ``--strict``.
    SHOULD = "SHOULD"
    #: What the agent chose where the text leaves it open (MAY, or nothing said): listed
    #: beside the failures, never shrunk, never a failure.
    INFO = "info"


SEVERITIES: tuple[str, ...] = tuple(Severity)


class Status(StrEnum):
    """What came of a failure once it was shrunk and run again: the same words in agent and
    client campaigns, their reports and their cassettes. (A replay's verdict, FIXED, FAILED,
    FLAKY, ERROR or PASSED, is another vocabulary: what a cassette did this time.)"""

    #: It failed in every confirming run.
    FAILED = "failed"
    #: It failed in some confirming runs only.
    FLAKY = "flaky"
    #: The run was interrupted before the confirming runs.
    UNCONFIRMED = "unconfirmed"
    #: An info finding, shown once: never shrunk, never confirmed.
    INFO = "info"

    @property
    def label(self) -> str:
        """How a text report heads it: ``FAILED``, ``FLAKY``, ..."""
        return self.value.upper()

    @classmethod
    def of(cls, reproduced: int, runs: int) -> Status:
        """FAILED when it reproduced in each of ``runs``, else FLAKY."""
        return cls.FAILED if reproduced == runs else cls.FLAKY


@dataclass(frozen=True, slots=True)
class OracleInfo:
    id: str
    severity: str
    rule: str
    summary: str


#: Rules of acp-fuzz's own, for oracles that no rule of the RFD or the schema states: each is
#: a row of :data:`acp_fuzz.core.rules.RULES` (its reading, and the RFD or schema words it
#: argues from, in docs/rules.md), so a new one cannot be cited without being listed there.
#: The prefix marks them as the harness's, never the spec's; the client's are
#: ``client_oracles.CLIENT_HARNESS_RULES``.
HARNESS_RULES: dict[str, str] = {
    r.id: r.reading for r in RULES
    if r.id.startswith("ACPFUZZ-") and not r.id.startswith("ACPFUZZ-CLIENT-")}

class Catalog(Mapping[str, OracleInfo]):
    """The oracles of one side, by id, in the order their checks registered, each with its
    *default* severity and rule: the rows the checks declare
    (:func:`~acp_fuzz.core.checks.check`, :func:`~acp_fuzz.core.checks.builtin`), never a
    table written beside them. Some
    oracles take the severity of the rule that the specific case breaks
    (``payload.invalid-accepted`` is MUST for an unknown mode, info for an empty
    ``content``); the finding always carries the one that applied.

    Reading it imports the side's built-in checks first (the module ``builtins``), so that a
    lookup made before any oracle ran (the command line's ``--oracle``) sees every built-in
    row; a user's check adds its row when its module is imported."""

    def __init__(self, builtins: str) -> None:
        self._rows: dict[str, OracleInfo] = {}
        self._builtins = builtins
        self._loaded = False

    def _read(self) -> dict[str, OracleInfo]:
        if not self._loaded:
            # Set first: the built-in modules read the catalogs while they register.
            self._loaded = True
            importlib.import_module(self._builtins)
        return self._rows

    def __getitem__(self, oracle: str) -> OracleInfo:
        return self._read()[oracle]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"Catalog({list(self)!r})"

    def add(self, row: OracleInfo) -> None:
        """Add a check's row (what its declaration does; :mod:`acp_fuzz.core.checks`)."""
        self._rows[row.id] = row

    def discard(self, oracle: str) -> None:
        """Remove a user's check's row (``unregister``)."""
        self._rows.pop(oracle, None)


#: The agent oracles (``acp-fuzz target``, ``replay``, ``matrix``): the rows of the built-in
#: checks of :mod:`acp_fuzz.core.builtin`, then the users'.
CATALOG = Catalog("acp_fuzz.core.builtin")

#: The client oracles (``acp-fuzz client``: :mod:`acp_fuzz.core.client_oracles`), apart from
#: :data:`CATALOG`: an agent campaign never judges them, nor a client campaign the agent's.
#: A user's client check (``@check(..., direction="client")``) adds its row here.
CLIENT_CATALOG = Catalog("acp_fuzz.core.client_oracles")

#: The catalog of each direction a check judges (:func:`acp_fuzz.core.checks.check`).
CATALOGS: dict[str, Catalog] = {"agent": CATALOG, "client": CLIENT_CATALOG}


def oracle_info(oracle: str) -> OracleInfo:
    """The catalog row of ``oracle``, an agent's or a client's (the one lookup over both);
    ``KeyError`` for an id neither catalog has."""
    info = CATALOG.get(oracle) or CLIENT_CATALOG.get(oracle)
    if info is None:
        raise KeyError(oracle)
    return info


def is_known(oracle: str) -> bool:
    """Whether ``oracle`` has a row in either catalog."""
    return oracle in CATALOG or oracle in CLIENT_CATALOG


@dataclass(frozen=True)
class Finding:
    """One thing an oracle saw. ``step`` is the index of the step that exposed it (or -1)."""

    oracle: str
    severity: str
    rule: str
    message: str
    step: int = -1
    session: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[str, str | None, int]:
        return (self.oracle, self.session, self.step)

    def to_wire(self) -> dict[str, Any]:
        return {"oracle": self.oracle, "severity": self.severity, "rule": self.rule,
                "message": self.message, "step": self.step, "session": self.session,
                "evidence": dict(self.evidence)}

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Finding:
        return cls(oracle=obj["oracle"], severity=obj["severity"], rule=obj["rule"],
                   message=obj.get("message", ""), step=int(obj.get("step", -1)),
                   session=obj.get("session"), evidence=obj.get("evidence", {}))


def is_failure(f: Finding, *, strict: bool = False) -> bool:
    """Whether a finding fails a run (its exit code, its JUnit case): MUST always, SHOULD
    only under ``strict``."""
    return f.severity == Severity.MUST or (strict and f.severity == Severity.SHOULD)


def is_reported(severity: object) -> bool:
    """Whether a finding of this severity is reported as a failure, shrunk and confirmed:
    MUST and SHOULD (whether it also fails the run is :func:`is_failure`); info findings are
    listed beside, never shrunk. Takes the severity, so that recorded (plain data) findings
    are judged by the same rule."""
    return severity in (Severity.MUST, Severity.SHOULD)

