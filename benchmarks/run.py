"""Run every benchmark and print one markdown table (the one in docs/performance.md).

``python benchmarks/run.py [--quick] [--skip-bugs] [--skip-workers] [--seeds 0,1,2,3,4]``

Each figure is a median or a ratio over several runs; the machine (nproc, RAM, python, load
average) is printed first, and the load again at the end, because the figures are only as good
as the machine was quiet. ``--quick`` shrinks every benchmark (a smoke test, not figures to
quote). The planted-bug benchmark is by far the longest (see bench_bugs.py); its per-run results
are kept in benchmarks/results/bugs.jsonl and re-used unless ``--fresh``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_bugs
import bench_cassette
import bench_overhead
import bench_startup
import bench_workers
from _common import Row, loadavg, machine, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-bugs", action="store_true")
    ap.add_argument("--skip-workers", action="store_true")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    m = machine()
    print(f"machine: nproc {m['nproc']}, RAM {m['ram']}, Python {m['python']}, {m['platform']}")
    print(f"date: {m['date']}; load average at start: {m['load']}\n")
    rows: list[Row] = []
    q = args.quick
    rows += bench_overhead.main(["--pairs", "20", "--runs", "2"] if q else [])
    rows += bench_startup.main(["--examples", "5", "--runs", "2"] if q else [])
    rows += bench_cassette.main(["--events", "5000", "--runs", "2"] if q else [])
    if not args.skip_workers:
        rows += bench_workers.main(["--examples", "20", "--runs", "1"] if q else [])
    if not args.skip_bugs:
        bugs = ["--seeds", "0", "--bugs", "user-turn"] if q else ["--seeds", args.seeds]
        rows += bench_bugs.main(bugs + (["--fresh"] if args.fresh else []))
    print(table(rows))
    print(f"\nload average at end: {loadavg()}")


if __name__ == "__main__":
    main()
