"""acp-fuzz's own peak memory per prompt size (issue #33 §3): 64 KiB, 1 MiB, 8 MiB and near
the TypeScript SDK's 32 MiB line limit, each sent as a fill mark (what the search and the
covering examples send) and, for comparison, as a literal text of the same size (recorded
whole, as every prompt was before the marks).

``python benchmarks/bench_sizes.py [--sizes 64k,1m,8m,limit] [--forms mark,literal] [--turns 3]``

(The literal near-limit case alone takes minutes and gigabytes: the oracles search a 32 MiB
block that the gateway had to clip. ``--forms mark`` leaves the literal cases out.)

Each case runs in a fresh interpreter (one child process per case, so one case's peak does
not hide another's): a real :class:`~acp_fuzz.engine.campaign.runner.Run` of the correct reference
agent with its real gateway, ``new A (P)``, ``--turns`` turns of A, ``load A (P)`` (the same
prompt re-sent), one more turn, the oracles over the history, and the cassette written with
``write_cassette_bounded``. The child reports its own peak resident set (``ru_maxrss``: the
harness, the transport and the gateway threads; the agent is another process), the longest
string the history holds, the cassette's size and the MUST/SHOULD findings. Each run is
appended to ``benchmarks/results/sizes.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import append_row, loadavg, reference_argv

#: The sizes by name: 64 KiB is the long class (never a mark), the others the fill sizes.
SIZES = {"64k": 64 * 1024, "1m": 1024 * 1024, "8m": 8 * 1024 * 1024,
         "limit": 32 * 1024 * 1024 - 64 * 1024}
CANARY = "[acp-fuzz canary A1]"


def _text(n: int, form: str) -> str:
    from acp_fuzz.core.fills import SIZES as FILLS
    from acp_fuzz.core.fills import mark
    if form == "mark" and n in FILLS.values():
        return f"{mark(n)} {CANARY}"
    # Not a filler (so the gateway keeps it as it came): what any literal prompt costs.
    return f"{'Be terse. ' * (n // 10 + 1)}"[:n] + f" {CANARY}"


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return max((_longest(v) for v in value), default=0)
    return 0


def child(size: str, form: str, turns: int) -> dict[str, Any]:
    """One case, in this process: what it measured."""
    from acp_fuzz.core.cassette import Header, write_cassette_bounded
    from acp_fuzz.core.oracles import evaluate
    from acp_fuzz.engine.campaign.runner import Run, TargetSpec

    sp = {"mode": "append", "content": [{"type": "text", "text": _text(SIZES[size], form)}]}
    t0 = time.monotonic()
    with Run(TargetSpec.from_command(reference_argv())) as run:
        run.initialize()
        steps = [{"op": "new", "session": "A", "systemPrompt": sp}]
        steps += [{"op": "prompt", "session": "A"}] * turns
        steps += [{"op": "load", "session": "A", "systemPrompt": sp},
                  {"op": "prompt", "session": "A"}]
        outcomes = [run.execute(s).outcome for s in steps]
        events = run.history.snapshot()
    del sp, steps, run
    findings = [f.oracle for f in evaluate(events) if f.severity in ("MUST", "SHOULD")]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_cassette_bounded(Path(tmp) / "c.cassette", Header(target=["agent"]),
                                      events)
        cassette = path.stat().st_size
    return {"size": size, "chars": SIZES[size], "form": form, "turns": turns,
            "outcomes": sorted(set(outcomes)), "findings": findings,
            "longest_recorded": max(_longest(e.data) for e in events),
            "cassette_bytes": cassette, "wall": round(time.monotonic() - t0, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64k,1m,8m,limit")
    ap.add_argument("--forms", default="mark,literal")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("SIZE", "FORM"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.turns)))
        return 0
    for size in args.sizes.split(","):
        forms = args.forms.split(",") if size != "64k" else ["literal"]
        for form in forms:
            proc = subprocess.run([sys.executable, __file__, "--turns", str(args.turns),
                                   "--child", size, form], capture_output=True, text=True,
                                  timeout=900)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            append_row("sizes", {**json.loads(proc.stdout.strip().splitlines()[-1]),
                                 "load": loadavg()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
