"""Harness overhead: lifecycle steps/s through ``acp_fuzz.engine.campaign.runner.Run`` against the
reference agent, divided by raw NDJSON round trips/s to the same agent program driven by a minimal
client.

``python benchmarks/bench_overhead.py [--pairs 100] [--runs 5]``

Like with like: both sides start the reference agent in a fresh sandbox, wired to a running
fake-model gateway, send ``initialize``, and then time ``--pairs`` pairs of
``session/new`` (with an append systemPrompt) + ``session/prompt`` (one text block; the agent
makes one model request per turn). The raw client writes each request as one JSON line and reads
lines until the answer with its id. Each figure is the median over ``--runs`` fresh processes.
A third figure adds what the campaign does on top of ``Run``: the oracles over the whole history
after every step. Goal: ratio >= 0.5.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, median, reference_argv, save, table

from acp_fuzz.core.oracles import Baseline, evaluate
from acp_fuzz.core.steps import prompt_text
from acp_fuzz.engine.campaign.runner import CLIENT_CAPABILITIES, CLIENT_INFO, Run, TargetSpec
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.process.sandbox import Sandbox

GOAL = 0.5


def _sp(i: int) -> dict[str, object]:
    return {"mode": "append", "content": [{"type": "text", "text": f"Be terse. [bench {i}]"}]}


def raw_rate(gateway: Gateway, pairs: int) -> float:
    """Round trips per second of a minimal NDJSON client."""
    with Sandbox() as sb:
        env = sb.build_env(gateway.agent_env())
        proc = subprocess.Popen(reference_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, cwd=sb.work)
        assert proc.stdin is not None and proc.stdout is not None
        rid = 0

        def call(method: str, params: dict[str, object]) -> object:
            nonlocal rid
            rid += 1
            line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            while True:
                msg = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
                if msg.get("id") == rid and "method" not in msg:
                    return msg.get("result")

        call("initialize", {"protocolVersion": 1, "clientCapabilities": CLIENT_CAPABILITIES,
                            "clientInfo": CLIENT_INFO})
        t0 = time.perf_counter()
        for i in range(pairs):
            cwd = sb.new_cwd(f"s{i}")
            res = call("session/new", {"cwd": cwd, "mcpServers": [], "systemPrompt": _sp(i)})
            sid = res["sessionId"]  # type: ignore[index]
            call("session/prompt", {"sessionId": sid, "prompt": [
                {"type": "text", "text": prompt_text(f"s{i}", 1)}]})
        elapsed = time.perf_counter() - t0
        proc.stdin.close()
        proc.wait(10)
    return 2 * pairs / elapsed


def run_rate(gateway: Gateway, pairs: int, *, oracles: bool = False) -> float:
    """Lifecycle steps per second through Run (optionally with the oracles after each step)."""
    spec = TargetSpec.from_command(reference_argv())
    with Run(spec, gateway=gateway) as run:
        run.initialize()
        t0 = time.perf_counter()
        for i in range(pairs):
            for step in ({"op": "new", "session": f"s{i}", "systemPrompt": _sp(i)},
                         {"op": "prompt", "session": f"s{i}"}):
                out = run.execute(step)
                assert out.outcome == "ok", out
                if oracles:
                    evaluate(run.history.snapshot(), baseline=Baseline(), strict=False)
        elapsed = time.perf_counter() - t0
    return 2 * pairs / elapsed


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    raw, harness, full = [], [], []
    with Gateway(None) as gw:
        for _ in range(args.runs):  # interleaved, so that load drifts hit both alike
            raw.append(raw_rate(gw, args.pairs))
            harness.append(run_rate(gw, args.pairs))
            full.append(run_rate(gw, args.pairs, oracles=True))
    ratios = [h / r for h, r in zip(harness, raw, strict=True)]
    ratio = median(ratios)
    full_ratio = median([f / r for f, r in zip(full, raw, strict=True)])
    rows = [
        Row("raw NDJSON client, reference agent", round(median(raw), 1), "round trips/s",
            detail=f"{args.pairs} x (session/new + session/prompt), {args.runs} runs",
            samples=raw),
        Row("`Run.execute`, same requests", round(median(harness), 1), "steps/s",
            samples=harness),
        Row("harness overhead ratio (Run / raw)", round(ratio, 2), "", f">= {GOAL}",
            ratio >= GOAL, f"per-run ratios {[round(x, 2) for x in ratios]}", ratios),
        Row("`Run.execute` + oracles after each step", round(median(full), 1), "steps/s",
            detail=f"ratio to raw {full_ratio:.2f}; history grows to {4 * args.pairs}+ events",
            samples=full),
    ]
    save("overhead", rows)
    return rows


if __name__ == "__main__":
    print(table(main()))
