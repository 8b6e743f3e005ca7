"""Time to find and shrink each planted bug of the reference agent, DEFAULT settings.

``python benchmarks/bench_bugs.py [--seeds 0,1,2,3,4] [--bugs leak,...] [--max-failures N]``

``--max-failures`` defaults to 1 (``-x``): the campaign ends with its first distinct failure,
which is what the time to find and shrink a bug means (without it a campaign goes on to
look for other bugs until ``max_examples``). ``--bugs a+b`` plants both in one agent.

For each bug and seed: the wall time of one whole ``run_campaign`` (probe, calibrate, search,
shrink, confirm 3 times, write the cassette), whether the expected oracle was reported, and the
length of the shrunk reproduction against the known minimum. Each run is appended to
``benchmarks/results/bugs.jsonl`` as it finishes, so a long run can be watched and resumed.
Goal: median < 20 s per bug, and every shrunk length at the minimum.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS,
    Row,
    append_row,
    cpu_seconds,
    loadavg,
    machine,
    median,
    reference_argv,
    save,
    table,
)

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

#: bug -> (oracle, ``|`` between alternatives; known minimal number of steps)
MINIMUM: dict[str, tuple[str, int]] = {
    "leak": ("prompt.leak", 3),
    "lost-after-restart": ("prompt.lost", 4),
    "duplicate-on-resume": ("prompt.duplicated", 3),
    "user-turn": ("prompt.misplaced", 2),
    "accept-unknown-mode": ("payload.invalid-accepted", 1),
    "side-effect-before-validation": ("reject.side-effect", 1),
    "crash-on-image": ("agent.crash", 1),
    "override-keeps-default": ("override.not-applied", 2),
    "fork-drops-prompt": ("prompt.lost", 3),
    "drop-last-block": ("prompt.altered|prompt.lost", 2),  # lost: only the last had text
    "truncate-64k": ("prompt.altered", 2),
    "fork-corrupts-source": ("prompt.leak|prompt.lost", 3),  # new A; fork A -> B (Q); prompt A
}
GOAL_SECONDS = 20.0


def one(bug: str, seed: int, max_failures: int = 1) -> dict[str, object]:
    planted = bug.split("+")
    oracle = "|".join(MINIMUM[b][0] for b in planted)
    minimum = min(MINIMUM[b][1] for b in planted)
    argv = reference_argv(planted[0]) + [a for b in planted[1:] for a in ("--bug", b)]
    spec = TargetSpec.from_command(argv)
    with tempfile.TemporaryDirectory(prefix="bench-bugs-") as tmp:
        load_before = loadavg()
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        result = run_campaign(spec, CampaignSettings(seed=seed, cassette_dir=Path(tmp),
                                                     max_failures=max_failures))
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
    rep = next((r for r in result.reports if set(oracle.split("|")) & set(r.oracles)), None)
    return {"bug": bug, "seed": seed, "seconds": round(elapsed, 2), "cpu_seconds": round(cpu, 2),
            "found": rep is not None,
            "oracles": sorted({o for r in result.reports for o in r.oracles}),
            "steps": len(rep.steps) if rep else None, "minimum": minimum,
            "examples": result.examples_run, "steps_run": result.steps_run,
            "reports": [[*r.oracles, len(r.steps)] for r in result.reports],
            "max_failures": max_failures,
            "load_before": load_before, "load_after": loadavg(),
            "commit": machine()["commit"]}


def rows_from(records: list[dict[str, object]]) -> list[Row]:
    rows = []
    for bug in dict.fromkeys(str(r["bug"]) for r in records):
        rs = [r for r in records if r["bug"] == bug]
        minimum = min(MINIMUM[b][1] for b in bug.split("+"))
        secs = [float(r["seconds"]) for r in rs]  # type: ignore[arg-type]
        found = [r for r in rs if r["found"]]
        lengths = [r["steps"] for r in rs]
        at_min = all(r["found"] and r["steps"] == minimum for r in rs)
        med = median(secs)
        cpus = [float(r["cpu_seconds"]) for r in rs if "cpu_seconds" in r]  # type: ignore[arg-type]
        cpu_note = f", CPU {median(cpus):.1f} s (median)" if cpus else ""
        rows.append(Row(
            f"find+shrink `{bug}`", round(med, 1), "s (median)", f"< {GOAL_SECONDS:g} s, "
            f"{minimum} steps", med < GOAL_SECONDS and at_min,
            f"seeds {','.join(str(r['seed']) for r in rs)}: found {len(found)}/{len(rs)}, "
            f"shrunk to {lengths} (min {minimum}), times {secs}{cpu_note}", secs))
    return rows


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default=os.environ.get("BENCH_SEEDS", "0,1,2,3,4"))
    ap.add_argument("--bugs", default=",".join(MINIMUM))
    ap.add_argument("--fresh", action="store_true", help="ignore earlier results in bugs.jsonl")
    ap.add_argument("--max-failures", type=int, default=1,
                    help="distinct failures before a campaign ends (1: the time to the first)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    bugs = [b for b in args.bugs.split(",") if b]
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "bugs.jsonl"
    done: list[dict[str, object]] = []
    if log.exists() and not args.fresh:
        done = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    elif log.exists():
        log.unlink()
    for seed in seeds:
        for bug in bugs:
            if any(r["bug"] == bug and r["seed"] == seed
                   and r.get("max_failures", 1) == args.max_failures for r in done):
                continue
            rec = one(bug, seed, args.max_failures)
            done.append(rec)
            append_row("bugs", rec, to=sys.stderr)
    records = [r for r in done if r["bug"] in bugs and r["seed"] in seeds
               and r.get("max_failures", 1) == args.max_failures]
    rows = rows_from(records)
    save("bugs", rows, {"runs": records})
    return rows


if __name__ == "__main__":
    print(table(main()))
