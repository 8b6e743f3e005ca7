"""The session tracker: the harness's own model of every logical session (pure, no findings).

:class:`Tracker` follows a recorded history in order and keeps which system prompts a
correct agent may be using right now, per session. Each state is a list of candidates. A
session made with a valid ``append`` prompt has one candidate (that prompt, and missing it
breaks a MUST). A ``session/load`` with a changed prompt has two: the new prompt (SHOULD) and
the old one (the RFD lets the agent defer, SP-LIFECYCLE-DEFER-MAY). A lifecycle request that
omits the prompt has two equal candidates (kept, or back to the defaults;
SP-LIFECYCLE-OMIT-MAY). The first turn of a session collapses them to what the agent chose.

Each event goes through the tracker in two steps. :meth:`Tracker.plan` reads it against the
state it met and returns a typed record of what it does (a :class:`Reply` for a step's
answer, a :class:`ModelRequest` for a request to the fake model, ``None`` otherwise), without
changing anything; :meth:`Tracker.apply` then makes that change. The checks
(:mod:`acp_fuzz.core.builtin`) judge in between: they see the state the event met and the
record of what it changes, and they never change the tracker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.lifecycle import Lifecycle, lived
from acp_fuzz.core.ops import CARRIES_PROMPT, REATTACHES, TURNS
from acp_fuzz.core.payloads import OMIT, Capabilities, Classification, blocks_of, classify
from acp_fuzz.core.steps import SWITCHING, advertises_compact, describe

__all__ = ["MIN_SIGNIFICANT", "Candidate", "ModelRequest", "Prompt", "Reply", "SessionModel",
           "Tracker", "vendor_texts"]

#: A block shorter than this (after stripping) is not used as evidence: a short text such as
#: "Be brief." can occur anywhere by chance, and a false alarm costs more than a missed one.
MIN_SIGNIFICANT = 12
#: What joins a request's segments into one text to search.
SEP = "\n\x00\n"
#: The rule an accepted prompt rests on, by how it arrived: on ``session/new`` it must be
#: applied (SP-AGENT-APPLY-NEW-MUST); on a load, resume or fork the schema says an agent that
#: cannot apply it MUST answer with an error instead (SP-AGENT-ERROR-NOSIDEEFFECT-MUST), so
#: accepting it claims that it can.
NEW_RULE = "SP-AGENT-APPLY-NEW-MUST"
LIFECYCLE_RULE = "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"
OMIT_RULE = "SP-LIFECYCLE-OMIT-MAY"
#: How many steps of a session's history its findings quote as evidence.
MAX_TRAIL = 24


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
    """What the tracker knows of one session beside its place in the lifecycle (which
    :class:`acp_fuzz.core.lifecycle.Lifecycle` keeps): the prompts it may be using, its
    conversation, and the steps behind them."""

    agent_id: str | None
    candidates: list[Candidate]
    tainted: bool = False  # state unknown (an invalid payload was accepted)
    own: set[str] = field(default_factory=set)  # every block this session may legitimately hold
    #: What rebuilt the session's prompt since the last accepted change, as evidence names
    #: it ("the compaction at step 7", or, for an agent that cannot be made to compact, "a
    #: cold load at step 4"), or ``None``. After a rebuild a change can no longer be
    #: deferred: enough turns on the old prompt make it ``prompt.change-ignored``.
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
    #: first turn must still carry the conversation (ACPFUZZ-CONVERSATION-KEPT-MUST).
    reattached: tuple[str, str] | None = None
    #: Loads and resumes of this session the agent refused (their steps' lines): a later
    #: conversation lost may be their damage.
    failed_reattach: list[str] = field(default_factory=list)
    #: The conversation as each refusal found it (its completed turns' nonces): turns lost
    #: later that all came before a refusal are what the refusal may have destroyed.
    refused_with: list[tuple[str, ...]] = field(default_factory=list)
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
    #: This model's number in its history (a session made again under the same handle is
    #: another model): what a check keys its own per-session memory by.
    uid: int = 0

    def note(self, line: str) -> None:
        self.trail.append(line)
        del self.trail[:-MAX_TRAIL]


@dataclass(frozen=True)
class Reply:
    """The answer to a step (a ``reply`` verdict), read against the state the request met.

    ``classification``: the payload's (``kind``, ``reason``, ``severity``, ``rule``; empty
    for an op without a prompt). ``live``: the session was open in this agent process when
    the request was sent. ``answered``: a success or an error came back (not a timeout nor a
    dead process). ``turn_failed``: a turn's answer that is a failure (an error; in v2 an
    ``error`` stop reason). ``changes``: whether the tracker applies it (a timeout or a dead
    process changes nothing it knows)."""

    op: Any
    args: Mapping[str, Any]
    outcome: Any
    verdict: Mapping[str, Any]
    classification: Mapping[str, str]
    live: bool
    answered: bool
    turn_failed: bool

    @property
    def kind(self) -> str | None:
        return self.classification.get("kind")

    @property
    def changes(self) -> bool:
        return self.outcome not in ("timeout", "exited")

    @property
    def target(self) -> str | None:
        """The handle of the session the request made or reattached: a fork's ``new``, any
        other op's ``session`` (``None`` when the step names none)."""
        h = self.args.get("new") if self.op == "fork" else self.args.get("session")
        return h if isinstance(h, str) else None


@dataclass(frozen=True)
class ModelRequest:
    """A request to the fake model, read against the state it met.

    ``route`` says what the request is to the session it is tied to: ``untied`` (no session
    the tracker knows), ``compaction`` (a compaction's summary side request), ``side`` (any
    other side request), ``command`` (what the agent's own compaction command asks), or
    ``turn`` (a turn of ours). For an untied request, ``compacts`` names the session whose
    compaction it is, if any (a summary request without a nonce).

    For a turn: ``nonce`` is the step's nonce when the request carries it (the turn reached
    the model), ``reattached`` the load or resume this first turn after it must replay the
    conversation for (consumed here), ``judged`` whether its prompt is judged (not a tainted
    session nor one without candidates, nor the turn a lifecycle request was sent beside),
    ``candidates`` the session's candidates before it, ``matched`` the first that fits
    (``None``: none does), and ``old_turns`` the turns on the old prompt since the last
    rebuild, this one included when it is one."""

    x: ModelExchange
    everything: str
    route: str
    session: SessionModel | None = None
    compacts: str | None = None
    nonce: str | None = None
    reattached: tuple[str, str] | None = None
    judged: bool = False
    candidates: tuple[Candidate, ...] = ()
    matched: Candidate | None = None
    old_turns: frozenset[int] = frozenset()


#: What a plan gives: what an event does to the tracked state.
Change = Reply | ModelRequest | None

_LIFECYCLE_METHODS = ("session/new", "session/load", "session/resume", "session/fork")
#: What a JSON-RPC id can be (a number or a string).
IDS = (str, int, float)


@dataclass
class Tracker:
    """The state of a run as the history so far left it (see the module's docstring)."""

    caps: dict[str, Any] = field(default_factory=dict)
    dialect: str | None = None  # recorded at initialize; None in older cassettes
    protocol: int = 1  # the version the agent answered (older cassettes: v1)
    sessions: dict[str, SessionModel] = field(default_factory=dict)
    #: Which sessions exist and are open, as the agent's answers left them.
    life: Lifecycle = field(default_factory=Lifecycle)
    known_ids: set[str] = field(default_factory=set)
    #: The step being run: its ``step`` event's data (``{}`` before the first).
    step: dict[str, Any] = field(default_factory=dict)
    #: The outcome of the current step's answer once the tracker applied it (``None``
    #: before, and for a timeout or a dead process).
    outcome: Any = None
    #: The vendor ``_meta`` texts of the current step's lifecycle request (:func:`vendor_texts`).
    vendor_sent: dict[str, str] = field(default_factory=dict)
    #: The significant blocks of every refused request, with its step.
    rejected: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    #: The steps among those refused whose ``$/cancel_request`` came right behind them: the
    #: refusal is the cancel's, not the prompt's (what it left is
    #: ``cancel-request.session-left``'s SHOULD, never ``reject.side-effect``'s MUST).
    cancelled: set[int] = field(default_factory=set)
    accepted_blocks: set[str] = field(default_factory=set)
    all_blocks: dict[str, set[str]] = field(default_factory=dict)  # handle -> every block sent
    short_blocks: dict[str, set[str]] = field(default_factory=dict)  # the same, too short
    requests: dict[str | int | float, str] = field(default_factory=dict)  # id -> method
    expecting_exit: bool = False
    #: The agent can be made to compact (it advertised a ``compact`` command, the run's
    #: profile can force it, or a compaction was seen): compaction, not a cold load, is then
    #: the rebuild that ends a deferral (SP-LIFECYCLE-DEFER-MAY).
    can_compact: bool = False
    #: Turns that completed in the run (any session): the agent can run turns at all.
    turns_ok: int = 0
    #: Sessions whose model request got an error status or a fault during the current step
    #: (the fake model's own failure, e.g. a forced context overflow or a prompt step's
    #: fault, explains a failing turn).
    model_failed: set[str] = field(default_factory=set)
    #: Sessions a ``session/set_mode`` was written to during the current turn, and whether
    #: they were switched before it (undone if the agent refuses it).
    unswitched: dict[str, bool] = field(default_factory=dict)
    #: Whether the fork the current step sent during a turn (``during: fork``) was made.
    forked: bool = False
    #: Whether the close or delete the current step sent during a turn was accepted.
    ended: bool = False
    _models: int = 0

    @property
    def index(self) -> int:
        """The current step's index (-1 before the first)."""
        return int(self.step.get("index", -1))

    @property
    def args(self) -> Mapping[str, Any]:
        """The current step's arguments."""
        args = self.step.get("args", {})
        return args if isinstance(args, Mapping) else {}

    # -- reading an event ---------------------------------------------------------------------

    def plan(self, ev: Event) -> Change:
        """What ``ev`` does to the state, read against the state it met (nothing changes)."""
        if ev.kind == "verdict" and ev.data.get("what") == "reply":
            return self._plan_reply(ev.data)
        if ev.kind == "model":
            return self._plan_model(ev)
        return None

    def apply(self, ev: Event, change: Change) -> None:
        """Make the change ``ev`` brings (``change`` is :meth:`plan`'s record of it)."""
        if ev.kind == "step":
            self._on_step(ev)
        elif ev.kind == "verdict":
            if ev.data.get("what") == "initialize":
                self._on_initialize(ev.data)
            elif isinstance(change, Reply) and change.changes:
                self._on_reply(change)
            elif ev.data.get("what") == "during":
                self._on_during(ev.data)
        elif ev.kind == "model" and isinstance(change, ModelRequest):
            self._on_model(change)
        elif ev.kind == "acp":
            self._on_acp(ev)

    def resends(self, args: Mapping[str, Any], sp: Any) -> bool:
        """Whether a load, resume or fork re-sends the prompt the session (for fork: the
        source) may be using now: the same mode and blocks as one of its candidates."""
        m = self.sessions.get(args.get("session"))  # type: ignore[arg-type]
        if m is None or not isinstance(sp, Mapping):
            return False
        blocks = blocks_of(sp)
        return any(c.prompt is not None and c.prompt.mode == sp.get("mode")
                   and c.prompt.blocks == blocks for c in m.candidates)

    def line(self, args: Mapping[str, Any]) -> str:
        """The current step as a trail line: ``"4: session/load A ..."``."""
        return f"{self.index + 1}: {describe_step(args)}"

    # -- steps and verdicts -------------------------------------------------------------------

    def _on_step(self, ev: Event) -> None:
        self.step = dict(ev.data)
        self.outcome = None
        self.vendor_sent = {}
        self.model_failed = set()
        self.unswitched = {}
        self.forked = False
        self.ended = False
        args = self.args
        handle = args.get("session")
        sp = args.get("systemPrompt")
        owner = args.get("new", handle) if args.get("op") == "fork" else handle
        texts = {b.strip() for b in blocks_of(sp)} - {""}
        if texts and isinstance(owner, str):
            # Significant blocks are evidence (leaks); short ones only help name a failure.
            for b in texts:
                kept = self.all_blocks if len(b) >= MIN_SIGNIFICANT else self.short_blocks
                kept.setdefault(owner, set()).add(b)
        self.expecting_exit = args.get("op") == "restart"

    def _on_initialize(self, d: Mapping[str, Any]) -> None:
        caps = d.get("capabilities")
        self.caps = dict(caps) if isinstance(caps, Mapping) else {}
        dialect = d.get("dialect")
        self.dialect = dialect if isinstance(dialect, str) else None
        proto = d.get("protocol")
        answered = proto.get("answered") if isinstance(proto, Mapping) else None
        self.protocol = answered if answered in (1, 2) else 1
        forced = d.get("compaction")
        self.can_compact = self.can_compact or (isinstance(forced, list) and bool(forced))

    def _plan_reply(self, d: Mapping[str, Any]) -> Reply:
        args = self.args
        op = args.get("op")
        outcome = d.get("outcome")
        return Reply(op=op, args=args, outcome=outcome, verdict=d,
                     classification=self._classify(op, args),
                     live=self.life.is_open(args.get("session")),
                     answered=outcome in ("ok", "error"),
                     turn_failed=outcome == "error" or (self.protocol >= 2
                                                        and d.get("stopReason") == "error"))

    def _classify(self, op: Any, args: Mapping[str, Any]) -> dict[str, str]:
        """The payload's classification, computed here from the payload as sent and the
        capabilities recorded at ``initialize`` (docs/rules.md), never read back
        from the ``class`` the runner wrote into the step: so ``replay --offline`` judges an
        old cassette with today's classifier. A legacy dialect's invalid payload is a probe
        (no RFD rule governs a vendor extension); a cassette from before the dialect was
        recorded says so through the rule of its recorded class."""
        if op not in CARRIES_PROMPT:
            return {}
        caps = Capabilities(**{k: v is True for k, v in self.caps.items()
                               if k in Capabilities.__slots__})
        extra = args.get("extra")
        c = classify(args.get("systemPrompt", OMIT), caps,
                     extra_params=extra if isinstance(extra, Mapping) else None)
        recorded = self.step.get("class")
        legacy = self.dialect not in (None, "standard") or (
            self.dialect is None and isinstance(recorded, Mapping)
            and recorded.get("rule") == "EXT-META-MUSTNOT")
        if legacy and c.kind == "invalid":
            c = Classification("probe", c.reason, "info", "EXT-META-MUSTNOT")
        return {"kind": c.kind, "reason": c.reason, "severity": c.severity, "rule": c.rule}

    def _on_reply(self, r: Reply) -> None:
        """The answer's change: what the agent accepted (or refused) is what the sessions
        hold from now on."""
        self.outcome = r.outcome
        op, args = r.op, r.args
        handle = args.get("session")
        blocks = blocks_of(args.get("systemPrompt"))
        self._on_answer(r, handle, blocks)
        if r.outcome != "ok":
            return
        cold = self.life.cold(handle)
        args = lived(args, forked=self.forked, ended=self.ended)  # as the runner's
        self.life.apply(args)
        if blocks:
            self.accepted_blocks.update(b.strip() for b in blocks)
        sid = r.verdict.get("sessionId")
        if isinstance(sid, str):
            self.known_ids.add(sid)
        line = self.line(args)
        if isinstance(handle, str) and handle in self.sessions and op not in ("prompt", "cancel"):
            # Anything else done to the session since makes a failing turn less its prompt's.
            self.sessions[handle].fresh_prompt = None
        if op in CARRIES_PROMPT:
            self._on_handed(r, handle, blocks, cold, line)
        else:
            self._on_used(op, handle, args, line, r.verdict.get("stopReason"))

    def _on_answer(self, r: Reply, handle: Any, blocks: tuple[str, ...]) -> None:
        """What any answer says, accepted or refused: a turn answered used what its session
        was handed, a refused reattach changed nothing, a refused prompt is not the agent's."""
        op, outcome, idx = r.op, r.outcome, self.index
        if op == "prompt" and r.answered and isinstance(handle, str) and handle in self.sessions:
            # The turn used what the session was handed: a failing turn after it is no
            # longer the first.
            m = self.sessions[handle]
            m.fresh_prompt = m.rejected_change = None
            if not r.turn_failed:
                self.turns_ok += 1
                m.turned = True
        if op in REATTACHES and outcome == "error" and handle in self.sessions \
                and r.live and not self.life.cold(handle):
            # Refused on a session this process has open: nothing may change.
            self.sessions[handle].rejected_change = self.line(r.args)
        if op in REATTACHES and outcome == "error" and handle in self.sessions:
            self.sessions[handle].failed_reattach.append(self.line(r.args))
            self.sessions[handle].refused_with.append(tuple(self.sessions[handle].conversation))
        if outcome == "error" and r.args.get("cancel_request"):
            self.cancelled.add(idx)
        if outcome == "error" and blocks:
            self.rejected.append((idx, tuple(b.strip() for b in blocks
                                             if len(b.strip()) >= MIN_SIGNIFICANT)))

    def _on_handed(self, r: Reply, handle: Any, blocks: tuple[str, ...], cold: bool,
                   line: str) -> None:
        """An accepted new, load, resume or fork: the prompt (or the default) the session is
        now owed, and what it keeps of what it held."""
        op, args, kind = r.op, r.args, r.kind
        sp = args.get("systemPrompt")
        prompt = Prompt(str(sp["mode"]), blocks, self.index) \
            if kind == "valid" and isinstance(sp, Mapping) else None
        sid = r.verdict.get("sessionId")
        vendor = {k: v for k, v in self.vendor_sent.items()
                  if v.strip() not in {b.strip() for b in blocks}}
        fresh = line if kind == "valid" else None
        if op == "new" and isinstance(handle, str):
            m = self._model(SessionModel(sid, [], vendor=vendor, fresh_prompt=fresh))
            if kind == "valid":
                m.candidates = [Candidate(prompt, "applied", "MUST", NEW_RULE)]
            elif kind in ("omitted", "null"):
                m.candidates = [Candidate(None, "default", "MUST", "SP-NEW-OMIT-DEFAULT-DEF")]
            else:
                m.tainted = True
            if prompt:
                m.own.update(prompt.significant)
            m.note(line)
            self.sessions[handle] = m
        elif op in REATTACHES and handle in self.sessions:
            m = self.sessions[handle]
            m.note(line)
            if m.conversation:
                m.reattached = (op, line)
            self._reattach(m, op, prompt, kind, cold, vendor, line)
            m.tainted = m.tainted or kind in ("invalid", "probe")
            m.fresh_prompt = fresh
        elif op == "fork" and handle in self.sessions and isinstance(args.get("new"), str):
            src = self.sessions[handle]
            m = self._model(SessionModel(sid, list(src.candidates), tainted=src.tainted,
                                         own=set(src.own), rebuilt=src.rebuilt,
                                         old_turns=set(src.old_turns), trail=list(src.trail),
                                         vendor=dict(src.vendor),
                                         mode_switched=src.mode_switched))
            # The fork's conversation starts empty: how much of its source's context a fork
            # carries is the agent's choice (SES-FORK-DEF), so only its own turns are owed.
            m.note(line)
            self._reattach(m, op, prompt, kind, False, vendor, line)
            m.tainted = m.tainted or kind in ("invalid", "probe")
            m.fresh_prompt = fresh
            self.sessions[args["new"]] = m

    def _on_used(self, op: str, handle: Any, args: Mapping[str, Any], line: str,
                 stop: Any = None) -> None:
        """Any other accepted step: a session deleted, every session restarted, a mode, a
        title, a compaction or a turn noted on its session."""
        if op == "delete":
            # Gone for good. Its prompt stays foreign to every other session (``all_blocks``):
            # a deleted session's prompt in a later session's request is a leak.
            self.sessions.pop(handle, None)
        elif op == "restart":
            for m in self.sessions.values():
                m.note(line)
        elif op in ("set_mode", "set_config_option") and handle in self.sessions:
            # The prompt belongs to the session, not to a mode or a model: every candidate
            # stands, and the next turn is judged against them. A mode (or a model) may bring
            # instructions of its own (a plan mode's), so the defaults learned before the
            # switch no longer judge it.
            m = self.sessions[handle]
            m.note(line)
            m.mode_switched = True
        elif op == "set_title" and handle in self.sessions:
            # A title is the session's label, not its instructions: every candidate stands
            # (the defaults too), and the next turn is judged against them.
            self.sessions[handle].note(line)
        elif op == "compact" and handle in self.sessions:
            m = self.sessions[handle]
            m.note(line)
            if args.get("by") == "command":
                # The agent's own compaction command, answered with success: it compacted
                # (what it sent the model meanwhile was its summary, not a turn).
                self._compacted(m, handle, "its compaction command")
            elif m.turn_seen is not None:
                # A turn with the context reported near its limit: a turn like any other.
                m.conversation.append(m.turn_seen)
            m.turn_seen = None
        elif op in ("prompt", "cancel", "close") and handle in self.sessions:
            m = self.sessions[handle]
            m.note(line)
            kept = not args.get("during") or (args["during"] in SWITCHING
                                               and stop != "cancelled")
            if op == "prompt" and kept and m.turn_seen is not None:
                # A completed turn (not a cancelled one, by a cancel, a close or a
                # $/cancel_request sent during it: an agent may drop those; nor one a mode
                # switch sent during it stopped) is part of the conversation from now on.
                m.conversation.append(m.turn_seen)
            m.turn_seen = None
            other = self.sessions.get(args.get("with"))  # type: ignore[arg-type]
            if other is not None:
                # The turn run at once beside it: how it ended is the together verdict's,
                # not this answer's, so it is not owed to the conversation (leniently).
                other.turn_seen = None
            if args.get("during") == "delete":
                self.sessions.pop(handle, None)  # deleted while its turn ran: as a delete step

    def _switching(self) -> None:
        """A ``session/set_mode`` or ``session/set_config_option`` written during a turn
        (``during: set-mode`` or ``set-config``): from the
        moment it is on the wire the agent may have switched, so the session's model
        requests from then on are read as after a switch (as after an accepted ``set_mode``
        step); its ``during`` verdict undoes that if the agent refused it."""
        handle = self.args.get("session")
        if self.args.get("during") in SWITCHING and isinstance(handle, str) \
                and handle in self.sessions:
            m = self.sessions[handle]
            self.unswitched.setdefault(handle, m.mode_switched)  # the first send's
            m.mode_switched = True

    def _on_during(self, d: Mapping[str, Any]) -> None:
        """A ``during`` verdict: a mode switch sent during the turn and refused, and refused
        again once the turn had ended (its control), changed nothing (one never answered, or
        accepted the second time, may have: it stays switched). A fork the agent made is a
        session of its own, owed what a fork step with no prompt is owed."""
        handle = self.args.get("session")
        self._fork_made(handle, d.get("fork"))
        ending = d.get("close", d.get("delete"))
        self.ended = isinstance(ending, Mapping) and ending.get("outcome") == "ok"
        before = self.unswitched.pop(handle, None) if isinstance(handle, str) else None
        answer = d.get("set_mode", d.get("set_config"))
        if not isinstance(answer, Mapping) or before is None or handle not in self.sessions:
            return
        control = answer.get("control")
        # (A set_config_option has no control: refused mid-turn, it changed nothing.)
        again = control.get("outcome") if isinstance(control, Mapping) else "error"
        if answer.get("outcome") == "error" and again == "error":
            self.sessions[handle].mode_switched = before

    def _fork_made(self, handle: Any, answer: Any) -> None:
        """A fork sent during the turn of ``handle``, with ``answer`` its record in the
        ``during`` verdict: once made (a session id came back), the copy is registered as a
        fork step's copy with no ``systemPrompt`` (it inherits its source's prompt), so the
        prompt oracles judge its turns as any fork's."""
        if not isinstance(answer, Mapping) or answer.get("outcome") != "ok" \
                or not isinstance(answer.get("sessionId"), str) \
                or not isinstance(answer.get("new"), str) or handle not in self.sessions:
            return
        self.forked = True
        args = {"op": "fork", "session": handle, "new": answer["new"]}
        self.known_ids.add(answer["sessionId"])
        r = Reply(op="fork", args=args, outcome="ok", verdict=answer,
                  classification=self._classify("fork", args), live=True, answered=True,
                  turn_failed=False)
        line = f"{self.index + 1}: {describe_step(args)} (sent while a turn of {handle} ran)"
        self._on_handed(r, handle, (), False, line)

    def _model(self, m: SessionModel) -> SessionModel:
        self._models += 1
        m.uid = self._models
        return m

    def _reattach(self, m: SessionModel, op: str, new: Prompt | None, kind: Any, cold: bool,
                  vendor: dict[str, str], line: str) -> None:
        """A load, resume or fork that the agent accepted: the session's candidates after it.

        Call OLD what the session may be sending now (its candidates) and NEW the prompt the
        request carried. NEW is expected (MUST: accepting it claims it can be applied). Each
        OLD that differs stays as ``deferred`` (SP-LIFECYCLE-DEFER-MAY) until a turn shows
        NEW; ``rebuilt`` records what rebuilt the prompt with or after the change, after which
        an OLD still in use is ``prompt.change-ignored`` (:meth:`_cold_rebuild` says when a
        cold load counts). An omitted prompt keeps every OLD (as ``kept``) next to the
        defaults (SP-LIFECYCLE-OMIT-MAY)."""
        olds = m.candidates
        rebuild = self._cold_rebuild(line) if cold else None
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

    def _cold_rebuild(self, line: str) -> str | None:
        """What a cold load (a load or resume in a new agent process) counts as: a rebuild
        only for an agent that cannot be made to compact. A cold load is acp-fuzz's own
        reading of a rebuild (a new process holds no prompt cache in memory), but the RFD's
        reason to defer, prompt caches, holds across a restart too (a provider's cache
        outlives the process), and compaction is the rebuild it names: where compaction can
        be caused, it is the judge."""
        if self.can_compact:
            return None
        return f"the cold load at step {line.split(':', 1)[0]}"

    def _compacted(self, m: SessionModel, handle: str, how: str) -> None:
        """Session ``handle`` was compacted (during the current step): the agent rebuilt its
        prompt, the rebuild at which a deferred change must land (SP-LIFECYCLE-DEFER-MAY),
        and its conversation is now a summary (the turns before it are no longer owed on a
        load)."""
        self.can_compact = True
        idx = self.index
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

    # -- model requests -----------------------------------------------------------------------

    def _plan_model(self, ev: Event) -> ModelRequest:
        x = ModelExchange.from_wire(ev.data)
        handle = x.session
        everything = SEP.join(s.text for s in x.segments)
        args = self.args
        compaction = x.side and ev.data.get("side_kind") == "compaction"
        if handle is None or handle not in self.sessions:
            step_session = args.get("session")
            compacts = step_session if (
                handle is None and compaction and args.get("op") in ("prompt", "compact")
                and step_session in self.sessions) else None
            # A compaction's summary request that carries no nonce (codex-acp summarises
            # from its own history): the runner drives one turn at a time, so it is the
            # compaction of the session the step is about.
            return ModelRequest(x, everything, "untied", compacts=compacts)
        m = self.sessions[handle]
        if compaction:
            # The summary request of a compaction (a profile's [[side]] rule of kind
            # compaction): the session's prompt is rebuilt from here on.
            return ModelRequest(x, everything, "compaction", m)
        if x.side:
            return ModelRequest(x, everything, "side", m)
        if args.get("op") == "compact" and args.get("by") == "command" \
                and args.get("session") == handle:
            # The agent's compaction command sends no turn of ours (no nonce of this step):
            # what it asks the model is its summary.
            return ModelRequest(x, everything, "command", m)
        step_nonce = self.step.get("nonce")
        nonce = step_nonce if (args.get("op") in TURNS
                               and x.turn is not None and isinstance(step_nonce, str)
                               and step_nonce in everything) else None
        judged = not (m.tainted or not m.candidates) and not (
            # The turn a load or resume was sent beside: it may run on the old prompt or, if
            # the agent applied the change mid-turn, on the new one. The turns after it are
            # judged (the change applied whole, or, if refused, nothing changed).
            args.get("busy") and args.get("session") == handle
            and x.turn == self.step.get("turn"))
        matched = next((c for c in m.candidates if fits(c.prompt, everything, m)), None) \
            if judged else None
        old_turns = frozenset(m.old_turns)
        if matched is not None and matched.label == "deferred" and m.rebuilt \
                and len(m.candidates) > 1:
            old_turns |= {self.index}
        return ModelRequest(x, everything, "turn", m, nonce=nonce,
                            reattached=m.reattached if nonce is not None else None,
                            judged=judged, candidates=tuple(m.candidates), matched=matched,
                            old_turns=old_turns)

    def _on_model(self, r: ModelRequest) -> None:
        x, m = r.x, r.session
        if x.session is not None and (x.status >= 400 or x.fault is not None):
            self.model_failed.add(x.session)
        if r.route == "untied":
            if r.compacts is not None:
                self._compacted(self.sessions[r.compacts], r.compacts, "its summary request")
            return
        assert m is not None and x.session is not None
        if r.route == "compaction":
            self._compacted(m, x.session, "its summary request")
        elif r.route == "command":
            self._compacted(m, x.session, "its compaction command")
        elif r.route == "turn":
            if r.nonce is not None:
                m.turn_seen = r.nonce
                m.reattached = None
            if r.matched is not None:
                self._turn_showed(m, r)

    def _turn_showed(self, m: SessionModel, r: ModelRequest) -> None:
        """A turn showed the prompt ``r.matched``: the session's candidates collapse to it."""
        matched = r.matched
        assert matched is not None
        m.compacted = None
        # A prompt the agent kept after an omitted one stays beside the defaults it could
        # have fallen back to: the omission let it fall back (SP-LIFECYCLE-OMIT-MAY), and it
        # may defer that change until it next rebuilds its prompt (SP-LIFECYCLE-DEFER-MAY).
        # The defaults on a later turn (after a compaction, say) are that fallback landing,
        # not a lost prompt. (codex-acp and claude-agent-acp do exactly this, in v2.)
        fallback = [c for c in m.candidates if _omitted_default(c)] \
            if matched.prompt is not None and matched.origin == "kept" else []
        if matched.label == "applied":
            m.candidates = [matched, *fallback]
            m.rebuilt = None
            m.old_turns = set()
        elif len(m.candidates) == 1:
            pass  # nothing to choose between: a session made without a prompt
        elif matched.label == "deferred":
            m.old_turns = set(r.old_turns)
        else:
            # The choice is made: from now on the session's prompt is the one it showed.
            m.omit_situation = None
            m.candidates = [Candidate(matched.prompt, "applied", "MUST", LIFECYCLE_RULE,
                                      matched.origin), *fallback]

    # -- frames ---------------------------------------------------------------------------------

    def _on_acp(self, ev: Event) -> None:
        d = ev.data
        msg = d.get("msg")
        if d.get("dir") == "send":
            # Only a JSON-RPC id and method, as acp-fuzz sends them: a hand-edited cassette's
            # may be anything, a list too (which no dict can take as a key).
            if isinstance(msg, Mapping) and isinstance(msg.get("method"), str) \
                    and isinstance(msg.get("id"), IDS):
                self.requests[msg["id"]] = msg["method"]
                if msg["method"] in ("session/set_mode", "session/set_config_option"):
                    self._switching()
                if msg["method"] in _LIFECYCLE_METHODS and isinstance(msg.get("params"), Mapping):
                    self.vendor_sent = vendor_texts(msg["params"])
            return
        if d.get("error") or not isinstance(msg, Mapping):
            return
        if msg.get("method") == "session/update":
            self._on_update(msg.get("params"))
        elif "id" in msg and advertises_compact(msg.get("result")):
            # v2: the commands of a new or resumed session are in its result (codex-acp sends
            # no available_commands_update there).
            self.can_compact = True

    def _on_update(self, params: Any) -> None:
        """What a ``session/update`` says about compaction: a ``compact`` command advertised
        (the agent can be made to compact: a ``compact`` step sends it), or a compaction of
        one of the sessions completed (``compaction_update``)."""
        if not isinstance(params, Mapping) or not isinstance(params.get("update"), Mapping):
            return
        update = params["update"]
        kind = update.get("sessionUpdate")
        if advertises_compact(update):
            self.can_compact = True
        elif kind == "compaction_update" and update.get("status") == "completed":
            sid = params.get("sessionId")
            for handle, m in self.sessions.items():
                if sid is not None and m.agent_id == sid:
                    self._compacted(m, handle, "compaction_update completed")
                    return


def _omitted_default(c: Candidate) -> bool:
    """Whether ``c`` is the defaults an omitted prompt on a load, resume or fork allowed."""
    return c.prompt is None and c.label == "default" and c.rule == OMIT_RULE


def fits(p: Prompt | None, everything: str, m: SessionModel) -> bool:
    """Whether a request's text (``everything``) shows prompt ``p`` of session ``m``: every
    significant block of it; for the defaults-only state (``None``), none of the session's
    own texts (its standard prompts, or the vendor texts sent with them)."""
    if p is None:
        vendor = {t.strip() for t in m.vendor.values() if len(t.strip()) >= MIN_SIGNIFICANT}
        return not any(b in everything for b in m.own | vendor)
    sig = p.significant
    return all(b in everything for b in sig) if sig else True


def describe_step(args: Mapping[str, Any]) -> str:
    """A step as evidence names it (:func:`acp_fuzz.core.steps.describe`)."""
    try:
        return describe(args)
    except (KeyError, TypeError):  # a hand-edited cassette's step: name the op only
        return str(args.get("op"))


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
