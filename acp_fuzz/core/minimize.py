"""The minimizer: make a failing step sequence as short and as plain as it can be (pure).

Hypothesis shrinks the draws of the lifecycle machine, but for stateful tests it does not
promise that no step can be deleted (a restart that changes nothing for the failure can survive
its shrinker, and a step that a later one refers to can only go once that one is gone).
:func:`minimize` works on the steps themselves, on top of it:

0. the failing session alone (:func:`one_session`): the steps of the sessions the findings
   name (and the sessions they were forked from), and the steps of no session, in one
   trial. A covering example runs several independent units, each on a session of its own,
   so a failure in one of them is that unit, found at once where deleting step by step
   tries every other unit's steps first (claude-agent-acp's vendor ``_meta`` finding: from 6
   steps to 2 in 19 trials, now in 1 and a few to confirm it is minimal);
1. the smallest forms (:func:`short_forms`): each payload the steps sent on a fresh
   ``session/new``, alone, with one turn, or re-sent by the load, resume or fork the failure
   used (what most systemPrompt bugs reduce to), even when no shorter than the failure;
2. delete steps one at a time, sweeping again until a whole sweep deletes nothing. Deleting a
   fork re-points the later steps on the fork to its source (:func:`delete_step`), so a fork
   of a fork becomes a fork of the root; a prompt given by a load or resume moves to the
   session's creation, in place of the one it had (:func:`hoist`); a fork with a prompt of
   its own becomes a new session with it (:func:`as_new`); a turn with a cancel becomes a
   plain turn;
3. drop the extra params and vendor ``_meta`` of a request, give each new session a
   directory of its own, and simplify each payload (one short ``append`` block, fewer and
   shorter blocks, no decorations), where the failure allows;
4. rename the sessions A, B, ... in order of appearance.

Each of these is a named pass in :data:`PASSES` (a :class:`ShrinkPass`); a
:class:`Shrinker` runs them and counts, per pass, the trials it ran and the ones that
became the new best (``Shrinker.stats``), so a pass can be tested, or run, alone.

A trial counts only when it fails with one of the same oracles. The minimizer never runs an
agent itself: it is handed a function that runs steps and returns their findings, so that it
is pure and testable on a model of an agent (``tests/cover/test_minimize.py``).

:func:`shape_of` is what two failures must share to be the same bug: the operations with the
sessions named by first appearance and each payload by its kind, not its text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_fuzz.core.fills import expanded_length, marks_in
from acp_fuzz.core.findings import Finding, is_reported
from acp_fuzz.core.history import Event
from acp_fuzz.core.lifecycle import allowed, handle_name
from acp_fuzz.core.ops import CARRIES_PROMPT, MOVES, REATTACHES, RESENDS
from acp_fuzz.core.payloads import Capabilities, blocks_of, classify

__all__ = [
    "PASSES",
    "Failure",
    "PassStats",
    "Shape",
    "ShrinkPass",
    "Shrinker",
    "as_new",
    "canonical_handles",
    "delete_step",
    "embeds",
    "hoist",
    "interesting",
    "minimize",
    "one_session",
    "refusals",
    "same_bug",
    "shape_of",
    "short_forms",
]

Steps = list[dict[str, Any]]
#: Runs steps on a fresh agent: (the events, the findings), stopping at the first failure.
Runner = Callable[[Steps], tuple[list[Event], list[Finding]]]


@dataclass
class Failure:
    """A failing run: its steps, its events and what the oracles said about it."""

    steps: Steps
    events: list[Event]
    findings: list[Finding]
    #: Values to scrub from the cassette (the same for every run of one target).
    secrets: frozenset[str] = frozenset()

    def oracles(self) -> set[str]:
        return {f.oracle for f in interesting(self.findings)}


def interesting(findings: Sequence[Finding]) -> list[Finding]:
    """The findings that fail an example: MUST and SHOULD.

    SHOULD findings fail a Hypothesis example even without ``--strict``, so that they are
    shrunk and reported; ``--strict`` only decides the exit code."""
    return [f for f in findings if is_reported(f.severity)]


@dataclass
class PassStats:
    """What one pass did in one minimization: the trials it ran and the ones that still
    failed (and so became the new best)."""

    attempts: int = 0
    successes: int = 0


@dataclass(frozen=True)
class ShrinkPass:
    """One way of making a failing sequence smaller or plainer, as Hypothesis's
    ``ShrinkPass``: ``run`` tries its trials through :meth:`Shrinker.attempt` and returns
    whether the best sequence changed. ``repeat`` passes run in sweeps until a whole sweep
    changes nothing; the others run once, after them, in order."""

    name: str
    run: Callable[[Shrinker], bool]
    repeat: bool
    doc: str


class Shrinker:
    """:func:`minimize` as an object: the best failure so far, the trial runner, and what
    each pass did (:attr:`stats`, by pass name), so that each pass can be tested and
    reported alone."""

    def __init__(self, failure: Failure, run: Runner, *, oracles: set[str] | None = None,
                 max_trials: int | None = None) -> None:
        self.best = failure
        self.run_steps = run
        self.oracles = failure.oracles() if oracles is None else oracles
        self.max_trials = max_trials
        self.trials = 0
        self.stats: dict[str, PassStats] = {p.name: PassStats() for p in PASSES}
        self._current = ""

    def attempt(self, trial: Steps) -> bool:
        """Run ``trial``; when it fails with one of the oracles, it is the new best."""
        if not trial or not allowed(trial):
            return False
        if self.max_trials is not None and self.trials >= self.max_trials:
            return False
        self.trials += 1
        stats = self.stats[self._current]
        stats.attempts += 1
        events, findings = self.run_steps(trial)
        if self.oracles & {f.oracle for f in interesting(findings)}:
            self.best = Failure(trial, events, findings, self.best.secrets)
            stats.successes += 1
            return True
        return False

    def run_pass(self, p: ShrinkPass) -> bool:
        self._current = p.name
        return p.run(self)

    def shrink(self) -> Failure:
        opening, rest = PASSES[:OPENING], PASSES[OPENING:]
        for p in opening:
            self.run_pass(p)
        changed = True
        while changed and len(self.best.steps) > 1:
            changed = False
            for p in rest:
                if p.repeat and len(self.best.steps) > 1 and self.run_pass(p):
                    changed = True
        for p in rest:
            if not p.repeat:
                self.run_pass(p)
        return self.best

    def summary(self, before: int) -> dict[str, Any]:
        """What the shrink did, as plain data for the reports (Hypothesis shows its
        shrinker's statistics too): the steps ``before`` and after, the trials run, and per
        pass that ran any, its trials and how many of them still failed (and were kept)."""
        return {"from": before, "to": len(self.best.steps), "trials": self.trials,
                "passes": {name: [st.attempts, st.successes]
                           for name, st in self.stats.items() if st.attempts}}


def minimize(failure: Failure, run: Runner, *, oracles: set[str] | None = None,
             max_trials: int | None = None) -> Failure:
    """Make ``failure.steps`` 1-minimal (no single step can be dropped and still fail), with
    the plainest operations and payloads that still fail with one of the same oracles: the
    passes of :data:`PASSES`, in order (:class:`Shrinker` keeps what each did).

    ``oracles`` are the ones a trial must fail with (default: the failure's own);
    ``max_trials`` bounds the runs (None: as many as it takes; the passes always end). SHOULD
    findings fail a trial as MUST ones do, with or without ``--strict`` (:func:`interesting`)."""
    return Shrinker(failure, run, oracles=oracles, max_trials=max_trials).shrink()


def _one_session(sh: Shrinker) -> bool:
    named: list[str | None] = []
    for f in interesting(sh.best.findings):
        if f.oracle in sh.oracles:
            # A leak names the session whose text went astray as well as the one it reached.
            foreign = f.evidence.get("foreign_session")
            named += [f.session, *([foreign] if isinstance(foreign, str) else [])]
    trial = one_session(sh.best.steps, named)
    return trial is not None and sh.attempt(trial)


def _short_forms(sh: Shrinker) -> bool:
    for trial in short_forms(sh.best.steps):
        # At the same length too: a short form is the canonical reproduction of its shape,
        # so two failures of one bug end in the same steps (and are told to be one).
        if len(trial) > len(sh.best.steps) or trial == sh.best.steps:
            continue
        if sh.attempt(trial):
            return True
    return False


def _delete_steps(sh: Shrinker) -> bool:
    changed = False
    i = 0
    while i < len(sh.best.steps) and len(sh.best.steps) > 1:
        if sh.attempt(delete_step(sh.best.steps, i)):
            changed = True
        else:
            i += 1
    return changed


def _first_of(make: Callable[[Sequence[Mapping[str, Any]], int], Steps | None]
              ) -> Callable[[Shrinker], bool]:
    """A pass that tries ``make(steps, i)`` at each position and stops at the first that
    still fails."""
    def run(sh: Shrinker) -> bool:
        for i in range(len(sh.best.steps)):
            trial = make(sh.best.steps, i)
            if trial is not None and sh.attempt(trial):
                return True
        return False
    return run


def _each(make: Callable[[Mapping[str, Any]], dict[str, Any] | list[dict[str, Any]] | None]
          ) -> Callable[[Shrinker], bool]:
    """A pass that replaces each step by ``make(step)`` (one plainer step, or several to try
    in order until one fails), keeping every replacement that still fails."""
    def run(sh: Shrinker) -> bool:
        changed = False
        for i, s in enumerate(list(sh.best.steps)):
            made = make(s)
            for plain in ([made] if isinstance(made, dict) else made or []):
                if sh.attempt([*sh.best.steps[:i], plain, *sh.best.steps[i + 1:]]):
                    changed = True
                    break
        return changed
    return run


def _as_turn(op: str) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    def make(s: Mapping[str, Any]) -> dict[str, Any] | None:
        return {"op": "prompt", "session": s["session"]} if s["op"] == op else None
    return make


def _plain_turn(s: Mapping[str, Any]) -> dict[str, Any] | list[dict[str, Any]] | None:
    """A turn with a request sent during it, or with another turn beside it: the plain turn;
    a fork sent during it, first the fork alone (its copy's later steps still have it)."""
    if s.get("op") != "prompt" or not (s.get("during") or s.get("with")):
        return None
    turn = {"op": "prompt", "session": s["session"]}
    if s.get("during") == "fork":
        return [{"op": "fork", "session": s["session"], "new": s["new"]}, turn]
    return turn


def _not_cancelled(s: Mapping[str, Any]) -> dict[str, Any] | None:
    return {k: v for k, v in s.items() if k != "cancel_request"} \
        if s.get("cancel_request") else None


def _plain_request(s: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request without its vendor fields and without naming acp-fuzz's MCP server."""
    if "extra" in s or "_meta" in s or "mcp" in s:
        return {k: v for k, v in s.items() if k not in ("extra", "_meta", "mcp")}
    return None


def _own_cwd(s: Mapping[str, Any]) -> dict[str, Any] | None:
    if s.get("op") == "new" and s.get("cwd") == "shared":
        return {**s, "cwd": "distinct"}
    return None


def _home_directory(s: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    if s.get("op") not in MOVES:
        return None
    moved = [k for k, on in (("roots", bool(s.get("roots"))),
                             ("cwd", s.get("cwd") == "moved")) if on]
    drops = [moved] if len(moved) < 2 else [moved, ["roots"], ["cwd"]]
    return [{k: v for k, v in s.items() if k not in drop} for drop in drops if drop]


def _not_busy(s: Mapping[str, Any]) -> dict[str, Any] | None:
    return {k: v for k, v in s.items() if k != "busy"} if s.get("busy") else None


def _not_during_turn(s: Mapping[str, Any]) -> dict[str, Any] | None:
    return {k: v for k, v in s.items() if k != "while"} if s.get("while") else None


def _simpler_payloads_pass(sh: Shrinker) -> bool:
    changed = False
    for sp in _payloads(sh.best.steps):
        for smaller in _simpler_payloads(sp):
            if sh.attempt(_replace_payload(sh.best.steps, sp, smaller)):
                changed = True
                break
    return changed


def _canonical(sh: Shrinker) -> bool:
    renamed = canonical_handles(sh.best.steps)
    return renamed != sh.best.steps and sh.attempt(renamed)


#: The passes, in the order :meth:`Shrinker.shrink` runs them (the first :data:`OPENING` run
#: once each, before the sweeps).
PASSES: tuple[ShrinkPass, ...] = (
    ShrinkPass("one-session", _one_session, False,
               "the steps of the failing sessions (and their fork sources) alone, with the "
               "steps of no session"),
    ShrinkPass("short-forms", _short_forms, False,
               "each payload on a fresh session/new, alone, with one turn, or re-sent by the "
               "load, resume or fork the failure used"),
    ShrinkPass("delete-step", _delete_steps, True,
               "delete one step (a deleted fork's later steps go to its source)"),
    ShrinkPass("hoist-prompt", _first_of(lambda steps, i: hoist(steps, i)), True,
               "a prompt a load or resume gives a session moves to its creation (in place "
               "of the one it had), and the load or resume goes"),
    ShrinkPass("fork-as-new", _first_of(lambda steps, i: as_new(steps, i)), True,
               "a fork the failure does not need as a fork is a new session with its prompt"),
    ShrinkPass("cancel-as-turn", _each(_as_turn("cancel")), True,
               "a turn cancelled mid-flight is a plain turn, unless the cancel is the point"),
    ShrinkPass("compact-as-turn", _each(_as_turn("compact")), True,
               "a compaction the failure does not need is a plain turn"),
    ShrinkPass("plain-turn", _each(_plain_turn), True,
               "a turn with a request sent during it (a fork: first the fork alone), or "
               "with another session's turn beside it, is a plain turn"),
    ShrinkPass("not-cancelled", _each(_not_cancelled), False,
               "a request with its $/cancel_request right behind it is a plain one, unless "
               "the failure needs the cancel"),
    ShrinkPass("plain-request", _each(_plain_request), False,
               "without the extra params (a vendor _meta, an old draft's field)"),
    ShrinkPass("own-cwd", _each(_own_cwd), False,
               "a directory of its own for each new session, unless sharing one is the "
               "point (the shape names the directory: one bug, one report)"),
    ShrinkPass("home-directory", _each(_home_directory), False,
               "a load, resume or fork in the session's own directory, without extra roots"),
    ShrinkPass("not-busy", _each(_not_busy), False,
               "a load or resume sent beside a running turn is a plain one unless the "
               "failure needs the turn running"),
    ShrinkPass("not-during-turn", _each(_not_during_turn), False,
               "a load or resume sent while another session's turn runs is a plain one "
               "unless the failure needs that turn running"),
    ShrinkPass("simpler-payloads", _simpler_payloads_pass, False,
               "each payload simplified everywhere it occurs (a re-sent prompt stays "
               "identical to the original), keeping the canary at the end of its text"),
    ShrinkPass("canonical-names", _canonical, False,
               "sessions A, B, ... in order of appearance"),
)


#: How many of :data:`PASSES` open a shrink, once each: the failing session alone, then the
#: short forms.
OPENING = 2


def one_session(steps: Sequence[Mapping[str, Any]], sessions: Iterable[str | None]
                ) -> Steps | None:
    """``steps`` cut down to the sessions ``sessions`` names, the sessions those were forked
    from, and the steps that name no session (a restart); ``None`` when a finding names no
    session (it may be about them all) or nothing would go. A step that names a session
    left out (a turn sent beside another's) goes with that session."""
    named = list(sessions)
    if not named or any(h is None for h in named):
        return None
    keep = {h for h in named if h is not None}
    for s in reversed(steps):  # a fork's source, and its source's, ...
        if s.get("op") == "fork" and s.get("new") in keep:
            keep.add(s["session"])
    trial = [dict(s) for s in steps if _sessions_of(s) <= keep]
    return trial if len(trial) < len(steps) else None


def _sessions_of(step: Mapping[str, Any]) -> set[str]:
    """Every session handle ``step`` names (its own, a fork's new one, the one it runs
    beside)."""
    return {v for k in ("session", "new", "with", "while")
            if isinstance(v := step.get(k), str)}


def delete_step(steps: Sequence[Mapping[str, Any]], i: int) -> Steps:
    """``steps`` without step ``i``. When step ``i`` forks a session, the later steps on the
    fork act on its source instead: the fork's own turns become the source's turns and a
    fork of the fork becomes a fork of the source (``new A; fork A→B; fork B→C`` without the
    first fork is ``new A; fork A→C``)."""
    gone = steps[i]
    rest = [dict(s) for s in steps[:i]] + [dict(s) for s in steps[i + 1:]]
    if gone.get("op") != "fork":
        return rest
    old, src = gone["new"], gone["session"]
    for s in rest[i:]:
        if s.get("session") == old:
            s["session"] = src
    return rest


def hoist(steps: Sequence[Mapping[str, Any]], i: int) -> Steps | None:
    """When step ``i`` is a load or resume with a prompt: the steps with that prompt on the
    session's creation (its ``new`` or ``fork``) and step ``i`` gone (``new A; resume A (P);
    prompt A`` is ``new A (P); prompt A``). The creation may have sent a prompt of its own:
    a failure that needs the change (a change ignored) does not survive the trial, and one
    that needs only the new text does (``new A (P); fork A→B (P); resume B (Q); prompt A``,
    a store shared by directory, is ``new A (P); fork A→B (Q); prompt A``). None when step
    ``i`` is not such a reattach or its session's creation is not among the steps."""
    step = steps[i]
    if step.get("op") not in REATTACHES or step.get("systemPrompt") is None:
        return None
    handle = step["session"]
    for j in range(i - 1, -1, -1):
        s = steps[j]
        made = s.get("new") if s.get("op") == "fork" else (
            s.get("session") if s.get("op") == "new" else None)
        if made != handle:
            continue
        if s.get("systemPrompt") == step["systemPrompt"]:
            return None  # the same prompt: deleting the step is delete-step's trial
        out = [dict(x) for x in steps]
        out[j]["systemPrompt"] = step["systemPrompt"]
        del out[i]
        return out
    return None


def as_new(steps: Sequence[Mapping[str, Any]], i: int) -> Steps | None:
    """When step ``i`` is a fork that sends a prompt: the steps with that fork replaced by a
    ``new`` of the same session with the same prompt, in a directory of its own. None
    otherwise (a fork without a prompt runs on its source's, which a ``new`` would lose)."""
    step = steps[i]
    if step.get("op") != "fork" or step.get("systemPrompt") is None:
        return None
    made: dict[str, Any] = {"op": "new", "session": step["new"], "cwd": "distinct",
                            "systemPrompt": step["systemPrompt"]}
    return [*(dict(x) for x in steps[:i]), made, *(dict(x) for x in steps[i + 1:])]


def canonical_handles(steps: Sequence[Mapping[str, Any]]) -> Steps:
    """The same steps with the sessions renamed A, B, ... in order of first appearance."""
    names: dict[str, str] = {}

    def name(h: str) -> str:
        return names.setdefault(h, handle_name(len(names)))

    out = []
    for s in steps:
        t = dict(s)
        for key in ("session", "new"):
            if isinstance(t.get(key), str):
                t[key] = name(t[key])
        out.append(t)
    return out


def _payloads(steps: Sequence[Mapping[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for s in steps:
        if "systemPrompt" in s and s["systemPrompt"] not in out:
            out.append(s["systemPrompt"])
    return out


def _simpler_payloads(sp: Any) -> list[dict[str, Any]]:
    """Plainer variants of a valid payload, plainest first: one short ``append`` block, one
    short block in its own mode, every block cut to its last 64 characters, the same blocks
    (the canary sits at the end of the last non-blank block). None keeps a ``_meta``, an
    annotation or an unknown field: those stay only when the failure needs them."""
    if not (isinstance(sp, Mapping) and isinstance(sp.get("content"), list)
            and all(isinstance(b, Mapping) and isinstance(b.get("text"), str)
                    for b in sp["content"]) and sp["content"]):
        return []
    blocks = sp["content"]
    mode = sp.get("mode")
    tail = next((b["text"] for b in reversed(blocks) if b["text"].strip()), "")
    one = {"mode": mode, "content": [{"type": "text", "text": tail[-64:]}]}
    cut = {"mode": mode, "content": [{"type": "text", "text": b["text"][-64:]} for b in blocks]}
    plain = {"mode": mode, "content": [{"type": "text", "text": b["text"]} for b in blocks]}
    out: list[dict[str, Any]] = []
    for c in ({**one, "mode": "append"}, one, cut, plain):
        if c != sp and c not in out:
            out.append(c)
    return out


def _replace_payload(steps: Sequence[Mapping[str, Any]], old: Any, new: Any) -> Steps:
    return [{**s, "systemPrompt": new} if "systemPrompt" in s and s["systemPrompt"] == old
            else dict(s) for s in steps]


def short_forms(steps: Sequence[Mapping[str, Any]]) -> list[Steps]:
    """Canonical short sequences built from the payloads and operations of ``steps``,
    shortest first: most systemPrompt bugs reduce to one of these shapes, which step
    deletion alone cannot always reach (a prompt set by ``load`` rather than ``new``)."""
    payloads = _payloads(steps)
    ops = [s["op"] for s in steps]
    forms: list[Steps] = []
    for sp in payloads:
        new = {"op": "new", "session": "A", "systemPrompt": sp}
        turn = {"op": "prompt", "session": "A"}
        forms += [[new], [new, turn],
                  # the shape of a leak: the prompt given to one session, a turn in another
                  [new, {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}]]
        for op in REATTACHES:
            if op in ops:
                again = {"op": op, "session": "A", "systemPrompt": sp}
                forms.append([new, again, turn])
                if "restart" in ops:
                    forms.append([new, {"op": "restart"}, again, turn])
        if "fork" in ops:
            forms.append([new, {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp},
                          {"op": "prompt", "session": "B"}])
    return sorted(forms, key=len)


# -- the shape of a reproduction -------------------------------------------------------------------

#: One step of a shape: (op, session index, new-session index, payload kind, cwd: ``shared``
#: for a new session in the shared directory; ``moved``, ``roots`` or ``moved+roots`` for a
#: load, resume or fork in another directory or with additional roots).
ShapeStep = tuple[str, int, int, str, str]
Shape = tuple[ShapeStep, ...]

_ALL = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True)
#: A prompt this long is "long" in a shape: near the 64 KiB where truncation bugs live.
LONG_TEXT = 32 * 1024


def payload_kind(step: Mapping[str, Any], current: Any = None) -> str:
    """What a step's prompt is, without its text: ``omit``, ``null``, ``invalid:<reason>``,
    or the mode with ``+same`` (a load, resume or fork re-sending the session's own prompt),
    ``/blocks`` (more than one block), ``/long`` (over 32 KiB of text), ``/huge`` (a fill
    mark: a megabytes-long text, ``acp_fuzz.core.fills``) and ``/decorated``
    (``_meta``, annotations, unknown fields); then ``+`` and the paths of the step's extra
    params and vendor ``_meta`` (``+_meta.claudeCode.options.systemPrompt``)."""
    extra = {**(step.get("extra") or {}), **({"_meta": step["_meta"]} if "_meta" in step else {})}
    if extra:
        # The extra params by name (a vendor _meta carrier, an old draft's field).
        rest = payload_kind({k: v for k, v in step.items() if k not in ("extra", "_meta")},
                            current)
        return rest + "+" + ",".join(sorted(_paths(extra)))
    if "systemPrompt" not in step:
        return "omit"
    sp = step["systemPrompt"]
    if sp is None:
        return "null"
    c = classify(sp, _ALL)
    if c.kind != "valid":
        return f"invalid:{c.reason}"
    kind = str(sp["mode"])
    if step["op"] in RESENDS and sp == current:
        kind += "+same"
    texts = blocks_of(sp)
    if len(texts) > 1:
        kind += "/blocks"
    if sum(expanded_length(t) for t in texts) > LONG_TEXT:
        kind += "/long"
    if any(marks_in(t) for t in texts):
        kind += "/huge"  # a fill mark: megabytes on the wire (acp_fuzz.core.fills)
    if set(sp) - {"mode", "content"} or any(set(b) - {"type", "text"} for b in sp["content"]):
        kind += "/decorated"  # _meta, annotations or unknown fields (that must change nothing)
    return kind


def _paths(v: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, x in v.items():
        path = f"{prefix}{k}"
        out += _paths(x, path + ".") if isinstance(x, Mapping) and x else [path]
    return out


def shape_of(steps: Sequence[Mapping[str, Any]]) -> Shape:
    """The shape of a reproduction: what makes two failures of one oracle the same bug.

    Sessions are numbered by first appearance, each payload is reduced to its kind
    (:func:`payload_kind`), a turn with a cancel counts as ``cancel``, and an invalid request
    by its method. Texts, canaries and handle letters do not count."""
    index: dict[str, int] = {}
    prompts: dict[str, Any] = {}

    def idx(h: Any) -> int:
        return index.setdefault(str(h), len(index)) if isinstance(h, str) else -1

    out: list[ShapeStep] = []
    for s in steps:
        op = s["op"]
        session = s.get("session")
        current = prompts.get(str(session))
        kind = payload_kind(s, current) if op in CARRIES_PROMPT else ""
        if op == "invalid":
            kind = str(s.get("method"))
        cwd = "shared" if op == "new" and s.get("cwd") == "shared" else ""
        if op in MOVES:
            # Another directory, extra roots: part of the bug when minimizing kept them.
            cwd = "+".join(k for k in ("moved", "roots")
                           if (s.get("cwd") == "moved" if k == "moved" else s.get("roots")))
        if s.get("mcp"):
            cwd += "+mcp"  # naming acp-fuzz's MCP server: part of the bug when kept
        # Sent beside a running turn: another shape than the plain load or resume.
        shape = f"busy-{op}" if s.get("busy") else f"{op}-during-turn" if s.get("while") else op
        out.append((shape, idx(session), idx(s.get("new")), kind, cwd))
        if op in CARRIES_PROMPT and kind not in ("omit", "null") \
                and not kind.startswith("invalid"):
            prompts[str(s["new"] if op == "fork" else session)] = s["systemPrompt"]
        elif op == "fork" and session is not None:
            prompts[str(s["new"])] = current
    return tuple(out)


def _matches(pattern: ShapeStep, step: ShapeStep) -> bool:
    op, _, _, kind, cwd = pattern
    if op != step[0]:
        return False
    if cwd and cwd != step[4]:
        return False
    # A step the pattern sends nothing with may send something in the example.
    return kind == step[3] or kind == "omit"


#: Oracles whose verdict is the agent's error answer to a request that should have worked.
REFUSAL_ORACLES = frozenset({"payload.valid-rejected", "session.reattach-failed",
                             "cancel.error"})
#: Error texts too generic to tell two refusals apart (JSON-RPC's own messages).
_GENERIC = frozenset({"", "internal error", "invalid params", "invalid request",
                      "method not found", "parse error"})
#: Shorter error texts are not specific enough either.
MIN_REFUSAL_TEXT = 24


def refusals(findings: Iterable[Finding]) -> set[tuple[str, object, str]]:
    """The specific refusals among ``findings``: (oracle, error code, error text) for each
    refusal oracle whose error says something of its own (message and ``data`` together, not
    a bare "Internal error").

    Two failures with the same refusal are one bug in the agent whatever the steps around
    it: codex-acp answers "Changing systemPrompt requires a persisted session" to a changed
    prompt on load and on resume, after a session made with or without a prompt, three
    shapes of one refusal."""
    out: set[tuple[str, object, str]] = set()
    for f in findings:
        err = f.evidence.get("error") if f.oracle in REFUSAL_ORACLES else None
        if not isinstance(err, Mapping):
            continue
        message = str(err.get("message", "")).strip()
        data = err.get("data")
        text = message if data is None else f"{message} {json.dumps(data, sort_keys=True)}"
        if message.lower().rstrip(".") in _GENERIC and data is None:
            continue
        if len(text) >= MIN_REFUSAL_TEXT:
            out.add((f.oracle, err.get("code"), text))
    return out


def embeds(pattern: Shape, example: Shape) -> bool:
    """Whether the reproduction ``pattern`` occurs in ``example`` as a subsequence that ends
    at the example's last step (its failing step), with the sessions mapped one to one.

    A known bug's minimal reproduction embedded in a new failing example explains that
    failure without shrinking it again."""
    if not pattern or not example or not _matches(pattern[-1], example[-1]):
        return False

    def go(pi: int, ei: int, fwd: dict[int, int], back: dict[int, int]) -> bool:
        if pi < 0:
            return True
        p = pattern[pi]
        last = pi == len(pattern) - 1
        candidates = [len(example) - 1] if last else range(ei, -1, -1)
        for j in candidates:
            e = example[j]
            if not _matches(p, e):
                continue
            f2, b2 = dict(fwd), dict(back)
            ok = True
            for a, b in ((p[1], e[1]), (p[2], e[2])):
                if a < 0:
                    continue
                if f2.get(a, b) != b or b2.get(b, a) != a:
                    ok = False
                    break
                f2[a], b2[b] = b, a
            if ok and go(pi - 1, j - 1, f2, b2):
                return True
        return False

    return go(len(pattern) - 1, len(example) - 2, {}, {})


def same_bug(known_oracles: Iterable[str], known_shape: Shape,
             known_refusals: Iterable[tuple[str, object, str]], oracles: Iterable[str],
             shape: Shape, refused: Iterable[tuple[str, object, str]]) -> bool:
    """Whether a failure (its failing ``oracles``, the ``shape`` of its steps and its specific
    ``refused`` errors, :func:`refusals`) is a known one: the one rule for "two failures are
    the same bug", in the search (:meth:`~acp_fuzz.engine.campaign.search.SearchState.explained`),
    after a shrink (``campaign._settle``) and in the merge of parallel workers.

    They share an oracle, and either the known minimal reproduction occurs in the failure's
    steps, ending at its failing step (:func:`embeds`; it holds for equal shapes, so it covers
    two minimal reproductions of one bug as well as a known bug inside an unshrunk example),
    or the agent refused both with the same specific error, whatever the steps around it. (Equal
    shapes are tested first: :func:`embeds` never matches an empty one.)"""
    if not set(known_oracles) & set(oracles):
        return False
    return known_shape == shape or embeds(known_shape, shape) \
        or bool(set(refused) & set(known_refusals))
