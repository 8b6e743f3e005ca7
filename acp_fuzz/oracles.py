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

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from acp_fuzz.findings import CATALOG, Finding
from acp_fuzz.history import Event, ModelExchange
from acp_fuzz.payloads import blocks_of

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
    working directories, and drop out of the intersection.
    """

    lines: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        return bool(self.lines)

    def share_in(self, text: str) -> float:
        if not self.lines:
            return 0.0
        return sum(1 for line in self.lines if line in text) / len(self.lines)

    def to_wire(self) -> list[str]:
        return sorted(self.lines)

    @classmethod
    def from_wire(cls, obj: Any) -> Baseline:
        if not isinstance(obj, list):
            return cls()
        return cls(frozenset(x for x in obj if isinstance(x, str)))


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

@dataclass(frozen=True)
class Prompt:
    mode: str
    blocks: tuple[str, ...]
    step: int

    @property
    def significant(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.strip() for b in self.blocks
                                   if len(b.strip()) >= MIN_SIGNIFICANT))


@dataclass(frozen=True)
class Candidate:
    prompt: Prompt | None  # None: the agent's defaults only
    label: str  # applied | deferred | kept | default
    severity: str  # what missing this candidate costs when it is the only one left
    rule: str


@dataclass
class SessionModel:
    agent_id: str | None
    candidates: list[Candidate]
    generation: int
    tainted: bool = False  # state unknown (an invalid payload was accepted)
    closed: bool = False  # session/close succeeded, and no load or resume since
    own: set[str] = field(default_factory=set)  # every block this session may legitimately hold

    def current(self) -> Prompt | None:
        return self.candidates[0].prompt if self.candidates else None


@dataclass
class _State:
    strict: bool
    baseline: Baseline
    caps: dict[str, Any] = field(default_factory=dict)
    sessions: dict[str, SessionModel] = field(default_factory=dict)
    known_ids: set[str] = field(default_factory=set)
    step: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    rejected: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    accepted_blocks: set[str] = field(default_factory=set)
    all_blocks: dict[str, set[str]] = field(default_factory=dict)  # handle -> every block sent
    short_blocks: dict[str, set[str]] = field(default_factory=dict)  # the same, too short
    findings: dict[tuple[str, str | None, int], Finding] = field(default_factory=dict)
    requests: dict[int, str] = field(default_factory=dict)  # JSON-RPC id -> method
    expecting_exit: bool = False

    def add(self, oracle: str, message: str, *, severity: str | None = None,
            rule: str | None = None, session: str | None = None, step: int | None = None,
            **evidence: Any) -> None:
        info = CATALOG[oracle]
        f = Finding(oracle=oracle, severity=severity or info.severity, rule=rule or info.rule,
                    message=message, step=self.step.get("index", -1) if step is None else step,
                    session=session, evidence=evidence)
        self.findings.setdefault(f.key(), f)


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

    def findings(self) -> list[Finding]:
        return sorted(self._st.findings.values(),
                      key=lambda f: (f.step, f.oracle, f.session or ""))


# -- event handlers -----------------------------------------------------------------------------

def _on_step(st: _State, ev: Event) -> None:
    st.step = dict(ev.data)
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
        return
    if what == "probe-list":
        listed = d.get("sessions")
        if isinstance(listed, list):
            extra = sorted(set(listed) - st.known_ids)
            if extra and _last_rejected_creation(st):
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
    if outcome == "timeout":
        st.add("agent.hang", f"no answer to {op} within the timeout", session=args.get("session"))
        return
    if outcome == "exited" and op != "restart":
        st.add("agent.crash", f"the agent process died during {op}",
               session=args.get("session"))
        return
    if outcome == "exited":
        st.add("agent.crash", "the agent did not come back after a restart")
        return
    if outcome == "error" and isinstance(d.get("error"), Mapping) and "harness" in d["error"]:
        st.add("protocol.malformed", f"{op}: {d['error']['harness']}",
               rule="FR-WIRE-NDJSON-MUST", session=args.get("session"))
    _transition(st, op, args, outcome, d)


def _last_rejected_creation(st: _State) -> bool:
    args = st.step.get("args", {})
    return args.get("op") in ("new", "fork") and st.step.get("_outcome") == "error"


def _transition(st: _State, op: Any, args: Mapping[str, Any], outcome: Any,
                verdict: Mapping[str, Any]) -> None:
    st.step["_outcome"] = outcome
    cls = st.step.get("class") or {}
    kind = cls.get("kind")
    idx = st.step.get("index", -1)
    sp = args.get("systemPrompt")
    handle = args.get("session")
    blocks = blocks_of(sp)

    live = handle in st.sessions and st.sessions[handle].generation == st.generation \
        and not st.sessions[handle].closed
    if op == "cancel" and outcome == "error" and live:
        # Only a session this agent process has open: after a restart (not loaded again) or
        # a close, the prompt is about an unknown session and an error is the right answer.
        st.add("cancel.error", "the prompt cancelled mid-turn got an error instead of a stop "
               "reason", session=handle, error=_clip(verdict.get("error")))

    # Payload oracles: judged on the answer alone.
    if kind == "invalid" and outcome == "ok":
        sev = cls.get("severity") or "MUST"
        st.add("payload.invalid-accepted",
               f"{op} with an invalid systemPrompt ({cls.get('reason')}) got a success",
               severity=sev, rule=cls.get("rule"), session=handle, reason=cls.get("reason"),
               systemPrompt=_clip(sp))
    if kind == "probe" and outcome is not None:
        st.add("payload.probe",
               f"{op} carried a systemPrompt the agent does not advertise; it answered {outcome}",
               session=handle)
    if kind == "valid" and outcome == "error":
        err = verdict.get("error") or {}
        code = err.get("code") if isinstance(err, Mapping) else None
        mode = sp.get("mode") if isinstance(sp, Mapping) else None
        rule = "SP-AGENT-OVERRIDE-MUST" if mode == "override" else "SP-AGENT-APPEND-MUST"
        # On load/resume/fork an error may be about the session, not the prompt: only an
        # invalid-params answer is pinned on the payload.
        if op == "new" or code == -32602:
            sev = None
            if op != "new" and not _resent(st, op, args, sp):
                # A *changed* prompt on load, resume or fork: applying it is a SHOULD
                # (SP-LIFECYCLE-CHANGE-SHOULD), and an agent that cannot apply it answers
                # with an error instead (SP-AGENT-ERROR-NOSIDEEFFECT-MUST allows exactly
                # that). Re-sending the session's own prompt is different: nothing changes.
                sev, rule = "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD"
            st.add("payload.valid-rejected",
                   f"{op} with a valid {mode!r} systemPrompt got error {code}",
                   severity=sev, rule=rule, session=handle, error=_clip(err),
                   systemPrompt=_clip(sp))
    if outcome == "error" and blocks:
        st.rejected.append((idx, tuple(b.strip() for b in blocks
                                       if len(b.strip()) >= MIN_SIGNIFICANT)))

    if op == "close" and outcome == "ok" and handle in st.sessions:
        st.sessions[handle].closed = True
    if outcome != "ok":
        return
    if blocks:
        st.accepted_blocks.update(b.strip() for b in blocks)
    prompt = Prompt(str(sp["mode"]), blocks, idx) if kind == "valid" and isinstance(sp, Mapping) \
        else None
    sid = verdict.get("sessionId")
    if isinstance(sid, str):
        st.known_ids.add(sid)

    if op == "new" and isinstance(handle, str):
        m = SessionModel(sid, [], st.generation)
        if kind == "valid":
            m.candidates = [Candidate(prompt, "applied", "MUST", "SP-AGENT-APPLY-NEW-MUST")]
        elif kind in ("omitted", "null"):
            m.candidates = [Candidate(None, "default", "MUST", "SP-NEW-OMIT-DEFAULT-DEF")]
        else:
            m.tainted = True
        if prompt:
            m.own.update(prompt.significant)
        st.sessions[handle] = m
    elif op in ("load", "resume") and handle in st.sessions:
        m = st.sessions[handle]
        rebuilt = m.generation != st.generation
        m.generation = st.generation
        m.closed = False
        m.candidates = _after_lifecycle(m.current(), prompt, kind, rebuilt, m.tainted)
        m.tainted = m.tainted or kind in ("invalid", "probe")
        if prompt:
            m.own.update(prompt.significant)
    elif op == "fork" and handle in st.sessions and isinstance(args.get("new"), str):
        src = st.sessions[handle]
        m = SessionModel(sid, [], st.generation, tainted=src.tainted)
        m.candidates = _after_lifecycle(src.current(), prompt, kind, False, src.tainted)
        m.tainted = m.tainted or kind in ("invalid", "probe")
        m.own = set(src.own) | (set(prompt.significant) if prompt else set())
        st.sessions[args["new"]] = m
    elif op == "restart":
        st.generation += 1


def _resent(st: _State, op: Any, args: Mapping[str, Any], sp: Any) -> bool:
    """Whether a load, resume or fork re-sends the prompt the session (for fork: the source)
    may be using now: the same mode and blocks as one of its candidates."""
    m = st.sessions.get(args.get("session"))  # type: ignore[arg-type]
    if m is None or not isinstance(sp, Mapping):
        return False
    blocks = blocks_of(sp)
    return any(c.prompt is not None and c.prompt.mode == sp.get("mode")
               and c.prompt.blocks == blocks for c in m.candidates)


def _after_lifecycle(old: Prompt | None, new: Prompt | None, kind: Any, rebuilt: bool,
                     tainted: bool) -> list[Candidate]:
    """The candidates after a load, resume or fork that the agent accepted."""
    if kind == "valid" and new is not None:
        if old is not None and old.blocks == new.blocks and old.mode == new.mode:
            return [Candidate(new, "applied", "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")]
        cands = [Candidate(new, "applied", "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")]
        if not rebuilt:
            # The RFD lets the agent keep the old prompt until it next rebuilds it.
            cands.append(Candidate(old, "deferred", "info", "SP-LIFECYCLE-DEFER-MAY"))
        return cands
    if kind in ("omitted", "null"):
        if old is None:
            return [Candidate(None, "default", "SHOULD", "SP-LIFECYCLE-OMIT-MAY")]
        return [Candidate(old, "kept", "info", "SP-LIFECYCLE-OMIT-MAY"),
                Candidate(None, "default", "info", "SP-LIFECYCLE-OMIT-MAY")]
    return []


# -- model requests ------------------------------------------------------------------------------

def _on_model(st: _State, ev: Event) -> None:
    x = ModelExchange.from_wire(ev.data)
    handle = x.session
    everything = SEP.join(s.text for s in x.segments)
    # A rejected request's text must never reach the model afterwards.
    for step_idx, blocks in st.rejected:
        for b in blocks:
            if b in everything and b not in st.accepted_blocks:
                st.add("reject.side-effect",
                       f"text from the systemPrompt of rejected step {step_idx + 1} reached the "
                       "model", step=step_idx, session=handle,
                       **_where(x, b, ev.seq))
                break
    if x.side or handle is None or handle not in st.sessions:
        return
    m = st.sessions[handle]
    # Leaks: another session's own text in this session's request.
    for other, texts in st.all_blocks.items():
        if other == handle:
            continue
        for b in sorted(texts):
            if b in m.own or any(b in own for own in m.own) or b not in everything:
                continue
            st.add("prompt.leak",
                   f"session {handle}'s model request holds session {other}'s client text",
                   session=handle, foreign_session=other, **_where(x, b, ev.seq))
            break
    if m.tainted or not m.candidates:
        return
    _judge_turn(st, m, handle, x, ev.seq, everything)


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
    matched: Candidate | None = None
    for c in m.candidates:
        if _full(c.prompt, everything, m):
            matched = c
            break
    primary = m.candidates[0]
    if matched is None:
        # Nothing fits: report against the first candidate.
        p = primary.prompt
        if p is None:
            return
        sig = p.significant
        present = [b for b in sig if b in everything]
        loose = [b for b in sig if b not in present and _norm(b) in _norm(everything)]
        cut = [b for b in sig if b not in present and b not in loose and _truncated(b, everything)]
        sev, rule = _sev(primary)
        partial = _short_blocks_delivered(st, m, handle, p, everything) if not present else []
        if present or loose or cut or partial:
            missing = [b for b in sig if b not in present]
            st.add("prompt.altered",
                   f"session {handle}: {len(missing)} of {len(sig)} block(s) of the prompt "
                   f"from step {p.step + 1} are not in the request verbatim"
                   + (f" (its short block(s) {', '.join(repr(_clip(b)) for b in partial)} "
                      "are)" if partial else ""),
                   severity="SHOULD" if loose and len(loose) == len(missing) else sev,
                   rule=rule, session=handle, model_event=seq,
                   missing=[_clip(b) for b in missing])
        elif sig:
            st.add("prompt.lost",
                   f"session {handle}: the prompt from step {p.step + 1} is not in the request",
                   severity=sev, rule=rule, session=handle, model_event=seq,
                   expected=_clip(sig[0]), system_slot=_clip(SEP.join(x.texts("system"))))
        return
    if matched is not primary or len(m.candidates) > 1:
        _report_choice(st, m, handle, matched, seq)
    m.candidates = [Candidate(matched.prompt, matched.label, _collapsed(matched),
                              matched.rule if matched.label == "applied"
                              else "SP-LIFECYCLE-OMIT-MAY")]
    p = matched.prompt
    if p is None:
        return
    system = SEP.join(x.texts("system"))
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
    if st.baseline.known:
        share = st.baseline.share_in(system)
        if p.mode == "override" and share >= DEFAULT_PRESENT:
            st.add("override.not-applied",
                   f"session {handle}: override mode, yet {share:.0%} of the default "
                   "instruction lines are in the system slot", session=handle,
                   model_event=seq, share=round(share, 3))
        if p.mode == "append" and share <= DEFAULT_ABSENT:
            st.add("append.replaced-default",
                   f"session {handle}: append mode, yet only {share:.0%} of the default "
                   "instruction lines are in the system slot", session=handle,
                   model_event=seq, share=round(share, 3))


def _report_choice(st: _State, m: SessionModel, handle: str, matched: Candidate,
                   seq: int) -> None:
    if matched.label == "deferred":
        st.add("prompt.change-deferred",
               f"session {handle}: the changed prompt was accepted but the old one is still "
               "in use", severity="SHOULD" if st.strict else "info", session=handle,
               model_event=seq)
    elif matched.label in ("kept", "default"):
        st.add("lifecycle.omitted-fallback",
               f"session {handle}: with the prompt omitted, the agent "
               + ("kept the stored prompt" if matched.label == "kept"
                  else "fell back to its defaults"),
               session=handle, model_event=seq, choice=matched.label)


def _collapsed(c: Candidate) -> str:
    return c.severity if c.label == "applied" else "SHOULD"


def _sev(c: Candidate) -> tuple[str, str]:
    if c.severity == "info":
        return "SHOULD", c.rule
    return c.severity, c.rule


#: A block counts as truncated (altered, not lost) when at least its first half arrived, and
#: that half is long enough not to match by chance.
MIN_TRUNCATED_PREFIX = 256


def _truncated(block: str, everything: str) -> bool:
    half = block[: len(block) // 2]
    return len(half) >= MIN_TRUNCATED_PREFIX and half in everything


def _full(p: Prompt | None, everything: str, m: SessionModel) -> bool:
    if p is None:
        # The defaults-only state fits when none of this session's own texts are present.
        return not any(b in everything for b in m.own)
    sig = p.significant
    return all(b in everything for b in sig) if sig else True


_INVISIBLE = re.compile(r"[\u0000-\u0008\u000b-\u001f\u007f\u200b-\u200f\u2060\ufeff]")


def _norm(s: str) -> str:
    s = unicodedata.normalize("NFC", s)
    s = _INVISIBLE.sub("", s)
    return " ".join(s.split())


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


def _on_acp(st: _State, ev: Event) -> None:
    d = ev.data
    msg = d.get("msg")
    if d.get("dir") == "send":
        if isinstance(msg, Mapping) and "method" in msg and "id" in msg:
            st.requests[msg["id"]] = msg["method"]
        return
    if d.get("error"):
        st.add("protocol.malformed", f"the agent wrote a bad line ({d['error']})",
               evidence_event=ev.seq, raw=_clip(d.get("raw", ""), 200), problem=d["error"])
        return
    if not isinstance(msg, Mapping):
        return
    problem = _first_error(_MESSAGE, msg)
    if problem is None and msg.get("method") == "session/update":
        problem = _first_error(_UPDATE, msg.get("params"))
    if problem is None and "result" in msg:
        method = st.requests.get(msg.get("id"))  # type: ignore[arg-type]
        validator = _RESULTS.get(method or "")
        if validator is not None:
            problem = _first_error(validator, msg["result"])
    if problem is not None:
        st.add("protocol.malformed", f"a message from the agent breaks the schema: {problem}",
               evidence_event=ev.seq, offending=_clip(dict(msg), 200))


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
