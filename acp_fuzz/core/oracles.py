"""The oracles: pure functions from a recorded history to findings.

:func:`evaluate` walks the history once, in order, and keeps the harness's *own* model of
every logical session: which system prompts a correct agent may be using right now. Each
state is a list of candidates. A session made with a valid ``append`` prompt has one candidate
(that prompt, and missing it breaks a MUST). A ``session/load`` with a changed prompt has two:
the new prompt (SHOULD) and the old one (the RFD lets the agent defer, SP-LIFECYCLE-DEFER-MAY).
A lifecycle request that omits the prompt has two equal candidates (kept, or back to the
defaults; SP-LIFECYCLE-OMIT-MAY). Every turn request the gateway tied to a session is judged
against that session's candidates; the first turn collapses them to what the agent chose.

The same function runs live after each step and offline on a cassette, so a live run and
``acp-fuzz replay --offline`` agree by construction.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from acp_fuzz.core.checks import REGISTRY, CheckContext
from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.findings import CATALOG, Finding
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.lifecycle import Lifecycle
from acp_fuzz.core.payloads import OMIT, Capabilities, Classification, blocks_of, classify
from acp_fuzz.core.steps import advertises_compact, describe, elsewhere

__all__ = ["Baseline", "Evaluator", "evaluate", "learn_baseline"]

#: A block shorter than this (after stripping) is not used as evidence: a short text such as
#: "Be brief." can occur anywhere by chance, and a false alarm costs more than a missed one.
MIN_SIGNIFICANT = 12
#: Default instructions count as present when this share of the baseline lines is in the
#: system slot, and as gone below the lower bound; in between, no verdict is given.
DEFAULT_PRESENT, DEFAULT_ABSENT = 0.5, 0.1
MIN_BASELINE_LINE = 16
SEP = "\n\x00\n"


@dataclass(frozen=True)
class Baseline:
    """The agent's own default instructions, learned from sessions without a client prompt.

    ``lines`` are the system-slot lines that every baseline request shared: dynamic parts
    (dates, paths, ids) differ between baseline sessions, which are made with different
    working directories, and drop out of the intersection. Of these, only
    :attr:`instructions` count: lines that are not instructions (``x-anthropic-billing-header:
    …`` and other ``key: value`` headers, Markdown headings, tag-only markers, ids, anything
    with fewer than three words) are left out.

    ``override.not-applied`` and ``append.replaced-default`` judge only a
    :attr:`substantial` baseline: at least :data:`MIN_BASELINE_LINES` instruction lines and
    :data:`MIN_BASELINE_CHARS` characters. Below that, a share of "the defaults" is one or two
    lines (an SDK's one-line identity, say) and one kept line flips it from 0 to 100 %.
    """

    lines: frozenset[str] = frozenset()

    @property
    def instructions(self) -> frozenset[str]:
        """The baseline lines that are instructions (see :func:`is_instruction`)."""
        return frozenset(ln for ln in self.lines if is_instruction(ln))

    @property
    def known(self) -> bool:
        """Whether calibration saw any default instruction at all."""
        return bool(self.instructions)

    @property
    def size_lines(self) -> int:
        return len(self.instructions)

    @property
    def size_chars(self) -> int:
        """The size of the default instructions in characters (the lines, without newlines)."""
        return sum(len(ln) for ln in self.instructions)

    @property
    def substantial(self) -> bool:
        """Whether there is enough default text to judge override and append by."""
        return self.size_lines >= MIN_BASELINE_LINES and self.size_chars >= MIN_BASELINE_CHARS

    def share_in(self, text: str) -> float:
        lines = self.instructions
        if not lines:
            return 0.0
        return sum(1 for line in lines if line in text) / len(lines)

    def kept_in(self, text: str) -> list[str]:
        """The baseline lines (instructions or not) that ``text`` holds, in order."""
        return sorted(ln for ln in self.lines if ln in text)

    def to_wire(self) -> list[str]:
        return sorted(self.lines)

    @classmethod
    def from_wire(cls, obj: Any) -> Baseline:
        if not isinstance(obj, list):
            return cls()
        return cls(frozenset(x for x in obj if isinstance(x, str)))


#: A baseline is substantial (override and append are judged) from this many instruction
#: lines and characters on. The reference agent's defaults are 4 lines and 237 characters,
#: codex's and Claude Code's hundreds of lines; the Claude Agent SDK's bare default (a billing
#: header and the one-line identity "You are a Claude agent, built on …") is 1 line, ~60.
MIN_BASELINE_LINES = 3
MIN_BASELINE_CHARS = 150
_HEADER = re.compile(r"^[A-Za-z][\w.]*-[\w.-]*\s*:|^[\w.-]+\s*:\s*[\w.-]+=")
_MARKER = re.compile(r"^(#|<[^>]*>$|[-=*_]{3,}$)")
_WORD = re.compile(r"[^\W\d_]{2,}")


def is_instruction(line: str) -> bool:
    """Whether a default-prompt line reads as an instruction to the model: three or more
    words, and not a ``key-name: value`` header (``x-anthropic-billing-header: cc_version=…``),
    a Markdown heading, a tag-only marker line or a rule. Ids, hashes and dates have too few
    words."""
    s = line.strip()
    if _HEADER.match(s) or _MARKER.match(s):
        return False
    return len(_WORD.findall(s)) >= 3


def learn_baseline(system_texts: Sequence[str]) -> Baseline:
    """Learn the default instructions from the system-slot text of >= 2 baseline requests."""
    sets = []
    for text in system_texts:
        sets.append({ln.strip() for ln in text.splitlines()
                     if len(ln.strip()) >= MIN_BASELINE_LINE})
    if len(sets) < 2:
        return Baseline(frozenset(sets[0]) if sets else frozenset())
    common = set.intersection(*sets)
    return Baseline(frozenset(common))


# -- the harness's model of a session -----------------------------------------------------------

#: The rule an accepted prompt rests on, by how it arrived: on ``session/new`` it must be
#: applied (SP-AGENT-APPLY-NEW-MUST); on a load, resume or fork the schema says an agent that
#: cannot apply it MUST answer with an error instead (SP-AGENT-ERROR-NOSIDEEFFECT-MUST), so
#: accepting it claims that it can.
NEW_RULE = "SP-AGENT-APPLY-NEW-MUST"
LIFECYCLE_RULE = "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"
OMIT_RULE = "SP-LIFECYCLE-OMIT-MAY"
#: How many steps of a session's history its findings quote as evidence.
MAX_TRAIL = 24
#: How many turns after a rebuild may still show the old prompt before a deferred change
#: counts as ignored. One turn of slack: an agent may rebuild at the end of the turn that
#: triggered it (a compaction forced by the usage a reply reported lands before the *next*
#: request), so only a second turn on the old prompt shows the rebuild did not apply it.
#: Shrinking keeps both turns: with one, the finding is gone.
IGNORED_AFTER = 2


@dataclass(frozen=True)
class Prompt:
    mode: str
    blocks: tuple[str, ...]
    step: int

    @property
    def significant(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.strip() for b in self.blocks
                                   if len(b.strip()) >= MIN_SIGNIFICANT))


def _same(a: Prompt | None, b: Prompt | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.mode == b.mode and a.blocks == b.blocks


@dataclass(frozen=True)
class Candidate:
    """A prompt a correct agent may be sending for a session right now.

    ``label``: ``applied`` (the prompt the last request carried, or the session's settled
    prompt), ``deferred`` (the one before a change, SP-LIFECYCLE-DEFER-MAY), ``kept`` or
    ``default`` (the two choices for an omitted prompt, SP-LIFECYCLE-OMIT-MAY). ``severity``
    and ``rule``: what missing it costs when it is the first candidate and nothing fits.
    ``origin``: how the prompt arrived (``new``, ``lifecycle``, or ``kept`` after an omitted
    one), which sets the severity of the default-instruction checks."""

    prompt: Prompt | None  # None: the agent's defaults only
    label: str
    severity: str
    rule: str
    origin: str = "new"


@dataclass
class SessionModel:
    """What the oracles know of one session beside its place in the lifecycle (which
    :class:`acp_fuzz.core.lifecycle.Lifecycle` keeps): the prompts it may be using, its
    conversation, and the steps behind them."""

    agent_id: str | None
    candidates: list[Candidate]
    tainted: bool = False  # state unknown (an invalid payload was accepted)
    own: set[str] = field(default_factory=set)  # every block this session may legitimately hold
    #: What rebuilt the session's prompt since the last accepted change, as evidence names
    #: it ("the compaction at step 7", or, for an agent that cannot be made to compact, "a
    #: cold load at step 4"), or ``None``. After a rebuild a change can no longer be
    #: deferred: :data:`IGNORED_AFTER` turns on the old prompt make it ``prompt.change-ignored``.
    rebuilt: str | None = None
    #: The steps of the turns since the rebuild that still showed the old prompt.
    old_turns: set[int] = field(default_factory=set)
    #: The last compaction (its trail line), until a turn shows a prompt that fits: a prompt
    #: lost there names it.
    compacted: str | None = None
    #: The step whose compaction was last noted (one compaction may make several requests).
    compacted_step: int | None = None
    trail: list[str] = field(default_factory=list)  # the steps behind this session's state
    #: Vendor ``_meta`` texts sent next to the standard prompt: field path -> text.
    vendor: dict[str, str] = field(default_factory=dict)
    #: ``prompt.change-deferred`` findings to withdraw when the change shows up after all.
    deferred_keys: list[tuple[str, str | None, int]] = field(default_factory=list)
    #: An omitted prompt with a stored one to keep, until a turn shows the choice:
    #: (op, cold) and the steps that led there.
    omit_situation: tuple[str, bool] | None = None
    omit_trail: list[str] = field(default_factory=list)
    #: The nonces of this session's completed turns whose request reached the model, oldest
    #: first: its conversation, as the harness can recognise it in later requests.
    conversation: list[str] = field(default_factory=list)
    #: The nonce of the turn in flight once its request reached the model (added to
    #: ``conversation`` when the turn completes).
    turn_seen: str | None = None
    #: A load or resume the agent accepted since the last turn (and the step's line), whose
    #: first turn must still carry the conversation (SES-AGENT-LOAD-REPLAY-MUST,
    #: SES-AGENT-RESUME-NOREPLAY-MUST).
    reattached: tuple[str, str] | None = None
    #: Loads and resumes of this session the agent refused (their steps' lines): a later
    #: conversation lost may be their damage.
    failed_reattach: list[str] = field(default_factory=list)
    #: The accepted new, load, resume or fork with a valid prompt (its step line) that the
    #: session's next turn is the first to use, and the rejected load or resume on the live
    #: session since its last turn: a failing turn after either is judged.
    fresh_prompt: str | None = None
    rejected_change: str | None = None
    #: A turn of this session completed (its own, in this run).
    turned: bool = False
    #: A ``session/set_mode`` or ``session/set_config_option`` succeeded: the default
    #: instructions may be the new mode's (or model's), so override and append are no longer
    #: judged against the learned baseline.
    mode_switched: bool = False

    def note(self, line: str) -> None:
        self.trail.append(line)
        del self.trail[:-MAX_TRAIL]


@dataclass
class _State:
    strict: bool
    baseline: Baseline
    caps: dict[str, Any] = field(default_factory=dict)
    dialect: str | None = None  # recorded at initialize; None in older cassettes
    protocol: int = 1  # the version the agent answered (older cassettes: v1)
    sessions: dict[str, SessionModel] = field(default_factory=dict)
    #: Which sessions exist and are open, as the agent's answers left them.
    life: Lifecycle = field(default_factory=Lifecycle)
    known_ids: set[str] = field(default_factory=set)
    step: dict[str, Any] = field(default_factory=dict)
    rejected: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    accepted_blocks: set[str] = field(default_factory=set)
    all_blocks: dict[str, set[str]] = field(default_factory=dict)  # handle -> every block sent
    short_blocks: dict[str, set[str]] = field(default_factory=dict)  # the same, too short
    findings: dict[tuple[str, str | None, int], Finding] = field(default_factory=dict)
    requests: dict[str | int | float, str] = field(default_factory=dict)  # id -> method
    expecting_exit: bool = False
    #: The first choice seen for an omitted prompt, per situation: (choice, session, steps).
    omitted_choices: dict[tuple[str, bool], tuple[str, str, list[str]]] = field(
        default_factory=dict)
    too_small_reported: bool = False
    #: The agent can be made to compact (it advertised a ``compact`` command, the run's
    #: profile can force it, or a compaction was seen): compaction, not a cold load, is then
    #: the rebuild that ends a deferral (SP-LIFECYCLE-DEFER-MAY).
    can_compact: bool = False
    #: Turns that completed in the run (any session): the agent can run turns at all.
    turns_ok: int = 0
    #: Sessions whose model request got an error status during the current step (the fake
    #: model's own error, e.g. a forced context overflow, explains a failing turn).
    model_failed: set[str] = field(default_factory=set)
    #: (oracle, rule) -> how many times the history gave that oracle something to judge under
    #: that rule, whatever the verdict: what ``acp-fuzz matrix`` calls tested.
    judged: dict[tuple[str, str], int] = field(default_factory=dict)

    def judge(self, oracle: str, rule: str | None = None) -> None:
        """Count one opportunity for ``oracle`` to fail (under ``rule``, by default its
        catalog rule). Called where the oracle compares what happened with what is owed, so
        a rule with opportunities and no finding is one the agent was seen to follow."""
        key = (oracle, rule or CATALOG[oracle].rule)
        self.judged[key] = self.judged.get(key, 0) + 1

    def add(self, oracle: str, message: str, *, severity: str | None = None,
            rule: str | None = None, session: str | None = None, step: int | None = None,
            **evidence: Any) -> tuple[str, str | None, int]:
        info = CATALOG[oracle]
        f = Finding(oracle=oracle, severity=severity or info.severity, rule=rule or info.rule,
                    message=message, step=self.step.get("index", -1) if step is None else step,
                    session=session, evidence=evidence)
        self.findings.setdefault(f.key(), f)
        return f.key()


def evaluate(events: Iterable[Event], *, baseline: Baseline | None = None,
             strict: bool = False) -> list[Finding]:
    """Run every oracle over ``events`` (in ``seq`` order) and return the findings.

    ``strict`` turns a change that was accepted but never applied (a deferral, which the RFD
    allows) into a SHOULD finding instead of info.
    """
    judge = Evaluator(baseline=baseline, strict=strict)
    judge.feed(events)
    return judge.findings()


class Evaluator:
    """:func:`evaluate`, incrementally: feed the events as they come, read the findings any
    time. The oracles are one pass over the history in order, so feeding a history in pieces
    gives exactly the findings of evaluating it whole, at a cost linear in its length (the
    campaign judges after every step)."""

    def __init__(self, *, baseline: Baseline | None = None, strict: bool = False) -> None:
        self._st = _State(strict=strict, baseline=baseline or Baseline())
        self._seen = 0
        self._contexts: dict[str, CheckContext] = {}

    def feed(self, events: Iterable[Event]) -> None:
        """Judge events not seen yet: ``events`` is the new tail, or the whole history so far
        (events with a ``seq`` already judged are skipped)."""
        for ev in events:
            if ev.seq < self._seen:
                continue
            self._seen = ev.seq + 1
            handler = _HANDLERS.get(ev.kind)
            if handler is not None:
                handler(self._st, ev)
            for oracle, chk in list(REGISTRY.items()):
                # The checks users register (acp_fuzz.core.checks) see each event after the
                # built-in oracles, with the same state, and report into the same findings.
                ctx = self._contexts.get(oracle)
                if ctx is None:
                    ctx = self._contexts[oracle] = CheckContext(oracle, self._st)
                try:
                    chk.run(ctx, ev)
                except Exception as e:  # a user's check: say whose, in one line
                    raise HarnessError(f"check {oracle} failed on event {ev.seq} ({ev.kind}): "
                                       f"{type(e).__name__}: {e}") from e

    def findings(self) -> list[Finding]:
        return sorted(self._st.findings.values(),
                      key=lambda f: (f.step, f.oracle, f.session or ""))

    def judged(self) -> dict[tuple[str, str], int]:
        """How many times each (oracle, rule) had something to judge so far, found or not:
        the evidence that a rule was *tested*, beside :meth:`findings` that say it failed."""
        return dict(self._st.judged)


# -- event handlers -----------------------------------------------------------------------------

def _on_step(st: _State, ev: Event) -> None:
    st.step = dict(ev.data)
    st.model_failed = set()
    args = st.step.get("args", {})
    handle = args.get("session")
    sp = args.get("systemPrompt")
    owner = args.get("new", handle) if args.get("op") == "fork" else handle
    texts = {b.strip() for b in blocks_of(sp)} - {""}
    if texts and isinstance(owner, str):
        # Significant blocks are evidence (leaks); short ones only help name a failure.
        for b in texts:
            kept = st.all_blocks if len(b) >= MIN_SIGNIFICANT else st.short_blocks
            kept.setdefault(owner, set()).add(b)
    st.expecting_exit = args.get("op") == "restart"


def _on_verdict(st: _State, ev: Event) -> None:
    d = ev.data
    what = d.get("what")
    if what == "initialize":
        caps = d.get("capabilities")
        st.caps = dict(caps) if isinstance(caps, Mapping) else {}
        dialect = d.get("dialect")
        st.dialect = dialect if isinstance(dialect, str) else None
        proto = d.get("protocol")
        answered = proto.get("answered") if isinstance(proto, Mapping) else None
        st.protocol = answered if answered in (1, 2) else 1
        forced = d.get("compaction")
        st.can_compact = st.can_compact or (isinstance(forced, list) and bool(forced))
        return
    if what == "probe-list":
        listed = d.get("sessions")
        if isinstance(listed, list) and _last_rejected_creation(st):
            st.judge("reject.side-effect")
            extra = sorted(set(listed) - st.known_ids)
            if extra:
                st.add("reject.side-effect",
                       f"session/list shows {len(extra)} session(s) that no successful request "
                       "created, after a rejected request",
                       session=st.step.get("args", {}).get("session"),
                       listed=listed, unexpected=extra)
        return
    if what != "reply":
        return
    outcome = d.get("outcome")
    args = st.step.get("args", {})
    op = args.get("op")
    if outcome is not None:
        st.judge("agent.hang")
        st.judge("agent.crash")
    if outcome == "timeout":
        beside = " (or to the turn running beside it)" if args.get("busy") else ""
        st.add("agent.hang", f"no answer to {_said(st, op)}{beside} within the timeout",
               session=args.get("session"))
        return
    if outcome == "exited" and op != "restart":
        st.add("agent.crash", f"the agent process died during {_said(st, op)}",
               session=args.get("session"))
        return
    if outcome == "exited":
        st.add("agent.crash", "the agent did not come back after a restart")
        return
    if outcome == "error" and isinstance(d.get("error"), Mapping) and "harness" in d["error"]:
        st.add("protocol.malformed", f"{op}: {d['error']['harness']}",
               rule="FR-WIRE-NDJSON-MUST", session=args.get("session"))
    _transition(st, op, args, outcome, d)


def _said(st: _State, op: Any) -> str:
    """A step op as the run sent it, for messages: v2 sends a load as a resume that replays
    from the start (SP-V2-NOLOAD-DEF)."""
    return "resume (replayFrom start)" if op == "load" and st.protocol >= 2 else str(op)


def _last_rejected_creation(st: _State) -> bool:
    args = st.step.get("args", {})
    return args.get("op") in ("new", "fork") and st.step.get("_outcome") == "error"


def _transition(st: _State, op: Any, args: Mapping[str, Any], outcome: Any,
                verdict: Mapping[str, Any]) -> None:
    st.step["_outcome"] = outcome
    cls = _classify(st, op, args)
    kind = cls.get("kind")
    idx = st.step.get("index", -1)
    sp = args.get("systemPrompt")
    handle = args.get("session")
    blocks = blocks_of(sp)

    live = st.life.is_open(handle)
    answered = outcome in ("ok", "error")
    if op == "cancel" and live and answered:
        # Only a session this agent process has open: after a restart (not loaded again) or
        # a close, the prompt is about an unknown session and an error is the right answer.
        st.judge("cancel.error")
        if outcome == "error":
            st.add("cancel.error", "the prompt cancelled mid-turn got an error instead of a "
                   "stop reason", session=handle, error=_clip(verdict.get("error")))
        elif st.protocol >= 2 and verdict.get("stopReason") == "error":
            # v2: the turn's end is its idle state_update; "error" there is v1's error answer.
            st.add("cancel.error", "the prompt cancelled mid-turn ended its turn with stop "
                   "reason error instead of cancelled", session=handle)

    # Payload oracles: judged on the answer alone.
    if kind == "invalid" and answered:
        st.judge("payload.invalid-accepted", cls.get("rule"))
        if outcome == "ok":
            st.add("payload.invalid-accepted",
                   f"{_said(st, op)} with an invalid systemPrompt ({cls.get('reason')}) got a "
                   "success",
                   severity=cls.get("severity") or "MUST", rule=cls.get("rule"),
                   session=handle, reason=cls.get("reason"), systemPrompt=_clip(sp))
    if kind == "probe" and outcome is not None:
        if answered:
            st.judge("payload.probe")
        st.add("payload.probe",
               f"{_said(st, op)} carried a systemPrompt the agent does not advertise; it answered "
               f"{outcome}",
               session=handle)
    if kind == "valid" and answered:
        err = verdict.get("error") or {}
        code = err.get("code") if isinstance(err, Mapping) else None
        mode = sp.get("mode") if isinstance(sp, Mapping) else None
        rule = "SP-AGENT-OVERRIDE-MUST" if mode == "override" else "SP-AGENT-APPEND-MUST"
        sev = None
        if op != "new" and not _resent(st, op, args, sp):
            # A *changed* prompt on load, resume or fork: applying it is a SHOULD
            # (SP-LIFECYCLE-CHANGE-SHOULD), and an agent that cannot apply it answers
            # with an error instead (SP-AGENT-ERROR-NOSIDEEFFECT-MUST allows exactly
            # that). Re-sending the session's own prompt is different: nothing changes.
            sev, rule = "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD"
        st.judge("payload.valid-rejected", rule)
        # On load/resume/fork an error may be about the session, not the prompt: only an
        # invalid-params answer is pinned on the payload, and not when the request also
        # moved the session or added roots (the schema lets an agent refuse a load or resume
        # whose cwd is not the session's), nor when a turn of the session was running (a
        # busy session may refuse a change; the turns after judge that it changed nothing).
        if outcome == "error" and (op == "new" or (code == -32602 and not elsewhere(args)
                                                   and not args.get("busy"))):
            st.add("payload.valid-rejected",
                   f"{_said(st, op)} with a valid {mode!r} systemPrompt got error {code}",
                   severity=sev, rule=rule, session=handle, error=_clip(err),
                   systemPrompt=_clip(sp))
    if op == "prompt" and answered:
        _judge_turn_failed(st, handle, outcome, verdict)
    if op in ("load", "resume") and outcome == "error" and handle in st.sessions \
            and live and not st.life.cold(handle):
        # Refused on a session this process has open: nothing may change (its next turn is
        # judged by _judge_turn_failed).
        st.sessions[handle].rejected_change = f"{idx + 1}: {_describe(args)}"
    if op in ("load", "resume") and answered:
        _judge_reattach_failed(st, op, args, kind, outcome, verdict)
        if outcome == "error" and handle in st.sessions:
            st.sessions[handle].failed_reattach.append(f"{idx + 1}: {_describe(args)}")
    if outcome == "error" and blocks:
        st.rejected.append((idx, tuple(b.strip() for b in blocks
                                       if len(b.strip()) >= MIN_SIGNIFICANT)))

    if outcome != "ok":
        return
    cold = st.life.cold(handle)
    st.life.apply(args)
    if blocks:
        st.accepted_blocks.update(b.strip() for b in blocks)
    prompt = Prompt(str(sp["mode"]), blocks, idx) if kind == "valid" and isinstance(sp, Mapping) \
        else None
    sid = verdict.get("sessionId")
    if isinstance(sid, str):
        st.known_ids.add(sid)
    line = f"{idx + 1}: {_describe(args)}"
    vendor = {k: v for k, v in st.step.get("_vendor", {}).items()
              if v.strip() not in {b.strip() for b in blocks}}

    fresh = line if kind == "valid" else None
    if isinstance(handle, str) and handle in st.sessions and op not in ("prompt", "cancel"):
        # Anything else done to the session since makes a failing turn less its prompt's.
        st.sessions[handle].fresh_prompt = None
    if op == "new" and isinstance(handle, str):
        m = SessionModel(sid, [], vendor=vendor, fresh_prompt=fresh)
        if kind == "valid":
            m.candidates = [Candidate(prompt, "applied", "MUST", NEW_RULE)]
        elif kind in ("omitted", "null"):
            m.candidates = [Candidate(None, "default", "MUST", "SP-NEW-OMIT-DEFAULT-DEF")]
        else:
            m.tainted = True
        if prompt:
            m.own.update(prompt.significant)
        m.note(line)
        st.sessions[handle] = m
    elif op in ("load", "resume") and handle in st.sessions:
        m = st.sessions[handle]
        m.note(line)
        if m.conversation:
            m.reattached = (op, line)
        _reattach(st, m, op, prompt, kind, cold, vendor, line)
        m.tainted = m.tainted or kind in ("invalid", "probe")
        m.fresh_prompt = fresh
    elif op == "fork" and handle in st.sessions and isinstance(args.get("new"), str):
        src = st.sessions[handle]
        m = SessionModel(sid, list(src.candidates), tainted=src.tainted,
                         own=set(src.own), rebuilt=src.rebuilt,
                         old_turns=set(src.old_turns), trail=list(src.trail),
                         vendor=dict(src.vendor), mode_switched=src.mode_switched)
        # The fork's conversation starts empty: how much of its source's context a fork
        # carries is the agent's choice (SES-FORK-DEF), so only its own turns are owed.
        m.note(line)
        _reattach(st, m, op, prompt, kind, False, vendor, line)
        m.tainted = m.tainted or kind in ("invalid", "probe")
        m.fresh_prompt = fresh
        st.sessions[args["new"]] = m
    elif op == "delete":
        # Gone for good. Its prompt stays foreign to every other session (``all_blocks``):
        # a deleted session's prompt in a later session's request is a leak.
        st.sessions.pop(handle, None)  # type: ignore[arg-type]
    elif op == "restart":
        for m in st.sessions.values():
            m.note(line)
    elif op in ("set_mode", "set_config_option") and handle in st.sessions:
        # The prompt belongs to the session, not to a mode or a model: every candidate
        # stands, and the next turn is judged against them. A mode (or a model) may bring
        # instructions of its own (a plan mode's), so the defaults learned before the
        # switch no longer judge it.
        m = st.sessions[handle]
        m.note(line)
        m.mode_switched = True
    elif op == "set_title" and handle in st.sessions:
        # A title is the session's label, not its instructions: every candidate stands (the
        # defaults too), and the next turn is judged against them.
        st.sessions[handle].note(line)
    elif op == "compact" and handle in st.sessions:
        m = st.sessions[handle]
        m.note(line)
        if args.get("by") == "command":
            # The agent's own compaction command, answered with success: it compacted (what
            # it sent the model meanwhile was its summary, not a turn: _on_model).
            _compacted(st, m, handle, "its compaction command")
        elif m.turn_seen is not None:
            # A turn with the context reported near its limit: a turn like any other.
            m.conversation.append(m.turn_seen)
        m.turn_seen = None
    elif op in ("prompt", "cancel", "close") and handle in st.sessions:
        m = st.sessions[handle]
        m.note(line)
        if op == "prompt" and m.turn_seen is not None:
            # A completed turn (not a cancelled one: an agent may drop those) is part of the
            # conversation from now on.
            m.conversation.append(m.turn_seen)
        m.turn_seen = None


def _judge_turn_failed(st: _State, handle: Any, outcome: Any,
                       verdict: Mapping[str, Any]) -> None:
    """A turn's answer, judged against what came before it on the session.

    ``session.turn-failed`` (MUST, SP-AGENT-ERROR-NOSIDEEFFECT-MUST): the first turn after
    an accepted new, load, resume or fork that carried a valid prompt fails (an error
    answer; in v2 an ``error`` stop reason). An agent that cannot apply a prompt must refuse
    the request instead, so accepting it and then failing the turn that would use it breaks
    that MUST (a large prompt accepted and refused only at turn time). Judged only when the
    agent ran a turn in this run (so it can), and not when the fake model answered one of
    the turn's requests with an error (a forced overflow, say).

    ``reject.side-effect`` (MUST, the same rule): a load or resume refused on a session this
    process had open changes nothing, so the session's next turn, after turns of its own
    that completed, must not fail either."""
    m = st.sessions.get(handle) if isinstance(handle, str) else None
    if m is None:
        return
    failed = outcome == "error" or (st.protocol >= 2 and verdict.get("stopReason") == "error")
    err = verdict.get("error")
    harness = isinstance(err, Mapping) and "harness" in err  # protocol.malformed has it
    fresh, m.fresh_prompt = m.fresh_prompt, None
    rejected, m.rejected_change = m.rejected_change, None
    blamed = handle in st.model_failed or harness or m.tainted
    if fresh is not None and st.turns_ok and not blamed:
        st.judge("session.turn-failed")
        if failed:
            st.add("session.turn-failed",
                   f"session {handle}: the first turn after the accepted prompt of step "
                   f"{fresh.split(':', 1)[0]} failed", session=handle, accepted_by=fresh,
                   error=_clip(err), stopReason=verdict.get("stopReason"),
                   steps=list(m.trail))
    if rejected is not None and m.turned and not blamed:
        st.judge("reject.side-effect")
        if failed:
            st.add("reject.side-effect",
                   f"session {handle}: its turn fails after the refused request of step "
                   f"{rejected.split(':', 1)[0]}, though its turns before it completed",
                   session=handle, rejected_by=rejected, error=_clip(err),
                   steps=list(m.trail))
    if not failed:
        st.turns_ok += 1
        m.turned = True


def _judge_reattach_failed(st: _State, op: str, args: Mapping[str, Any], kind: Any,
                           outcome: Any, verdict: Mapping[str, Any]) -> None:
    """``session.reattach-failed``: an advertised load or resume refused a session that the
    agent created, that holds a completed turn and is not closed, in its own ``cwd``, with
    no prompt or the session's own prompt re-sent: nothing in the request to refuse.

    ACP does not say a load must succeed, so this is the harness's SHOULD
    (ACPFUZZ-REATTACH-ADVERTISED-SHOULD): advertising the method promises it works for such
    a session. A session without a turn is not judged (an agent may persist a session only
    once it has a conversation), nor one closed since, nor a changed or tainted prompt
    (``payload.valid-rejected`` judges a refused prompt)."""
    handle = args.get("session")
    m = st.sessions.get(handle) if isinstance(handle, str) else None
    if m is None or st.life.closed(handle) or m.tainted or not m.conversation:
        return
    # A load is a resume that replays from the start in v2 (SP-V2-NOLOAD-DEF).
    if not (st.caps.get("resume") if op == "resume"
            else st.caps.get("load") or st.caps.get("replay")):
        return
    sp = args.get("systemPrompt")
    if not (kind in ("omitted", "null") or (kind == "valid" and _resent(st, op, args, sp))):
        return
    if args.get("extra"):
        return  # a vendor extension's fields, which the agent may refuse
    if elsewhere(args):
        return  # another directory: a load or resume may require the session's own
    if args.get("busy"):
        return  # sent while a turn of the session ran: a busy session may refuse it
    st.judge("session.reattach-failed")
    if outcome != "error":
        return
    err = verdict.get("error")
    if isinstance(err, Mapping) and "harness" in err:
        return  # a malformed answer: protocol.malformed has it
    if any(f.oracle == "payload.valid-rejected" and f.step == st.step.get("index", -1)
           for f in st.findings.values()):
        return
    cold = st.life.cold(handle)
    turns = len(m.conversation)
    st.add("session.reattach-failed",
           f"session/{_said(st, op)} of session {handle} ({turns} completed turn(s)"
           f"{', after a restart' if cold else ''}) failed, though the agent advertises it",
           session=handle, error=_clip(err), completed_turns=turns,
           after_restart=cold, steps=list(m.trail))


def _describe(args: Mapping[str, Any]) -> str:
    try:
        return describe(args)
    except (KeyError, TypeError):  # a hand-edited cassette's step: name the op only
        return str(args.get("op"))


def _classify(st: _State, op: Any, args: Mapping[str, Any]) -> dict[str, str]:
    """The payload's classification, computed here from the payload as sent and the
    capabilities recorded at ``initialize`` (acp-reference.md §7.7), never read back from the
    ``class`` the runner wrote into the step: so ``replay --offline`` judges an old cassette
    with today's classifier. A legacy dialect's invalid payload is a probe (no RFD rule governs
    a vendor extension); a cassette from before the dialect was recorded says so through the
    rule of its recorded class."""
    if op not in ("new", "load", "resume", "fork"):
        return {}
    caps = Capabilities(**{k: v is True for k, v in st.caps.items()
                           if k in Capabilities.__slots__})
    extra = args.get("extra")
    c = classify(args.get("systemPrompt", OMIT), caps,
                 extra_params=extra if isinstance(extra, Mapping) else None)
    recorded = st.step.get("class")
    legacy = st.dialect not in (None, "standard") or (
        st.dialect is None and isinstance(recorded, Mapping)
        and recorded.get("rule") == "EXT-META-MUSTNOT")
    if legacy and c.kind == "invalid":
        c = Classification("probe", c.reason, "info", "EXT-META-MUSTNOT")
    return {"kind": c.kind, "reason": c.reason, "severity": c.severity, "rule": c.rule}


def _resent(st: _State, op: Any, args: Mapping[str, Any], sp: Any) -> bool:
    """Whether a load, resume or fork re-sends the prompt the session (for fork: the source)
    may be using now: the same mode and blocks as one of its candidates."""
    m = st.sessions.get(args.get("session"))  # type: ignore[arg-type]
    if m is None or not isinstance(sp, Mapping):
        return False
    blocks = blocks_of(sp)
    return any(c.prompt is not None and c.prompt.mode == sp.get("mode")
               and c.prompt.blocks == blocks for c in m.candidates)


def _reattach(st: _State, m: SessionModel, op: str, new: Prompt | None, kind: Any, cold: bool,
              vendor: dict[str, str], line: str) -> None:
    """A load, resume or fork that the agent accepted: the session's candidates after it.

    Call OLD what the session may be sending now (its candidates) and NEW the prompt the
    request carried. NEW is expected (MUST: accepting it claims it can be applied). Each OLD
    that differs stays as ``deferred`` (SP-LIFECYCLE-DEFER-MAY) until a turn shows NEW;
    ``rebuilt`` records what rebuilt the prompt with or after the change, after which an OLD
    still in use is ``prompt.change-ignored`` (:func:`_cold_rebuild` says when a cold load
    counts). An omitted prompt keeps every OLD (as ``kept``) next to the defaults
    (SP-LIFECYCLE-OMIT-MAY)."""
    olds = m.candidates
    rebuild = _cold_rebuild(st, line) if cold else None
    if kind == "valid" and new is not None:
        out = [Candidate(new, "applied", "MUST", LIFECYCLE_RULE, "lifecycle")]
        for c in olds:
            if not any(_same(o.prompt, c.prompt) for o in out):
                out.append(Candidate(c.prompt, "deferred", "info", "SP-LIFECYCLE-DEFER-MAY",
                                     c.origin))
        m.candidates = out
        m.rebuilt = rebuild
        m.old_turns = set()
        m.own.update(new.significant)
        m.vendor = vendor
        m.omit_situation = None
        return
    if kind in ("omitted", "null"):
        out = []
        for c in olds:
            if any(_same(o.prompt, c.prompt) for o in out):
                continue
            if c.label == "deferred":
                out.append(c)
            elif c.prompt is None:
                out.append(Candidate(None, "default", "info", OMIT_RULE, c.origin))
            else:
                out.append(Candidate(c.prompt, "kept", "SHOULD", OMIT_RULE, "kept"))
        if not any(o.prompt is None for o in out):
            out.append(Candidate(None, "default", "info", OMIT_RULE, "kept"))
        m.candidates = out
        m.rebuilt = m.rebuilt or rebuild
        if any(c.label == "kept" for c in out):
            m.omit_situation = (op, cold)
            m.omit_trail = list(m.trail)
        return
    m.candidates = []


def _cold_rebuild(st: _State, line: str) -> str | None:
    """What a cold load (a load or resume in a new agent process) counts as: a rebuild only
    for an agent that cannot be made to compact. A cold load is acp-fuzz's own reading of a
    rebuild (a new process holds no prompt cache in memory), but the RFD's reason to defer,
    prompt caches, holds across a restart too (a provider's cache outlives the process), and
    compaction is the rebuild it names: where compaction can be caused, it is the judge."""
    if st.can_compact:
        return None
    return f"the cold load at step {line.split(':', 1)[0]}"


def _compacted(st: _State, m: SessionModel, handle: str, how: str) -> None:
    """Session ``handle`` was compacted (during the current step): the agent rebuilt its
    prompt, the rebuild at which a deferred change must land (SP-LIFECYCLE-DEFER-MAY), and
    its conversation is now a summary (the turns before it are no longer owed on a load)."""
    st.can_compact = True
    idx = st.step.get("index", -1)
    if m.compacted_step == idx:
        return  # the same compaction's next request
    m.compacted_step = idx
    m.compacted = f"the compaction at step {idx + 1} ({how})"
    m.note(f"{idx + 1}: compaction of {handle} ({how})")
    m.conversation = []
    m.turn_seen = None
    if any(c.label == "deferred" for c in m.candidates):
        m.rebuilt = f"the compaction at step {idx + 1}"
        m.old_turns = set()


# -- model requests ------------------------------------------------------------------------------

def _on_model(st: _State, ev: Event) -> None:
    x = ModelExchange.from_wire(ev.data)
    handle = x.session
    everything = SEP.join(s.text for s in x.segments)
    # A rejected request's text must never reach the model afterwards.
    if any(blocks for _, blocks in st.rejected):
        st.judge("reject.side-effect")
    for step_idx, blocks in st.rejected:
        for b in blocks:
            # Text an accepted payload also carries (the same block, or a piece of one: a
            # refused change may reuse the session's own text) proves nothing.
            if b in everything and not any(b in a for a in st.accepted_blocks):
                st.add("reject.side-effect",
                       f"text from the systemPrompt of rejected step {step_idx + 1} reached the "
                       "model", step=step_idx, session=handle,
                       **_where(x, b, ev.seq))
                break
    if handle is not None and x.status >= 400:
        st.model_failed.add(handle)
    if handle is None or handle not in st.sessions:
        # Tied to no session (untied, or a side request of no turn): no prompt is owed
        # here, but no request may mix two sessions' client texts either.
        _judge_mixed(st, x, ev.seq, everything)
        step_session = st.step.get("args", {}).get("session")
        if handle is None and x.side and ev.data.get("side_kind") == "compaction" \
                and st.step.get("args", {}).get("op") in ("prompt", "compact") \
                and step_session in st.sessions:
            # A compaction's summary request that carries no nonce (codex-acp summarises
            # from its own history): the runner drives one turn at a time, so it is the
            # compaction of the session the step is about.
            _compacted(st, st.sessions[step_session], step_session, "its summary request")
        return
    m = st.sessions[handle]
    # Leaks: another session's own text in this session's request, turn or side request
    # (a title or a suggestion made from the wrong session's prompt leaks it as surely).
    if any(other != handle for other in st.all_blocks):
        st.judge("prompt.leak")
    for other, texts in st.all_blocks.items():
        if other == handle:
            continue
        for b in sorted(texts):
            if b in m.own or any(b in own for own in m.own) or b not in everything:
                continue
            kind = "side request" if x.side else "model request"
            st.add("prompt.leak",
                   f"session {handle}'s {kind} holds session {other}'s client text",
                   session=handle, foreign_session=other, **_where(x, b, ev.seq))
            break
    args = st.step.get("args", {})
    if x.side and ev.data.get("side_kind") == "compaction":
        # The summary request of a compaction (a profile's [[side]] rule of kind compaction):
        # judged for leaks above, and the session's prompt is rebuilt from here on.
        _compacted(st, m, handle, "its summary request")
        return
    if x.side:
        return
    if args.get("op") == "compact" and args.get("by") == "command" \
            and args.get("session") == handle:
        # The agent's compaction command sends no turn of ours (no nonce of this step): what
        # it asks the model is its summary, judged for leaks only.
        _compacted(st, m, handle, "its compaction command")
        return
    _judge_conversation(st, m, handle, x, ev.seq, everything)
    if m.tainted or not m.candidates:
        return
    if args.get("busy") and args.get("session") == handle and x.turn == st.step.get("turn"):
        # The turn a load or resume was sent beside: it may run on the old prompt or, if
        # the agent applied the change mid-turn, on the new one. The turns after it are
        # judged (the change applied whole, or, if refused, nothing changed).
        return
    _judge_turn(st, m, handle, x, ev.seq, everything)


def _judge_mixed(st: _State, x: ModelExchange, seq: int, everything: str) -> None:
    """``prompt.leak`` for a request tied to no session: the client texts of two sessions
    in it, where neither session may hold the other's (a fork holds its source's)."""
    if len(st.all_blocks) < 2:
        return
    st.judge("prompt.leak")
    found = {h: [b for b in sorted(texts) if b in everything]
             for h, texts in st.all_blocks.items()}
    found = {h: bs for h, bs in found.items() if bs}
    if len(found) < 2:
        return

    def holds(h: str, b: str) -> bool:
        own = st.sessions[h].own if h in st.sessions else st.all_blocks.get(h, set())
        return b in own or any(b in o for o in own)

    every = [b for bs in found.values() for b in bs]
    if any(all(holds(h, b) for b in every) for h in found):
        return
    first, second = sorted(found)[:2]
    st.add("prompt.leak",
           f"a model request tied to no session holds the client texts of sessions {first} "
           f"and {second}", session=first, foreign_session=second,
           **_where(x, found[second][0], seq))


def _judge_conversation(st: _State, m: SessionModel, handle: str, x: ModelExchange, seq: int,
                        everything: str) -> None:
    """``session.history-lost``: the first turn after an accepted load or resume must carry
    the session's conversation: every completed turn, recognised by its nonce (load replays
    "the whole conversation"). A compaction replaces the turns before it by a summary
    (:func:`_compacted` empties ``conversation``): only the turns after it are owed."""
    nonce = st.step.get("nonce")
    if st.step.get("args", {}).get("op") not in ("prompt", "cancel", "compact") \
            or x.turn is None \
            or not isinstance(nonce, str) or nonce not in everything:
        return
    m.turn_seen = nonce
    if m.reattached is None:
        return
    op, line = m.reattached
    m.reattached = None
    if isinstance(x.body, Mapping) and x.body.get("previous_response_id"):
        return  # the conversation is held by the provider (OpenAI Responses): not visible
    if not m.conversation:
        return
    rule = "SES-AGENT-LOAD-REPLAY-MUST" if op == "load" else "SES-AGENT-RESUME-NOREPLAY-MUST"
    st.judge("session.history-lost", rule)
    missing = [n for n in m.conversation if n not in everything]
    if not missing:
        return
    which = ("none of its last turn" if missing[-1] == m.conversation[-1]
             else f"{len(missing)} of its earlier turn(s), though not the last")
    failed = f"; after a failed reattach ({', '.join(m.failed_reattach)})" \
        if m.failed_reattach else ""
    extra: dict[str, Any] = {"failed_reattach": list(m.failed_reattach)} \
        if m.failed_reattach else {}
    st.add("session.history-lost",
           f"session {handle}: after {_said(st, op)}, the model request holds {which} "
           f"({len(m.conversation)} turn(s) completed){failed}",
           rule=rule, session=handle, model_event=seq, reattached_by=line,
           missing_turn_nonce=missing[-1], missing=missing,
           present=[n for n in m.conversation if n in everything],
           trail=list(m.trail), **extra)


def _short_blocks_delivered(st: _State, m: SessionModel, handle: str, p: Prompt,
                            everything: str) -> list[str]:
    """The prompt's short blocks (too short to be evidence of a bug) that are in the request
    and could come from nowhere else: not from the defaults, nor from another candidate
    prompt of the session, nor from another session's prompt.

    Used only to *name* a failure that is already certain (every significant block is
    missing): with these there, a block was dropped (``prompt.altered``), not the whole
    prompt (``prompt.lost``). E.g. ``["[]", "Be a teacher... [canary]"]`` with its last
    block dropped."""
    elsewhere = "\n".join(st.baseline.lines)
    others = "\n".join([b for c in m.candidates if c.prompt is not None and c.prompt is not p
                        for b in c.prompt.blocks]
                       + [b for h, texts in st.short_blocks.items() if h != handle
                          for b in texts])
    out: list[str] = []
    for b in dict.fromkeys(b.strip() for b in p.blocks):
        if 2 <= len(b) < MIN_SIGNIFICANT and b in everything and b not in elsewhere \
                and b not in others:
            out.append(b)
    return out


def _judge_turn(st: _State, m: SessionModel, handle: str, x: ModelExchange, seq: int,
                everything: str) -> None:
    primary = m.candidates[0]
    if primary.prompt is not None and primary.prompt.significant:
        rule = primary.rule
        st.judge("prompt.lost", rule)
        st.judge("prompt.altered", rule)
        st.judge("prompt.altered", "ACPFUZZ-VERBATIM-SHOULD")
    if any(c.label == "deferred" for c in m.candidates):
        st.judge("prompt.change-ignored" if m.rebuilt else "prompt.change-deferred")
    if len(m.candidates) > 1 and any(c.label in ("kept", "default") for c in m.candidates):
        st.judge("lifecycle.omitted-fallback")
    matched: Candidate | None = None
    for c in m.candidates:
        if _full(c.prompt, everything, m):
            matched = c
            break
    if matched is None:
        _report_missing(st, m, handle, x, seq, everything)
        return
    m.compacted = None
    if matched.label in ("applied", "kept"):
        # The change shows (a kept prompt is the last one applied): a deferral before it was
        # the agent's right, not a finding.
        for key in m.deferred_keys:
            st.findings.pop(key, None)
        m.deferred_keys = []
    if matched.label == "applied":
        m.candidates = [matched]
        m.rebuilt = None
        m.old_turns = set()
    elif len(m.candidates) == 1:
        pass  # nothing to choose between: a session made without a prompt
    elif matched.label == "deferred":
        _report_deferred(st, m, handle, matched, seq)
    else:
        _report_choice(st, m, handle, matched, seq)
        # The choice is made: from now on the session's prompt is the one it showed.
        m.candidates = [Candidate(matched.prompt, "applied", "MUST", LIFECYCLE_RULE,
                                  matched.origin)]
    p = matched.prompt
    if p is None:
        return
    system = SEP.join(x.texts("system"))
    if p.significant:
        st.judge("prompt.misplaced")
        st.judge("prompt.duplicated")
    for b in p.significant:
        if b not in system:
            st.add("prompt.misplaced",
                   f"session {handle}: the prompt is in the {_slot_of(x, b)} content, "
                   "not the system slot", session=handle, **_where(x, b, seq))
            break
    default_text = "\n".join(sorted(st.baseline.lines))
    for b in p.significant:
        expected = sum(o.count(b) for o in p.blocks) + default_text.count(b)
        seen = sum(s.text.count(b) for s in x.segments)
        if seen > max(expected, 1):
            st.add("prompt.duplicated",
                   f"session {handle}: a prompt block appears {seen} times in one request",
                   session=handle, model_event=seq, count=seen, block=_clip(b),
                   paths=[s.path for s in x.segments if b in s.text])
            break
    _judge_vendor_also(st, m, handle, x, seq, everything)
    if not m.mode_switched:
        _judge_defaults(st, handle, p, matched.origin, system, seq)


def _judge_vendor_also(st: _State, m: SessionModel, handle: str, x: ModelExchange, seq: int,
                       everything: str) -> None:
    """``prompt.altered`` (SHOULD, ACPFUZZ-STANDARD-ONLY-SHOULD): the standard prompt
    reached the model, and so did the text of a legacy ``_meta`` carrier sent beside it.
    (The vendor text *instead* of the standard one is ``prompt.lost``, MUST.)"""
    texts = {path: t.strip() for path, t in m.vendor.items()
             if len(t.strip()) >= MIN_SIGNIFICANT
             and not any(t.strip() in o or o in t.strip() for o in m.own)}
    if not texts:
        return
    st.judge("prompt.altered", "ACPFUZZ-STANDARD-ONLY-SHOULD")
    for path, text in sorted(texts.items()):
        if text in everything:
            st.add("prompt.altered",
                   f"session {handle}: the standard prompt reached the model, and so did the "
                   f"text of the vendor field {path} sent with it", severity="SHOULD",
                   rule="ACPFUZZ-STANDARD-ONLY-SHOULD", session=handle, also=path,
                   vendor_text=_clip(text), **_where(x, text, seq))
            return


def _judge_defaults(st: _State, handle: str, p: Prompt, origin: str, system: str,
                    seq: int) -> None:
    """``override.not-applied`` and ``append.replaced-default``, judged only on a substantial
    baseline. Their severity follows how the prompt arrived: MUST for one from ``session/new``
    or accepted on a lifecycle request, info for one the agent kept when a later request
    omitted it (keeping it at all was the agent's choice, SP-LIFECYCLE-OMIT-MAY)."""
    bl = st.baseline
    if not bl.lines or p.mode not in ("override", "append"):
        return
    if not bl.substantial:
        if not st.too_small_reported:
            st.too_small_reported = True
            st.add("defaults.too-small",
                   f"{p.mode} not judged: the learned default instructions are too small to "
                   f"judge ({bl.size_lines} instruction line(s), {bl.size_chars} characters; "
                   f"at least {MIN_BASELINE_LINES} lines and {MIN_BASELINE_CHARS} characters "
                   "are needed)", session=handle, model_event=seq,
                   baseline_lines=bl.size_lines, baseline_chars=bl.size_chars,
                   baseline=[_clip(ln, 200) for ln in bl.to_wire()],
                   kept=[_clip(ln, 200) for ln in bl.kept_in(system)])
        return
    sev = "info" if origin == "kept" else None
    st.judge("override.not-applied" if p.mode == "override" else "append.replaced-default")
    share = bl.share_in(system)
    if p.mode == "override" and share >= DEFAULT_PRESENT:
        st.add("override.not-applied",
               f"session {handle}: override mode, yet {share:.0%} of the default "
               "instruction lines are in the system slot", severity=sev, session=handle,
               model_event=seq, share=round(share, 3), origin=origin)
    if p.mode == "append" and share <= DEFAULT_ABSENT:
        st.add("append.replaced-default",
               f"session {handle}: append mode, yet only {share:.0%} of the default "
               "instruction lines are in the system slot", severity=sev, session=handle,
               model_event=seq, share=round(share, 3), origin=origin)


def _report_missing(st: _State, m: SessionModel, handle: str, x: ModelExchange, seq: int,
                    everything: str) -> None:
    """No candidate fits: the session's prompt is lost or altered. Reported against the first
    candidate, the prompt the session must be using (for a lifecycle request: NEW)."""
    primary = m.candidates[0]
    p = primary.prompt
    if p is None:
        return
    sig = p.significant
    present = [b for b in sig if b in everything]
    missing = [b for b in sig if b not in present]
    reformatted: dict[str, tuple[str, str]] = {}
    for b in missing:
        found = _loose_find(b, x)
        if found is not None:
            reformatted[b] = found
    cut = [b for b in missing if b not in reformatted and _truncated(b, everything)]
    sev = primary.severity if primary.severity != "info" else "SHOULD"
    rule = primary.rule
    partial = _short_blocks_delivered(st, m, handle, p, everything) if not present else []
    won = {path: text for path, text in m.vendor.items()
           if len(text.strip()) >= MIN_SIGNIFICANT and text.strip() in everything}
    extra: dict[str, Any] = {}
    note = ""
    if m.compacted:
        # No turn since the compaction showed the prompt: lost (or altered) there.
        extra["compaction"] = m.compacted
        note = f", after {m.compacted}"
    if won:
        path = next(iter(won))
        extra = {"won": path, "vendor_text": _clip(won[path])}
        note += f"; the text of the vendor field {path} is there instead"
    if present or reformatted or cut or partial:
        if reformatted and len(reformatted) == len(missing):
            # Only the form changed (SP-AGENT-APPEND-FORMAT-DEF): never MUST.
            spacing = all(kind == "whitespace" for kind, _ in reformatted.values())
            sev, rule = ("info", "SP-AGENT-APPEND-FORMAT-DEF") if spacing \
                else ("SHOULD", "ACPFUZZ-VERBATIM-SHOULD")
            extra["received"] = [{"sent": _clip(b), "as": kind, "received": got}
                                 for b, (kind, got) in reformatted.items()]
        st.add("prompt.altered",
               f"session {handle}: {len(missing)} of {len(sig)} block(s) of the prompt "
               f"from step {p.step + 1} are not in the request verbatim"
               + (f" (its short block(s) {', '.join(repr(_clip(b)) for b in partial)} "
                  "are)" if partial else "") + note,
               severity=sev, rule=rule, session=handle, model_event=seq,
               missing=[_clip(b) for b in missing], **extra)
    elif sig:
        st.add("prompt.lost",
               f"session {handle}: the prompt from step {p.step + 1} is not in the request"
               + note, severity=sev, rule=rule, session=handle, model_event=seq,
               expected=_clip(sig[0]), system_slot=_clip(SEP.join(x.texts("system"))),
               steps=list(m.trail), **extra)


def _report_deferred(st: _State, m: SessionModel, handle: str, matched: Candidate,
                     seq: int) -> None:
    new = m.candidates[0].prompt
    evidence: dict[str, Any] = {
        "model_event": seq, "steps": list(m.trail),
        "requested": _clip(new.significant[0]) if new and new.significant else None,
        "in_use": _clip(matched.prompt.significant[0])
        if matched.prompt and matched.prompt.significant else "(the default instructions)"}
    after = ""
    if m.rebuilt:
        m.old_turns.add(st.step.get("index", -1))
        turns = len(m.old_turns)
        evidence.update(rebuilt_by=m.rebuilt, turns_after=sorted(i + 1 for i in m.old_turns))
        if turns >= IGNORED_AFTER:
            why = (" (acp-fuzz's reading of a rebuild, for an agent that cannot be made to "
                   "compact)") if m.rebuilt.startswith("the cold load") else ""
            st.add("prompt.change-ignored",
                   f"session {handle}: the changed prompt was accepted, and the old one is "
                   f"still in use {turns} turns after {m.rebuilt}{why}", session=handle,
                   **evidence)
            return
        after = f" ({turns} turn after {m.rebuilt})"
    key = st.add("prompt.change-deferred",
                 f"session {handle}: the changed prompt was accepted but the old one is "
                 f"still in use{after}", severity="SHOULD" if st.strict else "info",
                 session=handle, **evidence)
    m.deferred_keys.append(key)


_CHOICE = {"kept": "kept the stored prompt", "default": "fell back to its defaults"}


def _report_choice(st: _State, m: SessionModel, handle: str, matched: Candidate,
                   seq: int) -> None:
    st.add("lifecycle.omitted-fallback",
           f"session {handle}: with the prompt omitted, the agent {_CHOICE[matched.label]}",
           session=handle, model_event=seq, choice=matched.label)
    sit, m.omit_situation = m.omit_situation, None
    if sit is None:
        return
    if sit in st.omitted_choices:
        st.judge("lifecycle.omitted-inconsistent")
    first = st.omitted_choices.setdefault(sit, (matched.label, handle, list(m.omit_trail)))
    if first[0] != matched.label:
        op, cold = sit
        where = f"{_said(st, op)} after a restart" if cold else _said(st, op)
        st.add("lifecycle.omitted-inconsistent",
               f"session {handle}: with the prompt omitted on {where}, the agent "
               f"{_CHOICE[matched.label]}, but for session {first[1]} in the same situation "
               f"it {_CHOICE[first[0]]}",
               session=handle, model_event=seq,
               first={"session": first[1], "choice": first[0], "steps": first[2]},
               now={"session": handle, "choice": matched.label, "steps": list(m.omit_trail)})


#: A block counts as truncated (altered, not lost) when at least its first half arrived, and
#: that half is long enough not to match by chance.
MIN_TRUNCATED_PREFIX = 256


def _truncated(block: str, everything: str) -> bool:
    half = block[: len(block) // 2]
    return len(half) >= MIN_TRUNCATED_PREFIX and half in everything


def _full(p: Prompt | None, everything: str, m: SessionModel) -> bool:
    if p is None:
        # The defaults-only state fits when none of this session's own texts are present
        # (its standard prompts, or the vendor texts sent with them).
        vendor = {t.strip() for t in m.vendor.values() if len(t.strip()) >= MIN_SIGNIFICANT}
        return not any(b in everything for b in m.own | vendor)
    sig = p.significant
    return all(b in everything for b in sig) if sig else True


_INVISIBLE = re.compile(r"[\u0000-\u0008\u000b-\u001f\u007f\u200b-\u200f\u2060\ufeff]")
#: One unit of escaped text: an HTML entity, a JSON escape, or any one character.
_ESCAPE = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z]{2,8});|\\u[0-9a-fA-F]{4}"
                     r"|\\[nrt\"\\/']|.", re.DOTALL)
_JSON_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _squeeze(s: str, *, unescape: bool) -> tuple[str, list[tuple[int, int]]]:
    """``s`` without whitespace (and, with ``unescape``, NFC-normalised, without invisible
    characters, with HTML entities and JSON escapes decoded), and for each character kept the
    span of ``s`` it came from."""
    if unescape:
        s = unicodedata.normalize("NFC", s)
    out: list[str] = []
    where: list[tuple[int, int]] = []
    for tok in _ESCAPE.finditer(s):
        t = tok.group()
        if unescape and len(t) > 1:
            if t.startswith("&"):
                t = html.unescape(t)
            elif t.startswith("\\u"):
                t = chr(int(t[2:], 16))
            else:
                t = _JSON_ESCAPES.get(t[1], t[1])
        for ch in t:
            if ch.isspace() or ch == "\x00" or (unescape and _INVISIBLE.match(ch)):
                continue
            out.append(ch)
            where.append(tok.span())
    return "".join(out), where


def _loose_find(block: str, x: ModelExchange) -> tuple[str, str] | None:
    """Where a block that is not in the request verbatim arrived in another form: with other
    whitespace or split across neighbouring segments (two system blocks): ``"whitespace"``;
    escaped (HTML entities, JSON quoting), with invisible characters removed or in another
    Unicode normalisation: ``"escaped"``. Returns (that kind, the text as received), or
    ``None``. Only the form is forgiven: every other character must be there, in order."""
    texts = [s.text for s in x.segments]
    # Each segment alone, then each pair of neighbours (a block split in two).
    spans = texts + [texts[i] + SEP + texts[i + 1] for i in range(len(texts) - 1)]
    for kind, unescape in (("whitespace", False), ("escaped", True)):
        want, _ = _squeeze(block, unescape=unescape)
        if not want:
            return None
        for hay in spans:
            squeezed, where = _squeeze(hay, unescape=unescape)
            i = squeezed.find(want)
            if i >= 0:
                if unescape:
                    hay = unicodedata.normalize("NFC", hay)
                got = hay[where[i][0]: where[i + len(want) - 1][1]]
                return kind, _clip(got.replace(SEP, " | "))
    return None


def _slot_of(x: ModelExchange, text: str) -> str:
    for s in x.segments:
        if text in s.text:
            return s.slot
    return "other"


def _where(x: ModelExchange, text: str, seq: int) -> dict[str, Any]:
    for s in x.segments:
        if text in s.text:
            i = s.text.index(text)
            return {"model_event": seq, "path": s.path, "slot": s.slot,
                    "excerpt": _clip(s.text[max(0, i - 40): i + len(text) + 40])}
    return {"model_event": seq}


def _clip(v: Any, n: int = 300) -> Any:
    if isinstance(v, str):
        return v if len(v) <= n else v[:n] + f"... [{len(v)} chars]"
    if isinstance(v, Mapping):
        return {k: _clip(x, n) for k, x in list(v.items())[:20]}
    if isinstance(v, list):
        return [_clip(x, n) for x in v[:20]]
    return v


# -- protocol ------------------------------------------------------------------------------------

_MESSAGE = Draft202012Validator({
    "type": "object",
    "required": ["jsonrpc"],
    "properties": {"jsonrpc": {"const": "2.0"}},
    "oneOf": [
        {"required": ["method"], "properties": {"method": {"type": "string"}}},
        {"required": ["id", "result"], "not": {"required": ["error"]}},
        {"required": ["id", "error"], "not": {"required": ["result"]},
         "properties": {"error": {"type": "object", "required": ["code", "message"],
                                  "properties": {"code": {"type": "integer"},
                                                 "message": {"type": "string"}}}}},
    ],
})
_UPDATE = Draft202012Validator({
    "type": "object", "required": ["sessionId", "update"],
    "properties": {"sessionId": {"type": "string"},
                   "update": {"type": "object", "required": ["sessionUpdate"],
                              "properties": {"sessionUpdate": {"type": "string"}}}},
})
_RESULTS = {
    "session/new": Draft202012Validator({"type": "object", "required": ["sessionId"],
                                         "properties": {"sessionId": {"type": "string"}}}),
    "session/fork": Draft202012Validator({"type": "object", "required": ["sessionId"],
                                          "properties": {"sessionId": {"type": "string"}}}),
    "session/prompt": Draft202012Validator({
        "type": "object", "required": ["stopReason"],
        "properties": {"stopReason": {"enum": ["end_turn", "max_tokens", "max_turn_requests",
                                               "refusal", "cancelled"]}}}),
    "session/load": Draft202012Validator({"type": "object"}),
    "session/resume": Draft202012Validator({"type": "object"}),
    "initialize": Draft202012Validator({"type": "object", "required": ["protocolVersion"],
                                        "properties": {"protocolVersion": {"type": "integer"}}}),
}
#: v2 answers a prompt once its message is inserted, with the message's id; the stop reason
#: comes later, in the idle ``state_update`` (acp-reference.md §8).
_RESULTS_V2 = {**_RESULTS, "session/prompt": Draft202012Validator({
    "type": "object", "required": ["messageId"],
    "properties": {"messageId": {"type": "string"}}})}


def _on_acp(st: _State, ev: Event) -> None:
    d = ev.data
    msg = d.get("msg")
    if d.get("dir") == "send":
        # Only a JSON-RPC id and method, as acp-fuzz sends them: a hand-edited cassette's
        # may be anything, a list too (which no dict can take as a key).
        if isinstance(msg, Mapping) and isinstance(msg.get("method"), str) \
                and isinstance(msg.get("id"), _IDS):
            st.requests[msg["id"]] = msg["method"]
            if msg["method"] in _LIFECYCLE_METHODS and isinstance(msg.get("params"), Mapping):
                st.step["_vendor"] = vendor_texts(msg["params"])
        return
    st.judge("protocol.malformed")
    if d.get("error"):
        st.add("protocol.malformed", f"the agent wrote a bad line ({d['error']})",
               evidence_event=ev.seq, raw=_clip(d.get("raw", ""), 200), problem=d["error"])
        return
    if not isinstance(msg, Mapping):
        return
    if msg.get("method") == "session/update":
        _on_update(st, msg.get("params"))
    elif "id" in msg and advertises_compact(msg.get("result")):
        # v2: the commands of a new or resumed session are in its result (codex-acp sends
        # no available_commands_update there).
        st.can_compact = True
    problem = _first_error(_MESSAGE, msg)
    if problem is None and msg.get("method") == "session/update":
        problem = _first_error(_UPDATE, msg.get("params"))
    if "result" in msg and isinstance(msg.get("id"), _IDS) \
            and st.requests.get(msg["id"]) == "session/list":
        _judge_titles(st, msg["result"], ev.seq)
    if problem is None and "result" in msg:
        rid = msg.get("id")
        method = st.requests.get(rid) if isinstance(rid, _IDS) else None
        validator = (_RESULTS_V2 if st.protocol >= 2 else _RESULTS).get(method or "")
        if validator is not None:
            problem = _first_error(validator, msg["result"])
    if problem is not None:
        st.add("protocol.malformed", f"a message from the agent breaks the schema: {problem}",
               evidence_event=ev.seq, offending=_clip(dict(msg), 200))


#: A title this long that is a piece of another session's client text is that text (shorter
#: pieces can match by chance: titles are a few words).
MIN_TITLE_PIECE = 24


def _judge_titles(st: _State, result: Any, seq: int) -> None:
    """``prompt.leak`` in ``session/list``: a session's title made from another session's
    client text (a title is shown to the user beside every session, and an agent that
    titles a session from the wrong prompt has mixed their state). A title counts when it
    holds a significant block of the other session, or is a long piece of one; a block the
    titled session may hold itself (its own, or its fork source's) proves nothing."""
    listed = result.get("sessions") if isinstance(result, Mapping) else None
    if not isinstance(listed, list) or len(st.all_blocks) < 2:
        return
    by_id = {m.agent_id: h for h, m in st.sessions.items() if m.agent_id is not None}
    for entry in listed:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("title"), str):
            continue
        handle = by_id.get(entry.get("sessionId"))  # type: ignore[arg-type]
        if handle is None:
            continue
        title = entry["title"].strip()
        own = st.sessions[handle].own
        st.judge("prompt.leak")
        for other, texts in sorted(st.all_blocks.items()):
            if other == handle:
                continue
            hit = next((b for b in sorted(texts)
                        if not (b in own or any(b in o for o in own))
                        and (b in title or (len(title) >= MIN_TITLE_PIECE and title in b
                                            and not any(title in o for o in own)))), None)
            if hit is not None:
                st.add("prompt.leak",
                       f"session {handle}'s title in session/list holds session {other}'s "
                       "client text", session=handle, foreign_session=other,
                       acp_event=seq, title=_clip(title), block=_clip(hit))
                return


def _on_update(st: _State, params: Any) -> None:
    """What a ``session/update`` says about compaction: a ``compact`` command advertised
    (the agent can be made to compact: a ``compact`` step sends it), or a compaction of one
    of the sessions completed (``compaction_update``)."""
    if not isinstance(params, Mapping) or not isinstance(params.get("update"), Mapping):
        return
    update = params["update"]
    kind = update.get("sessionUpdate")
    if advertises_compact(update):
        st.can_compact = True
    elif kind == "compaction_update" and update.get("status") == "completed":
        sid = params.get("sessionId")
        for handle, m in st.sessions.items():
            if sid is not None and m.agent_id == sid:
                _compacted(st, m, handle, "compaction_update completed")
                return


_LIFECYCLE_METHODS = ("session/new", "session/load", "session/resume", "session/fork")
#: What a JSON-RPC id can be (a number or a string).
_IDS = (str, int, float)


def vendor_texts(params: Mapping[str, Any]) -> dict[str, str]:
    """The texts a request carries in ``_meta`` next to a standard ``systemPrompt``, by field
    path: the legacy carriers (claude-agent-acp's ``_meta.systemPrompt`` string or
    ``{append}``, ``_meta.claudeCode.options.systemPrompt``, pi-acp's ``_meta.systemPrompt``,
    JetBrains' ``customInstructions``) and any other string in a ``_meta`` of the request, of
    the ``systemPrompt`` object or of its blocks. Without a standard field there is no
    conflict to judge (a legacy dialect sends its prompt in ``_meta`` alone): empty."""
    sp = params.get("systemPrompt")
    if not isinstance(sp, Mapping):
        return {}
    out: dict[str, str] = {}
    _strings(params.get("_meta"), "_meta", out, 0)
    _strings(sp.get("_meta"), "systemPrompt._meta", out, 0)
    content = sp.get("content")
    if isinstance(content, list):
        for i, block in enumerate(content[:64]):
            if isinstance(block, Mapping):
                _strings(block.get("_meta"), f"systemPrompt.content[{i}]._meta", out, 0)
    return out


def _strings(v: Any, path: str, out: dict[str, str], depth: int) -> None:
    if depth > 8 or len(out) >= 32:
        return
    if isinstance(v, str) and len(v.strip()) >= MIN_SIGNIFICANT:
        out[path] = v
    elif isinstance(v, Mapping):
        for k, x in list(v.items())[:32]:
            _strings(x, f"{path}.{k}", out, depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v[:32]):
            _strings(x, f"{path}[{i}]", out, depth + 1)


def _first_error(v: Draft202012Validator, obj: Any) -> str | None:
    err = next(iter(v.iter_errors(obj)), None)
    if err is None:
        return None
    path = "/".join(str(p) for p in err.absolute_path)
    return f"{path or '<root>'}: {err.message}"[:200]


def _on_process(st: _State, ev: Event) -> None:
    pass


_HANDLERS = {"step": _on_step, "verdict": _on_verdict, "model": _on_model, "acp": _on_acp,
             "process": _on_process}
