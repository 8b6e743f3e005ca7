"""How often the lifecycle strategy draws the shape of each planted bug: no agent, milliseconds.

``python benchmarks/search_power.py [--seeds 0-19] [--max-examples 100] [--bugs leak,...]``

A real campaign spends ~0.3 s per example on agent start-up, so comparing two rule weightings
over 11 bugs × 10 seeds with real agents takes hours. This script runs the *same* Hypothesis
state machine (:class:`acp_fuzz.strategies.LifecycleMachine`, the campaign's settings: seed,
``max_examples``, ``stateful_step_count``, no database) but binds ``execute`` to a small
pure-Python model of the reference agent and of each planted bug, so a whole table takes
seconds. The draws are identical to a real campaign's because ``execute`` draws nothing.

For each bug and seed it reports the example at which the bug's shape first appeared (or
``-`` when it did not in ``max_examples``). It measures *search* only; shrinking is measured by
``bench_bugs.py`` and ``tests/quality``. The model is a sketch of the oracles (a turn on a
session whose applied prompt the bug loses, alters, doubles or leaks), so a figure here is a
prediction to check with ``bench_bugs.py``, not a finding.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.strategies import LifecycleMachine
from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from acp_fuzz.campaign import CampaignSettings
from acp_fuzz.payloads import Capabilities, blocks_of, classify

BUGS = ("leak", "lost-after-restart", "duplicate-on-resume", "user-turn", "accept-unknown-mode",
        "side-effect-before-validation", "crash-on-image", "override-keeps-default",
        "fork-drops-prompt", "drop-last-block", "truncate-64k")
CAPS = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True)
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


@dataclass
class _Agent:
    """The buggy reference agent, reduced to what decides whether its bug shows."""

    bug: str
    sessions: dict[str, _Session] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    seen_here: set[str] = field(default_factory=set)
    last: Any = None  # last client prompt of this process (the leak bug's global)

    def step(self, step: dict[str, Any]) -> None:
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
            if bug == "side-effect-before-validation" and op == "new":
                raise Found(op)
            return
        prompt = payload if cls is not None and cls.kind == "valid" else None
        if op == "new":
            h = step["session"]
            self.sessions[h] = _Session(prompt, prompt, prompt)
            self.live.add(h)
            self.seen_here.add(h)
            if prompt is not None:
                self.last = prompt
        elif op in ("load", "resume"):
            s = self.sessions.get(step["session"])
            if s is None:
                return
            s.expected = prompt if prompt is not None else UNSURE
            if prompt is not None:
                s.own = prompt
            if bug == "lost-after-restart" and step["session"] not in self.seen_here:
                s.actual = None
            elif prompt is not None:
                s.doubled = s.actual is not None and bug == "duplicate-on-resume"
                s.actual = prompt
                self.last = prompt
            self.live.add(step["session"])
            self.seen_here.add(step["session"])
        elif op == "fork":
            src = self.sessions.get(step["session"])
            if src is None:
                return
            own = prompt if prompt is not None else src.own
            act = None if bug == "fork-drops-prompt" else (
                prompt if prompt is not None else src.actual)
            exp = prompt if prompt is not None else UNSURE
            self.sessions[step["new"]] = _Session(exp, own, act)
            self.live.add(step["new"])
            self.seen_here.add(step["new"])
            if prompt is not None:
                self.last = prompt
        elif op == "close":
            self.live.discard(step["session"])
        elif op == "restart":
            self.live.clear()
            self.seen_here.clear()
            self.last = None
        elif op in ("prompt", "cancel"):  # a cancel follows a turn that reaches the model
            self._turn(self.sessions[step["session"]])

    def _turn(self, s: _Session) -> None:
        bug, used = self.bug, s.actual
        if bug == "leak" and self.last is not None and self.last is not s.own:
            raise Found("leak")
        if s.expected not in (None, UNSURE) and used is None:
            raise Found("lost")
        if used is None:
            return
        texts = blocks_of(used)
        if bug == "duplicate-on-resume" and s.doubled:
            raise Found("duplicated")
        if bug == "user-turn":
            raise Found("misplaced")
        if bug == "override-keeps-default" and used.get("mode") == "override":
            raise Found("override")
        if bug == "drop-last-block" and len(texts) > 1 and texts[-1].strip():
            raise Found("altered")
        if bug == "truncate-64k" and len("\n\n".join(texts)) > TRUNCATE_AT:
            raise Found("altered")


def _has_image(payload: Any) -> bool:
    content = payload.get("content") if isinstance(payload, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image"
                                             for b in content)


def first_hit(bug: str, seed_: int, max_examples: int, max_steps: int) -> int | None:
    """The 1-based example at which ``bug`` first showed at ``seed_``, else None."""
    count = {"n": 0}

    class Machine(LifecycleMachine):
        def __init__(self) -> None:
            super().__init__()
            count["n"] += 1
            self.agent = _Agent(bug)

        def execute(self, step: dict[str, Any]) -> None:
            self.agent.step(step)

    Machine.caps = CAPS
    hyp = settings(max_examples=max_examples, stateful_step_count=max_steps, deadline=None,
                   database=None, suppress_health_check=list(HealthCheck),
                   verbosity=Verbosity.quiet, print_blob=False,
                   phases=[Phase.explicit, Phase.reuse, Phase.generate])
    try:
        run_state_machine_as_test(seed(seed_)(Machine), settings=hyp)
    except Found:
        return count["n"]
    return None


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
    ap.add_argument("--bugs", default=",".join(BUGS))
    args = ap.parse_args(argv)
    seeds = _seeds(args.seeds)
    misses = 0
    print(f"{'bug':32} " + " ".join(f"{s:>4}" for s in seeds) + "  found")
    for bug in args.bugs.split(","):
        hits = [first_hit(bug, s, args.max_examples, args.max_steps) for s in seeds]
        misses += hits.count(None)
        cells = " ".join(f"{'-' if h is None else h:>4}" for h in hits)
        print(f"{bug:32} {cells}  {len(seeds) - hits.count(None)}/{len(seeds)}", flush=True)
    print(f"misses: {misses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
