"""Throughput of ``--workers N``: steps per second of a whole campaign, 1 worker against N.

``python benchmarks/bench_workers.py [--examples 200] [--workers 2] [--runs 3]``

Each run is one campaign against the correct reference agent (so no finding stops it early)
with ``--examples`` examples in all: ``run_campaign`` for one worker, ``run_parallel`` for
``--workers`` (each worker gets its share of the examples and its own seed, agents, gateway
and sandboxes). Throughput is campaign steps per wall second, start-up and calibration
included, because that is what a user waits for. Both are run with pre-spawning on (the
default) and off: pre-spawning already overlaps the next agent's start-up with the current
example, so one worker uses more than one core, which caps what a second worker can add on a
2-core machine. The CPU column (harness and agents, per wall second) shows how many cores a
configuration kept busy. Medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, cpu_seconds, loadavg, median, reference_argv, save, table

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign
from acp_fuzz.engine.campaign.workers import run_parallel

GOAL = 1.6


def one(workers: int, examples: int, prespawn: bool, seed: int) -> dict[str, float]:
    spec = TargetSpec.from_command(reference_argv())
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        cfg = CampaignSettings(max_examples=examples, seed=seed, prespawn=prespawn,
                               cassette_dir=Path(tmp) / "cassettes",
                               database=str(Path(tmp) / "db"))
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        result = (run_campaign(spec, cfg) if workers == 1
                  else run_parallel(spec, cfg, workers))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if result.reports:
        raise SystemExit(f"the correct agent gave a finding: {result.reports[0].oracles}")
    return {"wall": wall, "steps": result.steps_run, "examples": result.examples_run,
            "steps_per_s": result.steps_run / wall, "cores": cpu / wall}


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    rows: list[Row] = []
    raw: dict[str, list[dict[str, float]]] = {}
    for prespawn in (True, False):
        tag = "pre-spawn on" if prespawn else "pre-spawn off"
        per: dict[int, list[dict[str, float]]] = {1: [], args.workers: []}
        load = loadavg()
        for run in range(args.runs):
            for n in per:  # interleaved, so that a change in load hits both alike
                per[n].append(one(n, args.examples, prespawn, seed=run))
                print(f"{tag} workers={n} run={run}: {per[n][-1]}", file=sys.stderr,
                      flush=True)
        one_w = median([r["steps_per_s"] for r in per[1]])
        n_w = median([r["steps_per_s"] for r in per[args.workers]])
        ratio = n_w / one_w
        cores = {n: median([r["cores"] for r in rs]) for n, rs in per.items()}
        rows.append(Row(
            f"`--workers {args.workers}` / 1 worker, {tag}", round(ratio, 2), "x",
            f">= {GOAL:g} x", ratio >= GOAL,
            f"{one_w:.1f} vs {n_w:.1f} steps/s (median of {args.runs}, {args.examples} "
            f"examples each); cores busy {cores[1]:.2f} vs {cores[args.workers]:.2f}; "
            f"load {load} -> {loadavg()}",
            [r["steps_per_s"] for r in per[args.workers]]))
        raw[tag] = [r for rs in per.values() for r in rs]
    save("workers", rows, {"runs": raw})
    return rows


if __name__ == "__main__":
    print(table(main()))
