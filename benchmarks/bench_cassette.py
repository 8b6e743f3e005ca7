"""Cassettes: write and read throughput (MB/s) and size against the same events as JSON lines.

``python benchmarks/bench_cassette.py [--events 50000] [--runs 5]``

The events are real: one run of the reference agent (new sessions with systemPrompts, turns,
loads, a restart), repeated with fresh ``seq`` numbers up to ``--events``. Writing is
``write_cassette`` (streaming, checksummed, atomic rename, fsync); reading is ``read_cassette``
(every limit checked, checksum verified). The JSON-lines figures use ``json.dumps`` /
``json.loads`` per event, for scale. Medians over ``--runs``.
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

from _common import Row, median, reference_argv, save, table

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.engine.campaign.runner import Run, TargetSpec


def sample_events() -> list[Event]:
    sp = {"mode": "append", "content": [{"type": "text", "text": "Be terse. " * 20}]}
    with Run(TargetSpec.from_command(reference_argv())) as run:
        run.initialize()
        for h in ("A", "B", "C"):
            run.execute({"op": "new", "session": h, "systemPrompt": sp})
            run.execute({"op": "prompt", "session": h})
        run.execute({"op": "restart"})
        for h in ("A", "B"):
            run.execute({"op": "load", "session": h, "systemPrompt": sp})
            run.execute({"op": "prompt", "session": h})
        run.close()
        return run.history.snapshot()


def scaled(events: list[Event], n: int) -> list[Event]:
    out: list[Event] = []
    while len(out) < n:
        for e in events:
            if len(out) == n:
                break
            out.append(Event(seq=len(out), t=e.t, kind=e.kind, data=e.data))
    return out


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    events = scaled(sample_events(), args.events)
    header = Header(target=reference_argv(), seed=0, kind="run")
    w_rates, r_rates, jw_rates, jr_rates = [], [], [], []
    size = jsize = 0
    with tempfile.TemporaryDirectory(prefix="bench-cassette-") as tmp:
        path = Path(tmp) / "x.cassette"
        jpath = Path(tmp) / "x.jsonl"
        for _ in range(args.runs):
            t0 = time.perf_counter()
            write_cassette(path, header, events)
            tw = time.perf_counter() - t0
            size = path.stat().st_size
            t0 = time.perf_counter()
            back = read_cassette(path)
            tr = time.perf_counter() - t0
            assert len(back.events) == len(events)
            t0 = time.perf_counter()
            with open(jpath, "w", encoding="utf-8") as f:
                for e in events:
                    f.write(json.dumps(e.to_wire(), ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            tjw = time.perf_counter() - t0
            jsize = jpath.stat().st_size
            t0 = time.perf_counter()
            with open(jpath, encoding="utf-8") as f:
                jback = [Event.from_wire(json.loads(line)) for line in f]
            tjr = time.perf_counter() - t0
            assert len(jback) == len(events)
            mb = size / 1e6
            w_rates.append(mb / tw)
            r_rates.append(mb / tr)
            jw_rates.append(jsize / 1e6 / tjw)
            jr_rates.append(jsize / 1e6 / tjr)
    n = len(events)
    rows = [
        Row("cassette write (`write_cassette`)", round(median(w_rates), 1), "MB/s",
            detail=f"{n} events, {size / 1e6:.1f} MB, "
                   f"{n / (size / 1e6 / median(w_rates)):.0f} events/s", samples=w_rates),
        Row("cassette read (`read_cassette`, all checks)", round(median(r_rates), 1), "MB/s",
            detail=f"{n / (size / 1e6 / median(r_rates)):.0f} events/s", samples=r_rates),
        Row("cassette size / JSON lines size", round(size / jsize, 2), "",
            detail=f"{size / 1e6:.1f} MB vs {jsize / 1e6:.1f} MB "
                   f"({size / n:.0f} vs {jsize / n:.0f} bytes per event)"),
        Row("JSON lines write / read (for scale)",
            f"{median(jw_rates):.1f} / {median(jr_rates):.1f}", "MB/s",
            detail=f"json.dumps/json.loads per event; {jsize / 1e6:.1f} MB"),
    ]
    save("cassette", rows)
    return rows


if __name__ == "__main__":
    print(table(main()))
