"""The default campaign's own speed against the correct reference agent: wall time, examples,
steps and steps per second, and at which example the held turns were first sent (a
``during`` or a ``with`` turn, issue #32 §4), per seed.

``python benchmarks/bench_campaign.py [--seeds 0,1,2] [--protocol 1] [--max-examples 100]``

One whole ``run_campaign`` per seed with the DEFAULT settings (covering examples, then the
search; the correct agent gives no finding, so every example is drawn and nothing is shrunk).
Run it from two checkouts (each with its own venv) on a quiet machine to compare them side
by side: a checkout from before the held turns simply counts none. Each run is appended to
``benchmarks/results/campaign.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import append_row, loadavg, reference_argv


def _campaign(seed: int, protocol: str, examples: int) -> dict[str, object]:
    """One default campaign in a child process (a fresh interpreter, as a user runs it)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "acp_fuzz", "target", "--seed", str(seed), "--protocol",
             protocol, "-n", str(examples), "--cassette-dir", str(Path(tmp) / "c"),
             "--report", f"json:{report}", "--", *reference_argv()],
            capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t0
        data = json.loads(report.read_text()) if report.is_file() else {}
    steps = data.get("steps_run", 0)
    first = (data.get("coverage") or {}).get("first_example") or {}
    return {"seed": seed, "protocol": protocol, "exit": proc.returncode, "wall": round(wall, 1),
            "examples": data.get("examples_run"), "steps": steps,
            "steps_per_s": round(steps / wall, 1) if wall and isinstance(steps, int) else None,
            "held_first": {k: v for k, v in first.items()
                           if k.startswith("during:") or k == "together"},
            "load": loadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--protocol", default="1")
    ap.add_argument("--max-examples", type=int, default=100)
    args = ap.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        append_row("campaign", _campaign(seed, args.protocol, args.max_examples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
