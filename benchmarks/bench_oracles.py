"""The oracles' own cost: events judged per second, over the committed cassettes.

``python benchmarks/bench_oracles.py [--rounds 20] [--root cassettes]``

Every agent cassette under ``--root`` (client cassettes are judged by other checks and left
out) is judged ``--rounds`` times two ways: whole, as ``replay --offline`` does
(``evaluate``), and one event at a time through one ``Evaluator``, as a campaign does after
each step, reading the findings after every event. The figure is events per second, the
median over the rounds; both ways judge the same events, so they give the same findings.
Pure Python, no agent: what it measures is the tracker and the checks alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Row, median, save, table

from acp_fuzz.core.cassette import Cassette, read_cassette
from acp_fuzz.core.oracles import Baseline, Evaluator, evaluate


def cassettes(root: Path) -> list[Cassette]:
    out = []
    for path in sorted(root.rglob("*.cassette")):
        c = read_cassette(path)
        if c.header.kind != "client-finding":
            out.append(c)
    return out


def _judge_whole(found: list[Cassette]) -> int:
    n = 0
    for c in found:
        settings = c.header.run_settings
        evaluate(c.events, baseline=Baseline.from_wire(settings.baseline),
                 strict=settings.strict)
        n += len(c.events)
    return n


def _judge_stepwise(found: list[Cassette]) -> int:
    n = 0
    for c in found:
        settings = c.header.run_settings
        judge = Evaluator(baseline=Baseline.from_wire(settings.baseline),
                          strict=settings.strict)
        for e in c.events:
            judge.feed([e])
            judge.findings()
        n += len(c.events)
    return n


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--root", type=Path, default=ROOT / "cassettes")
    args = ap.parse_args(argv)
    found = cassettes(args.root)
    rows = []
    for name, fn in (("whole (replay --offline)", _judge_whole),
                     ("one event at a time (a campaign)", _judge_stepwise)):
        rates = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            events = fn(found)
            rates.append(events / (time.perf_counter() - t0))
        rows.append(Row(f"oracles, {name}", round(median(rates)), "events/s",
                        detail=f"{len(found)} cassettes, {events} events", samples=rates))
    save("oracles", rows)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
