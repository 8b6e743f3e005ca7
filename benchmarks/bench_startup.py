"""Agent start cost: examples/second with a fresh agent process (and sandbox) per example.

``python benchmarks/bench_startup.py [--examples 20] [--runs 5]``

An example here is what the campaign does for every Hypothesis example, at its smallest:
a fresh sandbox and reference agent (shared gateway), ``initialize``, one ``session/new`` with a
systemPrompt and one ``session/prompt``, then close. For scale, the same two steps on an agent
that is already running, and the bare start + ``initialize`` + close of the agent (and of a
``python -c pass``, the interpreter alone). Medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, median, reference_argv, save, table

from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.gateway import Gateway

STEPS = ({"op": "new", "session": "A",
          "systemPrompt": {"mode": "append", "content": [{"type": "text", "text": "Be terse."}]}},
         {"op": "prompt", "session": "A"})


def fresh_examples(gw: Gateway, n: int, *, steps: bool = True) -> float:
    spec = TargetSpec.from_command(reference_argv())
    t0 = time.perf_counter()
    for _ in range(n):
        with Run(spec, gateway=gw) as run:
            run.initialize()
            if steps:
                for s in STEPS:
                    run.execute(dict(s))
    return n / (time.perf_counter() - t0)


def warm_examples(gw: Gateway, n: int) -> float:
    spec = TargetSpec.from_command(reference_argv())
    with Run(spec, gateway=gw) as run:
        run.initialize()
        t0 = time.perf_counter()
        for i in range(n):
            run.execute({**STEPS[0], "session": f"A{i}"})
            run.execute({**STEPS[1], "session": f"A{i}"})
        return n / (time.perf_counter() - t0)


def bare_python(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    fresh, warm, start, py = [], [], [], []
    with Gateway(None) as gw:
        for _ in range(args.runs):
            fresh.append(fresh_examples(gw, args.examples))
            start.append(fresh_examples(gw, args.examples, steps=False))
            warm.append(warm_examples(gw, args.examples))
            py.append(bare_python(args.examples))
    f, w, s, p = median(fresh), median(warm), median(start), median(py)
    rows = [
        Row("fresh agent per example (new + prompt)", round(f, 2), "examples/s",
            detail=f"{1000 / f:.0f} ms per example; {args.examples} examples x {args.runs} runs",
            samples=fresh),
        Row("same two steps on a running agent", round(w, 2), "examples/s",
            detail=f"{1000 / w:.0f} ms; start cost = {1000 / f - 1000 / w:.0f} ms per example "
                   f"({(1 - f / w) * 100:.0f}% of a fresh example)", samples=warm),
        Row("agent start + initialize + close only", round(s, 2), "/s",
            detail=f"{1000 / s:.0f} ms each", samples=start),
        Row("`python -c pass` (interpreter start)", round(p, 2), "/s",
            detail=f"{1000 / p:.0f} ms each", samples=py),
    ]
    save("startup", rows)
    return rows


if __name__ == "__main__":
    print(table(main()))
