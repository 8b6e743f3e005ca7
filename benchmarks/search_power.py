"""How often the lifecycle strategy draws the shape of each planted bug: no agent, milliseconds.

``python benchmarks/search_power.py [--seeds 0-19] [--max-examples 100] [--bugs leak,...]``
``python benchmarks/search_power.py --minimize [--seeds 0-19]``: the minimal-rate table
``python benchmarks/search_power.py --coverage [--seeds 0-19]``: the first example at which each
invalid payload variant and each lifecycle op is sent, with and without the covering examples

A real campaign spends ~0.3 s per example on agent start-up, so comparing two rule weightings
over 11 bugs × 10 seeds with real agents takes hours. This script runs the *same* Hypothesis
state machine (:class:`acp_fuzz.strategies.LifecycleMachine`, the campaign's settings: seed,
``max_examples``, ``stateful_step_count``, no database) but binds ``execute`` to a small
pure-Python model of the reference agent and of each planted bug, so a whole table takes
seconds. The draws are identical to a real campaign's because ``execute`` draws nothing.
As in a campaign, the covering examples (:func:`acp_fuzz.strategies.covering_examples`, the
same at every seed) run first and count as examples; ``--no-cover`` leaves them out.

For each bug and seed it reports the example at which the bug's shape first appeared (or
``-`` when it did not in ``max_examples``). The planted bugs come first, then bugs that change
a session other than the one a request names (``CROSS_SESSION``). With ``--minimize`` it runs
the campaign's minimizer on each first failing example instead, over bug models written for
that measurement (``MINIMUM``), and reports how often it reaches each model's minimum.

Without ``--minimize`` it measures *search* only; shrinking is measured by
``bench_bugs.py`` and ``tests/quality``. The model is a sketch of the oracles (a turn on a
session whose applied prompt the bug loses, alters, doubles or leaks), so a figure here is a
prediction to check with ``bench_bugs.py``, not a finding.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from acp_fuzz.core.findings import Finding
from acp_fuzz.core.minimize import Failure, minimize
from acp_fuzz.core.payloads import Capabilities, blocks_of, classify
from acp_fuzz.engine.campaign.literals import no_source_literals
from acp_fuzz.engine.campaign.search import CampaignSettings
from acp_fuzz.strategies import LifecycleMachine, cover_keys, covering_examples, step_keys

BUGS = ("leak", "lost-after-restart", "duplicate-on-resume", "user-turn", "accept-unknown-mode",
        "side-effect-before-validation", "crash-on-image", "override-keeps-default",
        "fork-drops-prompt", "drop-last-block", "truncate-64k", "history-lost-after-restart",
        "load-erases-session", "replace-as-override", "hang-on-empty-content",
        "lost-override-after-restart")

#: Bugs that change a session other than the one a request names (issue #10 §5), written as
#: new bugs for this script, not tuned to one example. With the planted fork-corrupts-source,
#: they are the rows that the turn on a fork's source and on a same-directory sibling serve.
CROSS_SESSION = ("fork-corrupts-source", "load-rewrites-sibling", "shared-cwd-store",
                 "delete-leaves-prompt")

#: Bug models written for the minimal-rate measurement (``--minimize``), with the length of
#: their shortest reproduction, worked out by hand before any was run. Not tuned: a model
#: whose reproductions miss the minimum stays in the table.
MINIMUM = {
    # new A (P); fork A -> B (Q); prompt A
    "fork-corrupts-source": 3,
    # new A (P, shared cwd); new B (shared cwd); load B (Q); prompt A
    "load-rewrites-sibling": 4,
    # new A (P); fork A -> B (Q); prompt A  (a fork shares its source's directory)
    "shared-cwd-store": 3,
    # new A (P); cancel A (a turn); prompt A  -> P gone after the cancelled turn
    "cancel-forgets-prompt": 3,
    # new A (P); close A; new B; prompt B  -> B runs on A's prompt
    "close-leaks-into-next": 4,
    # new A (P); fork A -> B; restart; load B (P again); prompt B  -> P gone
    "restart-drops-forks": 5,
    # new A (P); resume A (Q); prompt A  -> P and Q both (the change appended)
    "resume-appends-change": 3,
    # Held out: written after the minimizer's hoist rule (which the rows above motivated),
    # to check it on bugs it was not made for.
    # new A (P); list; prompt A  -> session/list resets every prompt to the defaults
    "list-resets-prompt": 3,
    # new A (P); prompt A; prompt A  -> the second turn of a session runs on the defaults
    "second-turn-drops-prompt": 3,
    # new A (P); fork A -> B (P again); fork B -> C (P again); prompt C  -> a fork of a fork
    # runs on the defaults
    "fork-of-fork-drops": 4,
}
CAPS = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True, delete=True)
#: Bugs of a mode or model switch, drawn for an agent that offers both (as the reference agent
#: does); the rows above are measured without, as agents without modes draw.
SWITCHES = ("mode-drops-prompt", "model-switch-drops-prompt")
CAPS_SWITCHES = replace(CAPS, set_mode=True, set_config_option=True)
#: Bugs of an agent that advertises client-set titles (the reference agent's --variant titles).
TITLES = ("title-drops-prompt",)
CAPS_TITLES = replace(CAPS, title=True)
#: Bugs of an agent that answers session/status (the reference agent's --variant status).
STATUS = ("status-drops-prompt",)
CAPS_STATUS = replace(CAPS, status=True)
#: Bugs of an agent that takes additionalDirectories (the reference agent's --variant
#: directories), which draws loads, resumes and forks in other directories.
DIRECTORIES = ("moved-cwd-drops-prompt",)
CAPS_DIRECTORIES = replace(CAPS, additional_directories=True)
TRUNCATE_AT = 65536


class Found(Exception):
    """The bug's shape appeared: a real campaign's oracles would fail this example."""


#: An omitted or null prompt on load, resume or fork: keep or fall back is the agent's choice
#: (SP-LIFECYCLE-OMIT-MAY), so the oracles assert nothing about the prompt afterwards.
UNSURE = object()


@dataclass
class _Session:
    expected: Any = None  # the payload the oracles expect (identity matters: canaries)
    own: Any = None  # the payload the correct reference agent applies (it keeps on omit)
    actual: Any = None  # the payload the buggy agent applies
    doubled: bool = False
    cwd: str = ""  # "shared", or the handle of the session whose directory it runs in
    fork: bool = False  # made by session/fork
    turns: int = 0
    completed: int = 0  # turns that were not cancelled: the conversation an agent must keep
    closed: bool = False
    history_lost: bool = False  # history-lost-after-restart: the next turn shows it
    left_over: bool = False  # delete-leaves-prompt: runs on a deleted session's prompt


@dataclass
class _Agent:
    """The buggy reference agent, reduced to what decides whether its bug shows."""

    bug: str
    sessions: dict[str, _Session] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    seen_here: set[str] = field(default_factory=set)
    last: Any = None  # last client prompt of this process (the leak bug's global)
    stored: dict[str, Any] = field(default_factory=dict)  # shared-cwd-store: cwd -> prompt
    closed: Any = None  # close-leaks-into-next: the prompt of the last closed session
    left: dict[str, Any] = field(default_factory=dict)  # delete-leaves-prompt: cwd -> prompt

    def _store(self, cwd: str, prompt: Any) -> None:
        if self.bug == "shared-cwd-store" and prompt is not None:
            self.stored[cwd] = prompt

    def step(self, step: dict[str, Any]) -> None:
        if not self._composite(step):
            self._step(step)

    def _composite(self, step: dict[str, Any]) -> bool:
        """A step that is two of the model's steps, or none: a request cancelled by its
        ``$/cancel_request`` (the reference agent answers -32800 before anything changes), a
        reattach sent during another session's turn (that turn, then the reattach: the
        agent reads the reattach after the turn), a fork, delete or config switch sent
        during a turn (the turn, then it)."""
        if step.get("cancel_request"):
            return True
        if step.get("while"):
            self._step({"op": "prompt", "session": step["while"]})
            self._step({k: v for k, v in step.items() if k != "while"})
            return True
        after = {"fork": {"op": "fork", "new": step.get("new")},
                 "delete": {"op": "delete"},
                 "set-config": {"op": "set_config_option"}}.get(step.get("during", ""))
        if step.get("op") != "prompt" or after is None:
            return False
        self._step({"op": "prompt", "session": step["session"]})
        self._step({**after, "session": step["session"]})
        return True

    def _step(self, step: dict[str, Any]) -> None:
        op, bug = step["op"], self.bug
        payload = step.get("systemPrompt")
        cls = classify(payload, CAPS) if "systemPrompt" in step else None
        invalid = cls is not None and cls.kind == "invalid"
        if invalid:
            assert cls is not None
            if bug == "crash-on-image" and _has_image(payload):
                raise Found(op)
            if bug == "accept-unknown-mode" and cls.reason == "mode-unknown":
                raise Found(op)
            if bug == "replace-as-override" and isinstance(payload, dict) \
                    and payload.get("mode") == "replace":
                raise Found(op)
            if bug == "hang-on-empty-content" and cls.reason == "content-empty":
                raise Found(op)
            if bug == "side-effect-before-validation" and op == "new":
                raise Found(op)
            return
        prompt = payload if cls is not None and cls.kind == "valid" else None
        if op == "new":
            h = step["session"]
            cwd = "shared" if step.get("cwd") == "shared" else h
            actual = prompt
            if bug == "close-leaks-into-next" and prompt is None and self.closed is not None:
                actual = self.closed
            left_over = bug == "delete-leaves-prompt" and prompt is None and cwd in self.left
            self.sessions[h] = _Session(prompt, prompt, actual, cwd=cwd, left_over=left_over)
            self._store(cwd, prompt)
            self.live.add(h)
            self.seen_here.add(h)
            if prompt is not None:
                self.last = prompt
        elif op in ("load", "resume"):
            s = self.sessions.get(step["session"])
            if s is None:
                return
            after_restart = step["session"] not in self.seen_here
            if (bug == "load-erases-session" and op == "load" and s.completed and not s.closed
                    and (cls is None or cls.kind == "null" or _same_prompt(prompt, s.own))):
                raise Found("reattach-failed")
            if bug == "history-lost-after-restart" and after_restart and s.completed:
                s.history_lost = True
            s.closed = False
            s.expected = prompt if prompt is not None else UNSURE
            if prompt is not None:
                s.own = prompt
            if after_restart and (bug == "lost-after-restart"
                                  or (bug == "restart-drops-forks" and s.fork)
                                  or (bug == "lost-override-after-restart"
                                      and prompt is not None
                                      and prompt.get("mode") == "override")):
                s.actual = None
            elif prompt is not None:
                s.doubled = s.actual is not None and (
                    bug == "duplicate-on-resume"
                    or (bug == "resume-appends-change" and op == "resume"
                        and prompt is not s.actual))
                s.actual = prompt
                self.last = prompt
                self._store(s.cwd, prompt)
                if bug == "load-rewrites-sibling":
                    for h, other in self.sessions.items():
                        if h != step["session"] and other.cwd == s.cwd:
                            other.actual = prompt
            if bug == "moved-cwd-drops-prompt" and step.get("cwd") == "moved":
                s.actual = None  # started over in the new directory
            self.live.add(step["session"])
            self.seen_here.add(step["session"])
        elif op == "fork":
            src = self.sessions.get(step["session"])
            if src is None:
                return
            own = prompt if prompt is not None else src.own
            act = None if bug == "fork-drops-prompt" or (
                bug == "fork-of-fork-drops" and src.fork) else (
                prompt if prompt is not None else src.actual)
            exp = prompt if prompt is not None else UNSURE
            self.sessions[step["new"]] = _Session(exp, own, act, cwd=src.cwd, fork=True)
            self._store(src.cwd, prompt)
            self.live.add(step["new"])
            self.seen_here.add(step["new"])
            if prompt is not None:
                self.last = prompt
                if bug == "fork-corrupts-source":
                    src.actual = prompt
        elif op == "close":
            self.live.discard(step["session"])
            self.closed = self.sessions[step["session"]].actual
            self.sessions[step["session"]].closed = True
        elif op == "delete":
            gone = self.sessions.pop(step["session"], None)
            if gone is not None and bug == "delete-leaves-prompt" and gone.actual is not None:
                self.left[gone.cwd] = gone.actual
        elif op in ("set_mode", "set_config_option"):
            s = self.sessions.get(step["session"])
            if s is not None and step["session"] in self.live and (
                    (bug, op) in (("mode-drops-prompt", "set_mode"),
                                  ("model-switch-drops-prompt", "set_config_option"))):
                s.actual = None
        elif op == "status" and bug == "status-drops-prompt":
            s = self.sessions.get(step["session"])
            if s is not None:
                s.actual = None  # the query reloaded the session from its listing entry
        elif op == "set_title" and bug == "title-drops-prompt":
            s = self.sessions.get(step["session"])
            if s is not None:
                s.actual = None  # the stored record is rewritten without the prompt
        elif op == "list" and bug == "list-resets-prompt":
            for other in self.sessions.values():
                other.actual = None
        elif op == "restart":
            self.live.clear()
            self.seen_here.clear()
            self.last = None
        elif op in ("prompt", "cancel"):  # a cancel follows a turn that reaches the model
            s = self.sessions.get(step["session"])
            if s is None:
                return  # a session whose creation was rejected: the runner skips the turn
            if s.history_lost:
                raise Found("history-lost")
            if s.left_over:
                raise Found("leak")
            self._turn(s)
            s.turns += 1
            s.completed += op == "prompt"
            if bug == "second-turn-drops-prompt" and s.turns == 1:
                s.actual = None
            if op == "cancel" and bug == "cancel-forgets-prompt":
                s.actual = None

    def _turn(self, s: _Session) -> None:
        bug, used = self.bug, s.actual
        if bug == "shared-cwd-store":
            used = self.stored.get(s.cwd, used)
        if bug in MINIMUM and s.expected is not UNSURE and used is not s.expected:
            # These bugs put another prompt (or none) where the session's own belongs; the
            # oracles call it lost, leak or altered, whichever fits.
            raise Found("wrong-prompt")
        if bug == "leak" and self.last is not None and self.last is not s.own:
            raise Found("leak")
        if s.expected not in (None, UNSURE) and used is None:
            raise Found("lost")
        if used is None:
            return
        texts = blocks_of(used)
        if bug in ("duplicate-on-resume", "resume-appends-change") and s.doubled:
            raise Found("duplicated")
        if bug == "user-turn":
            raise Found("misplaced")
        if bug == "override-keeps-default" and used.get("mode") == "override":
            raise Found("override")
        if bug == "drop-last-block" and len(texts) > 1 and texts[-1].strip():
            raise Found("altered")
        if bug == "truncate-64k" and len("\n\n".join(texts)) > TRUNCATE_AT:
            raise Found("altered")


def _same_prompt(a: Any, b: Any) -> bool:
    """A re-sent prompt: the same mode and blocks (the oracles' test, not identity)."""
    return isinstance(a, dict) and isinstance(b, dict) and a.get("mode") == b.get("mode") \
        and blocks_of(a) == blocks_of(b)


def _has_image(payload: Any) -> bool:
    content = payload.get("content") if isinstance(payload, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image"
                                             for b in content)


def first_hit(bug: str, seed_: int, max_examples: int, max_steps: int, *,
              cover: bool = True) -> int | None:
    """The 1-based example at which ``bug`` first showed at ``seed_``, else None."""
    found = first_failure(bug, seed_, max_examples, max_steps, cover=cover)
    return None if found is None else found[0]


def caps_of(bug: str) -> Capabilities:
    """What the reference agent with ``bug`` advertises (and offers at calibration)."""
    return CAPS_SWITCHES if bug in SWITCHES else CAPS_TITLES if bug in TITLES \
        else CAPS_STATUS if bug in STATUS else CAPS_DIRECTORIES if bug in DIRECTORIES else CAPS


def run_model(bug: str, steps: list[dict[str, Any]]) -> tuple[list[Any], list[Finding]]:
    """Run ``steps`` on the model of ``bug``, as the minimizer's runner: the first step that
    shows the bug is a MUST finding named after what the model saw."""
    agent = _Agent(bug)
    for i, step in enumerate(steps):
        try:
            agent.step(step)
        except Found as e:
            return [], [Finding(f"model.{e.args[0]}", "MUST", "MODEL", str(e), step=i)]
    return [], []


def first_failure(bug: str, seed_: int, max_examples: int, max_steps: int, *,
                  cover: bool = True) -> tuple[int, list[dict[str, Any]]] | None:
    """The 1-based example at which ``bug`` first showed at ``seed_`` and its steps: the
    covering examples first (with ``cover``, as a campaign runs them), then the search."""
    count = {"n": 0}
    steps: list[dict[str, Any]] = []
    caps = caps_of(bug)
    if cover:
        for example in covering_examples(caps, max_steps=max_steps)[:max_examples]:
            count["n"] += 1
            agent = _Agent(bug)
            steps.clear()
            try:
                for step in example.steps:
                    steps.append(dict(step))
                    agent.step(dict(step))
            except Found:
                return count["n"], list(steps)
    if count["n"] >= max_examples:
        return None

    class Machine(LifecycleMachine):
        def __init__(self) -> None:
            super().__init__()
            count["n"] += 1
            self.agent = _Agent(bug)
            steps.clear()

        def execute(self, step: dict[str, Any]) -> None:
            steps.append(step)
            self.agent.step(step)

    Machine.caps = caps
    hyp = settings(max_examples=max_examples - count["n"], stateful_step_count=max_steps,
                   deadline=None,
                   database=None, suppress_health_check=list(HealthCheck),
                   verbosity=Verbosity.quiet, print_blob=False,
                   phases=[Phase.explicit, Phase.reuse, Phase.generate])
    try:
        with no_source_literals():  # as a campaign draws
            run_state_machine_as_test(seed(seed_)(Machine), settings=hyp)
    except Found:
        return count["n"], list(steps)
    return None


def minimized(bug: str, seed_: int, max_examples: int, max_steps: int
              ) -> tuple[int, int] | None:
    """The first failing example's length and its length after the campaign's minimizer
    (:func:`acp_fuzz.core.minimize.minimize`, the same passes a campaign's later rounds use, with
    no Hypothesis shrinking before them), run on the model; None if not found."""
    # The search's own examples (no covering examples): those are short already, and this
    # measures the minimizer on what Hypothesis draws.
    found = first_failure(bug, seed_, max_examples, max_steps, cover=False)
    if found is None:
        return None
    _, steps = found
    _, findings = run_model(bug, steps)
    small = minimize(Failure(steps, [], findings), lambda t: run_model(bug, t))
    return len(steps), len(small.steps)


def first_sent(caps: Capabilities, seed_: int, max_examples: int, max_steps: int, *,
               cover: bool = True) -> dict[str, int]:
    """For every key of :func:`acp_fuzz.strategies.step_keys` (an op, an invalid payload
    variant on a request, ...), the 1-based example at which it was first sent at ``seed_``:
    the covering examples first (with ``cover``), then the search, as in a campaign against
    a correct agent with ``caps`` (which refuses every invalid payload, so every step the
    machine draws is sent)."""
    first: dict[str, int] = {}
    count = {"n": 0}
    if cover:
        for example in covering_examples(caps, max_steps=max_steps)[:max_examples]:
            count["n"] += 1
            for step in example.steps:
                for key in step_keys(step, caps):
                    first.setdefault(key, count["n"])
    if count["n"] >= max_examples:
        return first

    class Machine(LifecycleMachine):
        def __init__(self) -> None:
            super().__init__()
            count["n"] += 1

        def execute(self, step: dict[str, Any]) -> None:
            for key in step_keys(step, caps):
                first.setdefault(key, count["n"])

    Machine.caps = caps
    hyp = settings(max_examples=max_examples - count["n"], stateful_step_count=max_steps,
                   deadline=None, database=None, suppress_health_check=list(HealthCheck),
                   verbosity=Verbosity.quiet, print_blob=False,
                   phases=[Phase.explicit, Phase.generate])
    with no_source_literals():  # as a campaign draws
        run_state_machine_as_test(seed(seed_)(Machine), settings=hyp)
    return first


def _coverage(seeds: list[int], max_examples: int, max_steps: int) -> int:
    """The table of docs/performance.md, "Every payload kind at every seed"."""
    keys = cover_keys(CAPS)
    drawn = {s: first_sent(CAPS, s, max_examples, max_steps, cover=False) for s in seeds}
    covered = {s: first_sent(CAPS, s, max_examples, max_steps) for s in seeds}
    print(f"{'key (reference agent, v1)':40} {'search alone: seeds':>19} {'median':>6} "
          f"{'worst':>5}   {'with covering: worst':>20}")
    for key in keys:
        hits = sorted(d[key] for d in drawn.values() if key in d)
        median = hits[len(hits) // 2] if hits else "-"
        worst = hits[-1] if len(hits) == len(seeds) else "-"
        cov = [c.get(key) for c in covered.values()]
        cworst = "-" if None in cov else max(c for c in cov if c is not None)
        print(f"{key:40} {len(hits):>14}/{len(seeds):<4} {median:>6} {worst:>5}   {cworst:>20}",
              flush=True)
    never = [k for k in keys if any(k not in d for d in drawn.values())]
    n = max(max(c[k] for k in keys) for c in covered.values())
    print(f"search alone: {len(never)} of {len(keys)} keys missed at some seed; "
          f"with covering: every key sent by example {n} at every seed")
    print(f"\n{'keys':24} {'n':>3} {'every seed':>10} {'pairs missed':>14} {'median':>6} "
          f"{'covered by':>10}")
    groups: dict[str, list[str]] = {}
    for key in keys:
        head = key.split(":")[0]
        groups.setdefault("ops" if head in ("op", "invalid", "dirs", "busy") else head,
                          []).append(key)
    for name, group in groups.items():
        firsts = sorted(d[k] for d in drawn.values() for k in group if k in d)
        missed = sum(k not in d for d in drawn.values() for k in group)
        every = sum(all(k in d for d in drawn.values()) for k in group)
        median = firsts[len(firsts) // 2] if firsts else "-"
        cover_n = max(c[k] for c in covered.values() for k in group)
        print(f"{name:24} {len(group):>3} {every:>10} {missed:>8}/{len(group) * len(seeds):<5} "
              f"{median:>6} {cover_n:>10}")
    for name, caps in (("reference agent", CAPS), ("+ switches", CAPS_SWITCHES),
                       ("+ titles", CAPS_TITLES), ("+ status", CAPS_STATUS),
                       ("+ directories", CAPS_DIRECTORIES),
                       ("v2 (replay)", replace(CAPS, load=False, replay=True))):
        print(f"covering examples, {name}: {len(covering_examples(caps, max_steps=max_steps))}")
    return 0


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    defaults = CampaignSettings()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--max-examples", type=int, default=defaults.max_examples)
    ap.add_argument("--max-steps", type=int, default=defaults.max_steps)
    ap.add_argument("--bugs", default=None)
    ap.add_argument("--minimize", action="store_true",
                    help="measure how often the minimizer reaches each model's minimum "
                         "(the MINIMUM models by default)")
    ap.add_argument("--coverage", action="store_true",
                    help="the first example at which each invalid payload variant and each "
                         "lifecycle op is sent, with and without the covering examples")
    ap.add_argument("--no-cover", action="store_true",
                    help="search alone, without the campaign's covering examples first")
    args = ap.parse_args(argv)
    seeds = _seeds(args.seeds)
    if args.coverage:
        return _coverage(seeds, args.max_examples, args.max_steps)
    if args.minimize:
        return _minimal_rate(args.bugs.split(",") if args.bugs else list(MINIMUM), seeds,
                             args.max_examples, args.max_steps)
    args.bugs = args.bugs or ",".join((*BUGS, *CROSS_SESSION))
    misses = 0
    print(f"{'bug':32} " + " ".join(f"{s:>4}" for s in seeds) + "  found")
    for bug in args.bugs.split(","):
        hits = [first_hit(bug, s, args.max_examples, args.max_steps, cover=not args.no_cover)
                for s in seeds]
        misses += hits.count(None)
        cells = " ".join(f"{'-' if h is None else h:>4}" for h in hits)
        print(f"{bug:32} {cells}  {len(seeds) - hits.count(None)}/{len(seeds)}", flush=True)
    print(f"misses: {misses}")
    return 0


def _minimal_rate(bugs: list[str], seeds: list[int], max_examples: int, max_steps: int) -> int:
    at_min = total = 0
    print(f"{'bug':24} {'min':>3} " + " ".join(f"{s:>5}" for s in seeds) + "  at minimum")
    for bug in bugs:
        cells, hits, found = [], 0, 0
        for s in seeds:
            r = minimized(bug, s, max_examples, max_steps)
            if r is None:
                cells.append("    -")
                continue
            found += 1
            hits += r[1] == MINIMUM[bug]
            cells.append(f"{r[0]:>2}>{r[1]:<2}")
        at_min += hits
        total += found
        print(f"{bug:24} {MINIMUM[bug]:>3} " + " ".join(cells) + f"  {hits}/{found}",
              flush=True)
    print(f"at minimum: {at_min}/{total} ({100 * at_min / max(total, 1):.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
