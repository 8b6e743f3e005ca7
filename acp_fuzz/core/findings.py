"""Findings and the oracle catalog (pure).

Every finding names its oracle (a stable id), its severity (``MUST``, ``SHOULD`` or ``info``),
the rule id it rests on (docs/rules.md), the step that exposed it, and its evidence.
``docs/oracles.md`` is the user-facing catalog of the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from acp_fuzz.core.rules import RULES

__all__ = ["BUILTIN_CLIENT_ORACLES", "CATALOG", "CATALOGS", "CLIENT_CATALOG", "HARNESS_RULES",
           "SEVERITIES", "Finding", "OracleInfo", "Severity", "Status", "is_failure", "is_known",
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

#: The oracles, with their *default* severity and rule. Some oracles take the severity of the
#: rule that the specific case breaks (``payload.invalid-accepted`` is MUST for an unknown mode,
#: info for an empty ``content``); the finding always carries the one that applied.
CATALOG: dict[str, OracleInfo] = {o.id: o for o in [
    OracleInfo("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST",
               "a session's model request contains another session's client text"),
    OracleInfo("prompt.lost", "MUST", "SP-AGENT-APPLY-NEW-MUST",
               "an accepted prompt (new, re-sent or changed) is missing from the session's "
               "model request, and it is not the old one kept back either"),
    OracleInfo("prompt.altered", "MUST", "SP-AGENT-APPLY-NEW-MUST",
               "the prompt arrives, but not verbatim (truncated, a block dropped, mangled)"),
    OracleInfo("prompt.duplicated", "SHOULD", "ACPFUZZ-PROMPT-ONCE-SHOULD",
               "the prompt appears more than once in one model request"),
    OracleInfo("prompt.misplaced", "SHOULD", "SP-AGENT-APPEND-PLACEMENT-SHOULD",
               "the prompt sits in user or history content instead of the system slot"),
    OracleInfo("override.not-applied", "MUST", "SP-AGENT-OVERRIDE-REPLACES-DEF",
               "override mode, yet the agent's default instructions are still present"),
    OracleInfo("append.replaced-default", "MUST", "SP-AGENT-APPEND-ADDITIVE-DEF",
               "append mode, yet the agent's default instructions are gone"),
    OracleInfo("payload.invalid-accepted", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
               "an invalid payload, or a mode that is not advertised, got a success"),
    OracleInfo("payload.valid-rejected", "MUST", "SP-AGENT-APPEND-MUST",
               "a valid payload for an advertised capability got an error"),
    OracleInfo("reject.side-effect", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
               "a rejected request still created, forked or changed a session"),
    OracleInfo("agent.crash", "MUST", "SES-AGENT-BASELINE-MUST",
               "the agent process died"),
    OracleInfo("agent.hang", "MUST", "SES-AGENT-BASELINE-MUST",
               "the agent gave no answer within the timeout"),
    OracleInfo("protocol.malformed", "MUST", "FR-WIRE-NDJSON-MUST",
               "a malformed JSON-RPC message, or one that breaks the schema"),
    OracleInfo("session.history-lost", "MUST", "ACPFUZZ-CONVERSATION-KEPT-MUST",
               "after an accepted session/load or session/resume, the session's next model "
               "request holds none of its last completed turn: the conversation is gone"),
    OracleInfo("session.history-destroyed", "MUST", "ACPFUZZ-CONVERSATION-KEPT-MUST",
               "a load or resume the agent refused destroyed the session's conversation: "
               "after a later accepted one the model request lacks the turns before it"),
    OracleInfo("session.turn-failed", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
               "the first turn after an accepted prompt (new, load, resume or fork) fails, "
               "though the fake model answered and the agent runs other turns: the prompt "
               "was accepted and cannot be used"),
    OracleInfo("session.reattach-failed", "SHOULD", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
               "an advertised session/load or session/resume failed for a session the agent "
               "created and has a conversation for, with nothing in the request to refuse"),
    OracleInfo("prompt.change-deferred", "info", "SP-LIFECYCLE-DEFER-MAY",
               "a changed prompt on load, resume or fork was accepted but not (yet) applied"),
    OracleInfo("prompt.change-ignored", "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD",
               "a changed prompt is still not applied two turns after the agent rebuilt its "
               "prompt (a compaction; for an agent that cannot be made to compact, a load "
               "or resume in a new process)"),
    OracleInfo("lifecycle.omitted-fallback", "info", "SP-LIFECYCLE-OMIT-MAY",
               "which behaviour the agent chose for an omitted prompt (kept or default)"),
    OracleInfo("lifecycle.omitted-inconsistent", "info", "SP-LIFECYCLE-OMIT-MAY",
               "with the prompt omitted, one session kept its stored prompt and another, in "
               "the same situation, fell back to the defaults"),
    OracleInfo("defaults.too-small", "info", "SP-AGENT-OVERRIDE-REPLACES-DEF",
               "override and append are not judged: the learned default instructions are too "
               "small to tell kept from replaced"),
    OracleInfo("cancel.error", "MUST", "CANCEL-AGENT-STOPREASON-MUST",
               "a prompt cancelled mid-turn was answered with an error, not a stop reason"),
    OracleInfo("cancel.turn-kept", "SHOULD", "CANCEL-AGENT-STOP-SHOULD",
               "a session/cancel sent while the model was thinking, and the turn ended with "
               "another stop reason than cancelled"),
    OracleInfo("close.turn-kept", "SHOULD", "CANCEL-AGENT-STOP-SHOULD",
               "a session/close accepted while the model was thinking, and the session's turn "
               "ended with another stop reason than cancelled"),
    OracleInfo("close.turn-unanswered", "MUST", "SES-AGENT-CLOSE-CANCELS-MUST",
               "a session/close accepted while the model was thinking, and the session's "
               "session/prompt never answered"),
    OracleInfo("cancel-request.unanswered", "MUST", "CANCELREQ-AGENT-ANSWER-MUST",
               "a $/cancel_request of a session/prompt still unanswered, and the prompt never "
               "answered (neither a result nor -32800)"),
    OracleInfo("set-mode.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
               "a session/set_mode to one of the session's advertised modes, sent while the "
               "model was thinking, never answered"),
    OracleInfo("cancel-request.new-unanswered", "MUST", "CANCELREQ-AGENT-ANSWER-MUST",
               "a session/new with its $/cancel_request right behind it never answered "
               "(neither a result nor -32800)"),
    OracleInfo("cancel-request.session-left", "SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD",
               "a session/new (or session/fork) cancelled by its $/cancel_request and "
               "answered with an error, after which session/list shows a session no "
               "successful request created; or a load or resume so cancelled whose prompt "
               "then reaches the model"),
    OracleInfo("cancel-request.lifecycle-unanswered", "MUST", "CANCELREQ-AGENT-ANSWER-MUST",
               "a session/load, session/resume or session/fork with its $/cancel_request "
               "right behind it never answered (neither a result nor -32800)"),
    OracleInfo("fork.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
               "a session/fork of the session, sent while the model was thinking, never "
               "answered"),
    OracleInfo("set-config.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
               "a session/set_config_option of the session, sent while the model was "
               "thinking, never answered"),
    OracleInfo("delete.turn-unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
               "a session/delete accepted while the model was thinking, and the session's "
               "session/prompt never answered"),
    OracleInfo("delete.handling", "info", "ACPFUZZ-DELETE-LIVE-MAY",
               "how a turn ended whose session was deleted while the model was thinking"),
    OracleInfo("set-mode.refused-mid-turn", "SHOULD", "ACPFUZZ-SETMODE-ANYTIME-SHOULD",
               "a session/set_mode to one of the session's advertised modes, sent while the "
               "model was thinking, refused"),
    OracleInfo("second-prompt.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
               "a second session/prompt of a session, sent while its turn ran, never "
               "answered"),
    OracleInfo("second-prompt.handling", "info", "ACPFUZZ-SECOND-PROMPT-MAY",
               "what the agent did with a second session/prompt of a session whose turn "
               "ran: refused it, stopped the first turn, ran both, or queued it"),
    OracleInfo("turn.silent-failure", "SHOULD", "ACPFUZZ-FAILURE-VISIBLE-SHOULD",
               "a turn whose model request failed, and that never got an answer, ended with "
               "end_turn and nothing said"),
    OracleInfo("session.listed-other-id", "SHOULD", "ACPFUZZ-LIST-IDS-SHOULD",
               "after a session was loaded or resumed in a new process, session/list does "
               "not show its id and shows an id no request created"),
    OracleInfo("session.deleted-usable", "info", "ACPFUZZ-DELETE-LIVE-MAY",
               "a turn of a session was served after session/delete of it succeeded"),
    OracleInfo("prompt.replayed-as-user", "SHOULD", "ACPFUZZ-REPLAY-NOT-USER-SHOULD",
               "a session's own client prompt shown to the client as a user message (what a "
               "load replays, or a turn's echo)"),
    OracleInfo("capability.drift", "SHOULD", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
               "a restarted agent process advertises other capabilities than the run's first "
               "(same command, HOME and protocol offer)"),
    OracleInfo("capability.refused", "SHOULD", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
               "a method the agent's advertised capability gates answered -32601 Method not "
               "found"),
    OracleInfo("scope.tools-changed", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF",
               "a session with an override (append: SHOULD) prompt offers the model other "
               "tools than the sessions without a prompt"),
    OracleInfo("scope.config-changed", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF",
               "session/new with an override (append: SHOULD) prompt answers other modes or "
               "config options than without a prompt"),
    OracleInfo("mcp.tool-missing", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF",
               "the tool of an MCP server a session named is missing from its turn under "
               "override (append: SHOULD), while sessions without a prompt get theirs"),
    OracleInfo("mcp.tool-leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST",
               "a session's model request offers the tool of an MCP server another session "
               "named"),
    OracleInfo("payload.probe", "info", "SP-CLIENT-GATE-MUSTNOT",
               "how an agent that does not advertise systemPrompt answered one (robustness)"),
]}


#: The client oracles (``acp-fuzz client``: :mod:`acp_fuzz.core.client_oracles`), apart from
#: :data:`CATALOG`: an agent campaign never judges them, nor a client campaign the agent's.
#: A user's client check (``@check(..., direction="client")``) adds its row here.
CLIENT_CATALOG: dict[str, OracleInfo] = {o.id: o for o in [
    OracleInfo("client.prompt-unadvertised", "MUST", "SP-CLIENT-GATE-MUSTNOT",
               "systemPrompt in a request, although the agent did not advertise it"),
    OracleInfo("client.override-unadvertised", "MUST", "SP-CLIENT-OVERRIDE-GATE-MUSTNOT",
               "mode \"override\" without the mode.override sub-capability"),
    OracleInfo("client.prompt-non-text", "MUST", "SP-CLIENT-CONTENT-TEXT-MUSTNOT",
               "a systemPrompt content block that is not text"),
    OracleInfo("client.prompt-empty", "MUST", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT",
               "systemPrompt content: []"),
    OracleInfo("client.prompt-malformed", "MUST", "ACPFUZZ-CLIENT-PROMPT-SHAPE-MUST",
               "a systemPrompt that is not an object {mode, content: [...]}"),
    OracleInfo("client.capability-unadvertised", "MUST", "CAP-CLIENT-GATE-MUSTNOT",
               "a gated method, field or prompt content type without its capability"),
    OracleInfo("client.before-initialize", "MUST", "INIT-CLIENT-FIRST-MUST",
               "a request before initialize on the connection"),
    OracleInfo("client.prompt-not-resent", "SHOULD", "SP-CLIENT-RESEND-SHOULD",
               "a load, resume or fork without the session's systemPrompt"),
    OracleInfo("client.prompt-changed", "SHOULD", "SP-CLIENT-RESEND-SHOULD",
               "a load, resume or fork with another systemPrompt than the session's"),
    OracleInfo("client.legacy-meta-prompt", "SHOULD", "ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD",
               "a vendor _meta prompt where the standard systemPrompt is advertised"),
]}

#: The ids of the built-in client oracles (what :data:`CLIENT_CATALOG` held before any
#: user's check added a row).
BUILTIN_CLIENT_ORACLES: tuple[str, ...] = tuple(CLIENT_CATALOG)

#: The catalog of each direction a check judges (:func:`acp_fuzz.core.checks.check`).
CATALOGS: dict[str, dict[str, OracleInfo]] = {"agent": CATALOG, "client": CLIENT_CATALOG}


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

