"""How the cost grows with a campaign's work (issue #36 §3): judging, cassettes, memory.

``python benchmarks/bench_growth.py [--steps 10,100,1000,10000] [--prompt-kib 1,8,32,64,96]
[--sessions 1,10,100] [--rounds 3] [--plot PATH] [--only judge,cassette,memory]``
``python benchmarks/bench_growth.py --compare BEFORE.json AFTER.json``

No third-party agent: every history is recorded from the reference agent
(``python -m acp_fuzz.reference_agent``, correct, v1) by ``runner.run_steps``, with the
baseline a campaign's calibration learns (``campaign.calibrate``).

**Histories of N steps.** The steps are the reference agent's own covering examples
(``strategies/cover.py``: every op, every ordered pair of lifecycle ops, every payload class
and invalid payload, restarts, forks, loads and resumes; 34 examples, 314 steps), one after
another in one run, cut at N steps. Each repetition gets fresh session handles (shifted
through A-Z, so handles are reused as the strategies' ``handle_name`` reuses them), fresh
texts (every prompt text of 12 characters or more gets the suffix `` (rK)``, as drawn prompts
carry a canary of their own) and fresh nonces (the runner derives them per turn), and ends
by deleting the sessions it made (a campaign's example starts on a fresh agent with none;
without it the agent's ``session/list`` answers, which the runner asks for after every
refused ``session/new``, list every session of the run and the history's bytes grow as the
square of its steps). Each history is recorded once and kept as gzipped JSON lines in
``benchmarks/results/growth/`` (not a cassette: one cannot hold 10,000 steps), and read from
there (``--fresh`` records again), so two trees judge the very same events: run the script
from each and ``--compare`` the two JSON files.

**Judging** (``oracles.evaluate`` and ``Evaluator.feed``): each history is judged three
ways: whole (as ``replay --offline`` does); incrementally, one ``Evaluator`` fed each step's
new events, its ``findings()`` read after each; and as a run feeds it (``run_steps`` with
``stop_on_failure``, a campaign's example: ``History.snapshot()`` of the whole history, then
``Evaluator.feed(snapshot)`` and ``findings()``, after each step). The figure is the median
over ``--rounds`` (and at least 3,000 steps' worth) of the CPU time of this process
(``time.process_time``: judging is pure computation, and CPU time is much less inflated by a
busy machine than wall time) divided by the steps, and by the history's KiB (the events, not
the steps, are the oracles' input). "Growth" is the time of the history's last whole pass
over the covering examples (the same steps with other handles and texts each time) over the
time of the pass halfway through: 2 when a step costs in proportion to the history before it,
1 when it costs the same; each pass's time is in the results, and on the plot. The
recording's wall time per step (``run_steps``, agent and restarts included) is given beside,
as measured on the machine of the run.

**Cassettes** (``write_cassette``, ``read_cassette``, all checks, fsync'd): each history's
write and read wall time (they wait on the disk), CPU time per event (reading, also with the
garbage collector off: its passes cost in proportion to everything this process holds), and
size, and the same for the 1,000-step history repeated 2, 4 and 8 times; then against prompt size, a
6-step history (``new A`` with a one-block append prompt of S KiB, a turn, a ``load``
re-sending it, a turn, a ``fork``, a turn on the fork) for each S in ``--prompt-kib`` (96 KiB
is the largest text ``strategies/payloads.py`` draws).

**Memory** against sessions in one example: a child process per count runs ``new`` with a
prompt of its own and a turn, per session (handles beyond Z are reused: a new session under a
used handle, as the strategies do), on one ``Run``; then judges that history whole. It
reports the Python heap's peak (``tracemalloc``) during the run and during the judging, the
peak RSS (``VmHWM``, reset after the imports) of a second child without ``tracemalloc``, and
the history's events.

Raw results go to ``benchmarks/results/growth.json``; ``--plot PATH`` draws the curves
(matplotlib: ``pip install -e '.[bench]'``), with ``--before OTHER.json`` another tree's
judging dashed beside them; ``--results FILE.json`` prints and plots saved results.
"""

from __future__ import annotations

import argparse
import copy
import gc
import gzip
import itertools
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, loadavg, machine, median, reference_argv

from acp_fuzz.core.cassette import (
    Header,
    read_cassette,
    write_cassette,
    write_cassette_bounded,
)
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.lifecycle import HANDLES, handle_name
from acp_fuzz.core.oracles import Baseline, Evaluator, evaluate
from acp_fuzz.engine.campaign.runner import Run, TargetSpec, run_steps

GROWTH = RESULTS / "growth"
#: What the script measures (``--only`` takes some of them).
PARTS = ("judge", "cassette", "memory")
#: A prompt text this long gets its repetition's suffix (drawn prompts carry a canary each;
#: shorter texts are not evidence for the oracles, sessions.MIN_SIGNIFICANT).
MIN_TAGGED = 12


# -- the histories -------------------------------------------------------------------------------


def spec() -> TargetSpec:
    return TargetSpec.from_command(reference_argv())


def calibrated() -> tuple[Any, Baseline]:
    """The reference agent's capabilities and baseline, as a campaign learns them."""
    from acp_fuzz.engine.campaign.search import calibrate

    _, caps, baseline = calibrate(spec())
    return caps, baseline


def _tagged(value: Any, tag: str) -> Any:
    if isinstance(value, Mapping):
        return {k: (v + tag if k == "text" and isinstance(v, str)
                    and len(v.strip()) >= MIN_TAGGED else _tagged(v, tag))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v, tag) for v in value]
    return value


def script(n: int, caps: Any) -> tuple[list[dict[str, Any]], int]:
    """``n`` steps: the covering examples over and over, each repetition with its own handles,
    texts and a ``delete`` of its sessions at its end (see the module's docstring); and the
    length of one pass over all the examples."""
    from acp_fuzz.strategies.cover import covering_examples

    examples = [c.steps for c in covering_examples(caps)]
    out: list[dict[str, Any]] = []
    base = k = 0
    cycle = 0
    while len(out) < n:
        if k == len(examples):
            cycle = len(out)
        steps = examples[k % len(examples)]
        used = sorted({s[key] for s in steps for key in ("session", "new")
                       if isinstance(s.get(key), str)})
        rename = {h: HANDLES[(HANDLES.index(h) + base) % len(HANDLES)] for h in used}
        for s in steps:
            s = copy.deepcopy(s)
            for key in ("session", "new"):
                if key in s:
                    s[key] = rename[s[key]]
            if "systemPrompt" in s:
                s["systemPrompt"] = _tagged(s["systemPrompt"], f" (r{k})")
            out.append(s)
        out.extend({"op": "delete", "session": rename[h]} for h in used)
        base += len(used)
        k += 1
    return out[:n], cycle or len(out)


def _save(path: Path, events: Sequence[Event], baseline: Baseline, **meta: Any) -> None:
    """A recorded history as JSON lines, gzipped (a cassette cannot hold the longest: the
    format's limit of values is reached at some 9,000 steps of these; see the results)."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"baseline": baseline.to_wire(), **meta}) + "\n")
        for e in events:
            f.write(json.dumps(e.to_wire(), ensure_ascii=False) + "\n")


def _load(path: Path) -> tuple[dict[str, Any], list[Event]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        head = json.loads(f.readline())
        return head, [Event.from_wire(json.loads(line)) for line in f]


@dataclass
class Recorded:
    """A recorded history: its events, the baseline it is judged with, the steps of one pass
    over the covering examples, and the wall seconds ``run_steps`` took to record it."""

    events: list[Event]
    baseline: Baseline
    cycle: int
    recorded_in: float


def history(n: int, caps: Any, baseline: Baseline, *, fresh: bool) -> Recorded:
    """The recorded history of ``n`` steps (recorded now, or read from its file)."""
    path = GROWTH / f"steps-{n}.jsonl.gz"
    if fresh or not path.exists():
        GROWTH.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        steps, cycle = script(n, caps)
        h, findings = run_steps(spec(), steps, baseline=baseline)
        took = time.perf_counter() - t0
        _save(path, h.snapshot(), baseline, steps=n, cycle=cycle, recorded_in=round(took, 2),
              findings=[f.to_wire() for f in findings])
        print(f"  recorded {n} steps in {took:.1f} s ({len(h)} events)", flush=True)
    head, events = _load(path)
    return Recorded(events, Baseline.from_wire(head["baseline"]), int(head.get("cycle", n)),
                    float(head.get("recorded_in", 0)))


def prompt_history(kib: int, baseline: Baseline, *, fresh: bool) -> list[Event]:
    """Six steps around a one-block append prompt of ``kib`` KiB."""
    path = GROWTH / f"prompt-{kib}k.jsonl.gz"
    if fresh or not path.exists():
        GROWTH.mkdir(parents=True, exist_ok=True)
        text = ("lorem ipsum dolor sit amet " * (kib * 1024 // 27 + 1))[: kib * 1024 - 24]
        sp = {"mode": "append", "content": [{"type": "text", "text": text + " [growth canary]"}]}
        steps = [{"op": "new", "session": "A", "systemPrompt": sp},
                 {"op": "prompt", "session": "A"},
                 {"op": "load", "session": "A", "systemPrompt": sp},
                 {"op": "prompt", "session": "A"},
                 {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp},
                 {"op": "prompt", "session": "B"}]
        h, _ = run_steps(spec(), steps, baseline=baseline)
        _save(path, h.snapshot(), baseline, prompt_kib=kib)
    return _load(path)[1]


# -- judging -------------------------------------------------------------------------------------


def _segments(events: Sequence[Event]) -> list[Sequence[Event]]:
    """The events of each step, from its ``step`` event to the next (what came before the
    first step, the spawn and ``initialize``, goes with the first)."""
    starts = [i for i, e in enumerate(events) if e.kind == "step"]
    bounds = [0, *starts[1:], len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds)]


def judge_whole(events: Sequence[Event], baseline: Baseline) -> float:
    t0 = time.process_time()
    evaluate(events, baseline=baseline)
    return time.process_time() - t0


def judge_incremental(events: Sequence[Event], baseline: Baseline) -> list[float]:
    """Feed one ``Evaluator`` each step's new events and read its findings after each:
    returns each step's time."""
    judge = Evaluator(baseline=baseline)
    per_step: list[float] = []
    clock = time.process_time
    for seg in _segments(events):
        t0 = clock()
        judge.feed(seg)
        judge.findings()
        per_step.append(clock() - t0)
    return per_step


def judge_as_a_run(events: Sequence[Event], baseline: Baseline) -> tuple[list[float], float]:
    """Judge as ``run_steps(stop_on_failure=True)`` and a campaign's example do: after each
    step, the history's snapshot fed whole to one ``Evaluator`` and its findings read.
    Returns each step's time (snapshot + feed + findings) and the snapshots' share."""
    h = History()
    judge = Evaluator(baseline=baseline)
    per_step: list[float] = []
    snap = 0.0
    clock = time.process_time
    for seg in _segments(events):
        h.events.extend(seg)
        t0 = clock()
        events_now = h.snapshot()
        t1 = clock()
        judge.feed(events_now)
        judge.findings()
        t2 = clock()
        per_step.append(t2 - t0)
        snap += t1 - t0
    return per_step, snap


def passes(per_step: Sequence[float], cycle: int) -> list[float]:
    """The time of each whole pass over the covering examples: the same steps, with other
    handles and texts, judged after more and more of them."""
    return [sum(per_step[i:i + cycle]) for i in range(0, len(per_step) - cycle + 1, cycle)]


def growth(times: Sequence[float]) -> float | None:
    """The last pass's time over the time of the pass halfway through the history: 2 when a
    step costs in proportion to the history before it, 1 when it costs the same. ``None``
    with fewer than three passes."""
    return times[-1] / times[(len(times) - 1) // 2] if len(times) >= 3 else None


def judging(histories: Mapping[int, Recorded], rounds: int) -> list[dict[str, Any]]:
    rows = []
    for n, rec in histories.items():
        events, baseline = rec.events, rec.baseline
        evaluate(events[:500], baseline=baseline)  # warm: the schema validators build lazily
        kib = sum(len(json.dumps(e.to_wire(), ensure_ascii=False)) for e in events) / 1024
        t: dict[str, list[float]] = {k: [] for k in ("whole", "incremental", "as_run",
                                                     "snapshot")}
        by_pass: dict[str, list[list[float]]] = {"incremental": [], "as_run": []}
        for _ in range(max(rounds, 3000 // n)):  # a short history is judged more times
            t["whole"].append(judge_whole(events, baseline))
            per_step = judge_incremental(events, baseline)
            t["incremental"].append(sum(per_step))
            by_pass["incremental"].append(passes(per_step, rec.cycle))
            per_step, snap = judge_as_a_run(events, baseline)
            t["as_run"].append(sum(per_step))
            t["snapshot"].append(snap)
            by_pass["as_run"].append(passes(per_step, rec.cycle))
        row: dict[str, Any] = {"steps": n, "events": len(events), "kib": round(kib, 1),
                               "cycle": rec.cycle,
                               "recorded_ms_per_step": round(rec.recorded_in / n * 1e3, 1),
                               "whole_us_per_kib": round(median(t["whole"]) / kib * 1e6, 1),
                               "snapshot_share": round(median(t["snapshot"])
                                                       / median(t["as_run"]), 4),
                               "samples": t}
        for k in ("whole", "incremental", "as_run"):
            row[f"{k}_us_per_step"] = round(median(t[k]) / n * 1e6, 1)
        for k, runs in by_pass.items():
            # Each pass's median over the rounds, in µs per step of the pass.
            row[f"passes_{k}"] = [round(median(p) / rec.cycle * 1e6, 1)
                                  for p in zip(*runs, strict=True)]
            g = growth(row[f"passes_{k}"])
            row[f"growth_{k}"] = None if g is None else round(g, 2)
        rows.append(row)
        print(f"  judged {n} steps: {row['whole_us_per_step']} / {row['incremental_us_per_step']}"
              f" / {row['as_run_us_per_step']} us per step (whole / incremental / as a run), "
              f"growth {row['growth_incremental']} / {row['growth_as_run']}", flush=True)
    return rows


# -- cassettes -----------------------------------------------------------------------------------


def cassette_times(events: Sequence[Event], rounds: int) -> dict[str, Any]:
    """Write and read ``events`` as a cassette; where ``write_cassette`` refuses them (over
    the format's limits), ``write_cassette_bounded`` as a campaign writes a finding's."""
    header = Header(target=reference_argv(), kind="run")
    writes, reads, cpu_w, cpu_r, cpu_r_nogc = [], [], [], [], []
    size = 0
    bounded = False
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        path = Path(tmp) / "x.cassette"
        for _ in range(rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                write_cassette(path, header, events)
            except ValueError:
                bounded = True
                write_cassette_bounded(path, header, events)
            writes.append(time.perf_counter() - t0)
            cpu_w.append(time.process_time() - c0)
            size = path.stat().st_size
            t0, c0 = time.perf_counter(), time.process_time()
            back = read_cassette(path)
            reads.append(time.perf_counter() - t0)
            cpu_r.append(time.process_time() - c0)
            assert bounded or len(back.events) == len(events)
            del back
            gc.disable()  # the read alone, without the collector's passes over this heap
            try:
                c0 = time.process_time()
                back = read_cassette(path)
                cpu_r_nogc.append(time.process_time() - c0)
            finally:
                gc.enable()
        kept = len(back.events)
    return {"events": len(events), "bytes": size, "write_ms": round(median(writes) * 1e3, 2),
            "read_ms": round(median(reads) * 1e3, 2),
            "write_cpu_us_per_event": round(median(cpu_w) / len(events) * 1e6, 2),
            "read_cpu_us_per_event": round(median(cpu_r) / kept * 1e6, 2),
            "read_cpu_nogc_us_per_event": round(median(cpu_r_nogc) / kept * 1e6, 2),
            "bounded": bounded, "kept": kept,
            "clipped": back.header.meta.get("clipped") if bounded else None,
            "samples": {"write": writes, "read": reads, "write_cpu": cpu_w, "read_cpu": cpu_r,
                        "read_cpu_nogc": cpu_r_nogc}}


def cassettes(histories: Mapping[int, Recorded], prompts: Mapping[int, list[Event]],
              baseline: Baseline, rounds: int) -> dict[str, list[dict[str, Any]]]:
    by_steps = []
    for n, rec in histories.items():
        r = {"steps": n, **cassette_times(rec.events, rounds)}
        by_steps.append(r)
        print(f"  cassette of {n} steps: {r['bytes'] / 1024:.0f} KiB, write {r['write_ms']} ms, "
              f"read {r['read_ms']} ms", flush=True)
    if 1000 in histories:
        # The 1,000-step history over and over (seq numbered on): the same events, k times.
        one = histories[1000].events
        for k in (2, 4, 8):
            events = [Event(seq=i, t=e.t, kind=e.kind, data=e.data)
                      for i, e in enumerate(one * k)]
            r = {"steps": 1000 * k, "repeated": k, **cassette_times(events, rounds)}
            by_steps.append(r)
    by_prompt = []
    for kib, events in prompts.items():
        judged = median([judge_whole(events, baseline) for _ in range(rounds)])
        r = {"prompt_kib": kib, "judge_ms": round(judged * 1e3, 2),
             **cassette_times(events, rounds)}
        by_prompt.append(r)
        print(f"  cassette with a {kib} KiB prompt: {r['bytes'] / 1024:.0f} KiB, write "
              f"{r['write_ms']} ms, read {r['read_ms']} ms", flush=True)
    return {"steps": by_steps, "prompt": by_prompt}


# -- memory --------------------------------------------------------------------------------------


def session_steps(n: int) -> list[dict[str, Any]]:
    """``n`` sessions in one example: each made with a prompt of its own, then a turn."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        h = handle_name(i)
        text = f"You are a code review specialist. Focus on security. [growth canary {i}]"
        out += [{"op": "new", "session": h,
                 "systemPrompt": {"mode": "append", "content": [{"type": "text", "text": text}]}},
                {"op": "prompt", "session": h}]
    return out


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure, in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def memory_child(n: int, baseline: Baseline, traced: bool) -> dict[str, Any]:
    """One example of ``n`` sessions on one ``Run``, then the judging of its history (run in
    a process of its own: see :func:`memory`)."""
    steps = session_steps(n)
    rss0 = _status("VmRSS")
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # the peak RSS (VmHWM) starts again from here, not from the imports
    if traced:
        tracemalloc.start()
    run = Run(spec()).__enter__()
    try:
        run.initialize()
        for s in steps:
            run.execute(s)
        run.close(grace=0)
        events = run.history.snapshot()
    finally:
        run.close(grace=0)
    out: dict[str, Any] = {"sessions": n, "steps": len(steps), "events": len(events)}
    if traced:
        out["run_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
    judge = Evaluator(baseline=baseline)
    judge.feed(events)
    out["findings"] = len([f for f in judge.findings() if f.severity != "info"])
    if traced:
        now, peak = tracemalloc.get_traced_memory()
        out["judge_peak"] = peak - held
        out["judge_kept"] = now - held
    else:
        out["rss_before"] = rss0
        out["hwm"] = _status("VmHWM")
    return out


def memory(counts: Sequence[int], baseline: Baseline) -> list[dict[str, Any]]:
    rows = []
    for n in counts:
        row: dict[str, Any] = {}
        for traced in (True, False):
            argv = [sys.executable, __file__, "--memory-child", str(n),
                    "--baseline", json.dumps(baseline.to_wire())]
            out = subprocess.run(argv + (["--traced"] if traced else []), capture_output=True,
                                 text=True, check=True)
            row.update(json.loads(out.stdout.strip().splitlines()[-1]))
        rows.append(row)
        mib = 1024 * 1024
        print(f"  {n} session(s): run peak {row['run_peak'] / mib:.1f} MiB, judging peak "
              f"{row['judge_peak'] / mib:.2f} MiB (python heap); RSS peak {row['hwm'] / mib:.0f}"
              f" MiB ({(row['hwm'] - row['rss_before']) / mib:+.0f} MiB over the imports)",
              flush=True)
    return rows


# -- the report ----------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _cpu(r: Mapping[str, Any]) -> str:
    return (f"{r.get('write_cpu_us_per_event', 0):.1f} | {r.get('read_cpu_us_per_event', 0):.1f}"
            f" ({r.get('read_cpu_nogc_us_per_event', 0):.1f})")


def _ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def tables(res: Mapping[str, Any]) -> str:
    """The results as the markdown tables of docs/performance.md."""
    out = []
    if res.get("judging"):
        out += ["| steps | events | history KiB | recording: ms per step (wall) "
                "| whole: µs per step | per KiB | incremental: µs per step | growth "
                "| as a run feeds it: µs per step | growth | of which snapshots |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['steps']:,} | {r['events']:,} | {r['kib']:,.0f} | "
                f"{r['recorded_ms_per_step']:,.1f} | {r['whole_us_per_step']:,.0f} | "
                f"{r['whole_us_per_kib']:,.0f} | {r['incremental_us_per_step']:,.0f} | "
                f"{_ratio(r['growth_incremental'])} | {r['as_run_us_per_step']:,.0f} | "
                f"{_ratio(r['growth_as_run'])} | {r['snapshot_share']:.0%} |"
                for r in res["judging"]]
        out.append("")
    cas = res.get("cassettes")
    if cas:
        out += ["| history | events | cassette KiB | bytes per event | write ms | read ms "
                "| write: CPU µs per event | read: CPU µs per event (GC off) "
                "| judging ms (CPU, whole) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in cas["steps"]:
            note = f" (bounded: {r['kept']:,} events kept)" if r.get("bounded") else ""
            name = f"1,000 steps × {r['repeated']}" if r.get("repeated") \
                else f"{r['steps']:,} steps"
            out.append(f"| {name}{note} | {r['events']:,} | "
                       f"{r['bytes'] / 1024:,.0f} | {r['bytes'] / r['events']:.0f} | "
                       f"{r['write_ms']:,.1f} | {r['read_ms']:,.1f} | {_cpu(r)} | |")
        for r in cas["prompt"]:
            out.append(f"| 6 steps, {r['prompt_kib']} KiB prompt | {r['events']:,} | "
                       f"{r['bytes'] / 1024:,.0f} | {r['bytes'] / r['events']:,.0f} | "
                       f"{r['write_ms']:,.1f} | {r['read_ms']:,.1f} | {_cpu(r)} | "
                       f"{r['judge_ms']:,.1f} |")
        out.append("")
    if res.get("memory"):
        mib = 1024 * 1024
        out += ["| sessions | steps | events | Run: Python heap peak | judging: heap peak "
                "| judging: kept | process RSS peak | over the imports |",
                "|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['sessions']} | {r['steps']} | {r['events']:,} | "
                f"{r['run_peak'] / mib:.1f} MiB | {r['judge_peak'] / mib:.2f} MiB | "
                f"{r['judge_kept'] / mib:.2f} MiB | {r['hwm'] / mib:.0f} MiB | "
                f"{(r['hwm'] - r['rss_before']) / mib:+.0f} MiB |" for r in res["memory"]]
    return "\n".join(out)


def plot(res: Mapping[str, Any], path: Path, before: Mapping[str, Any] | None = None) -> None:
    """The curves (needs matplotlib: the ``bench`` extra): judging per step against the
    history's steps (``before``'s dashed, the same histories judged by another tree), and the
    cassettes against steps and against prompt size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, 2, figsize=(10, 6.4), dpi=64)
    axes = list(grid.flat)
    ax = axes[0]
    modes = (("whole_us_per_step", "whole"), ("incremental_us_per_step", "incremental"),
             ("as_run_us_per_step", "as a run feeds it"))
    for (key, label), colour in zip(modes, ("C0", "C1", "C2"), strict=True):
        for runs, style, tag in ((res, "-", ""), (before, "--", " (before)")):
            j = (runs or {}).get("judging") or []
            if j:
                ax.plot([r["steps"] for r in j], [r[key] for r in j], style, color=colour,
                        marker="o", markersize=3, label=label + tag)
    ax.set(xscale="log", yscale="log", xlabel="steps in the history",
           ylabel="µs of CPU per step", title="judging, per step")
    ax.legend(fontsize=7)
    ax = axes[1]
    for (key, label), colour in zip(modes[1:], ("C1", "C2"), strict=True):
        for runs, style, tag in ((res, "-", ""), (before, "--", " (before)")):
            j = (runs or {}).get("judging") or []
            if j and j[-1].get(f"passes_{key.split('_us')[0]}"):
                times = j[-1][f"passes_{key.split('_us')[0]}"]
                ax.plot(range(1, len(times) + 1), times, style, color=colour, label=label + tag)
    longest = ((res.get("judging") or [{}])[-1]).get("steps", 0)
    ax.set(xlabel=f"pass over the covering examples ({longest:,}-step history)",
           ylabel="µs of CPU per step", title="judging, each pass of the longest history",
           ylim=(0, None))
    ax.legend(fontsize=7)
    cas = res.get("cassettes") or {"steps": [], "prompt": []}
    ax = axes[2]
    recorded = [r for r in cas["steps"] if not r.get("repeated") and not r.get("bounded")]
    repeated = [r for r in cas["steps"] if r.get("repeated")]
    for key, label, colour in (("write_cpu_us_per_event", "write", "C0"),
                               ("read_cpu_us_per_event", "read", "C1"),
                               ("read_cpu_nogc_us_per_event", "read, GC off", "C2")):
        ax.plot([r["events"] for r in recorded], [r.get(key, 0) for r in recorded], marker="o",
                color=colour, label=label)
        ax.plot([r["events"] for r in repeated], [r.get(key, 0) for r in repeated], "x",
                color=colour)
    ax.set(xscale="log", xlabel="events in the cassette (x: the 1,000-step history repeated)",
           ylabel="µs of CPU per event", title="cassette, per event", ylim=(0, None))
    ax.legend(fontsize=7)
    ax = axes[3]
    kib = [r["prompt_kib"] for r in cas["prompt"]]
    ax.plot(kib, [r["bytes"] / 1024 for r in cas["prompt"]], marker="o", color="C3",
            label="cassette KiB")
    ax.set(xlabel="prompt KiB (6 steps)", ylabel="KiB", title="cassette against prompt size",
           ylim=(0, None))
    twin = ax.twinx()
    for key, label, colour in (("write", "write ms", "C0"), ("read", "read ms", "C1"),
                               ("judge", "judging ms", "C4")):
        ms = [r["judge_ms"] if key == "judge" else r[f"{key}_cpu_us_per_event"] * r["events"]
              / 1e3 for r in cas["prompt"]]
        twin.plot(kib, ms, "--", marker="o", markersize=3, color=colour, label=label + " (CPU)")
    twin.set(ylabel="ms of CPU", ylim=(0, None))
    ax.legend(loc="upper left", fontsize=7)
    twin.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def _regrow(runs: Mapping[str, Any]) -> None:
    """Growth as :func:`growth` defines it now, from each row's passes (older results)."""
    for row in runs.get("judging", []):
        for k in ("incremental", "as_run"):
            g = growth(row.get(f"passes_{k}", []))
            row[f"growth_{k}"] = None if g is None else round(g, 2)


def compare(a: Path, b: Path) -> None:
    """The judging rows of two runs side by side (the same histories, two trees)."""
    ra, rb = (json.loads(p.read_text()) for p in (a, b))
    _regrow(ra)
    _regrow(rb)
    print(f"A = {a} ({ra['machine']['commit']}, load {ra['machine']['load']}), B = {b} "
          f"({rb['machine']['commit']}, load {rb['machine']['load']})\n")
    keys = {"whole_us_per_step": "whole µs/step", "incremental_us_per_step":
            "incremental µs/step", "growth_incremental": "growth", "as_run_us_per_step":
            "as a run µs/step", "growth_as_run": "growth"}
    print("| steps | " + " | ".join(f"{v} A | B" for v in keys.values()) + " |")
    print("|---|" + "---|---|" * len(keys))
    for x, y in zip(ra.get("judging", []), rb.get("judging", []), strict=False):
        cells = [f"{_num(x.get(k))} | {_num(y.get(k))}" for k in keys]
        print(f"| {x['steps']:,} | " + " | ".join(cells) + " |")


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:,.2f}" if x < 10 else f"{x:,.0f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=_ints, default=[10, 100, 1000, 10000])
    ap.add_argument("--prompt-kib", type=_ints, default=[1, 8, 32, 64, 96])
    ap.add_argument("--sessions", type=_ints, default=[1, 10, 100])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(PARTS))
    ap.add_argument("--fresh", action="store_true", help="record the histories again")
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--before", type=Path, help="another tree's results, dashed on the plot")
    ap.add_argument("--results", type=Path, help="print and plot saved results, measure nothing")
    ap.add_argument("--out", type=Path, default=RESULTS / "growth.json")
    ap.add_argument("--compare", nargs=2, type=Path)
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--baseline", default="[]", help=argparse.SUPPRESS)
    ap.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return {}
    if args.memory_child is not None:
        base = Baseline.from_wire(json.loads(args.baseline))
        print(json.dumps(memory_child(args.memory_child, base, args.traced)))
        return {}
    before = json.loads(args.before.read_text()) if args.before else None
    if args.results:
        res = json.loads(args.results.read_text())
        _regrow(res)
        _regrow(before or {})
        print(tables(res))
        if args.plot:
            plot(res, args.plot, before)
        return res
    only = set(args.only.split(","))
    # A run of some parts only updates those parts of an earlier run's results.
    res = json.loads(args.out.read_text()) if args.out.exists() and only != set(PARTS) else {}
    res[f"machine_{'_'.join(sorted(only))}"] = machine()
    res.setdefault("machine", res[f"machine_{'_'.join(sorted(only))}"])
    print(f"load average at start: {loadavg()}", flush=True)
    caps, baseline = calibrated()
    hist = {n: history(n, caps, baseline, fresh=args.fresh) for n in args.steps} \
        if only & {"judge", "cassette"} else {}
    if "judge" in only:
        res["judging"] = judging(hist, args.rounds)
    if "cassette" in only:
        prompts = {k: prompt_history(k, baseline, fresh=args.fresh) for k in args.prompt_kib}
        res["cassettes"] = cassettes(hist, prompts, baseline, args.rounds)
    if "memory" in only:
        res["memory"] = memory(args.sessions, baseline)
    res[f"load_at_end_{'_'.join(sorted(only))}"] = res["load_at_end"] = loadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    _regrow(res)
    print(f"\nload average at end: {res['load_at_end']}\n\n{tables(res)}")
    if args.plot:
        plot(res, args.plot, before)
    return res


if __name__ == "__main__":
    main()
