"""Time to each known finding: does a default campaign meet the bugs we already know an agent
has, and how soon (issue #36 §2)?

``python benchmarks/bench_known_findings.py [--profiles codex-acp,claude-agent-acp]
[--seeds 1,2,3] [--protocol 1] [--budget 900] [--acp-fuzz PATH] [--label after]``

``python benchmarks/bench_known_findings.py --compare results/known-before.json
results/known-after.json`` prints two saved runs side by side (one line per kept finding and
seed, and one per finding nobody reviewed).

For each profile and seed it runs ``acp-fuzz target --profile P --seed S --sandbox-net`` with
the defaults otherwise (100 examples, covering examples first), capped by ``--budget`` seconds
(``--time-budget``: no new example after it; a failure found is still shrunk and
confirmed), and reads what came out:

* each **kept finding** of ``cassettes/real/kept.toml`` for that agent version and ACP
  version: found or not, and the seconds from the command's start to its confirmed cassette
  (the cassette's modification time: it is written once the failure is shrunk and confirmed
  3/3, so this is the time a user waits for the evidence);
* every other MUST or SHOULD finding the campaign reported: **unreviewed**, to be reviewed by
  hand in docs/findings.md before it is believed (a new bug of the agent, or a false alarm of
  ours).

``--acp-fuzz`` names the command to run (default: the one beside this interpreter), so an
older checkout's venv measures the same way for a side-by-side table. The planted bugs of the
reference agent are ``bench_bugs.py``'s. Raw results land in
``benchmarks/results/known-<label>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acp_fuzz.engine.agents.profiles import get_profile
from acp_fuzz.reporting.kept import KEPT_FILE, load_kept
from benchmarks._common import RESULTS, ROOT, loadavg, machine

KEPT = ROOT / "cassettes" / "real" / KEPT_FILE
#: What an older acp-fuzz called a kept finding (its oracle and rule then), so that a run of
#: an older checkout (``--acp-fuzz``) is matched fairly: the refusal of a re-sent prompt was
#: MUST under the append/override rule before issue #31, the conversation's rule was the
#: client-replay one, and a destroyed conversation was only ``session.history-lost``.
RENAMED: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("payload.valid-rejected", "ACPFUZZ-RESEND-ACCEPTED-SHOULD"): {
        ("payload.valid-rejected", "SP-AGENT-APPEND-MUST"),
        ("payload.valid-rejected", "SP-AGENT-OVERRIDE-MUST")},
    ("session.history-destroyed", "ACPFUZZ-CONVERSATION-KEPT-MUST"): {
        ("session.history-lost", "SES-AGENT-LOAD-REPLAY-MUST"),
        ("session.history-lost", "ACPFUZZ-CONVERSATION-KEPT-MUST")},
}


def _campaign(cmd: str, profile: str, seed: int, protocol: str, budget: float,
              work: Path) -> dict[str, Any]:
    """One default campaign; what it reported, with seconds to each report's cassette."""
    cassettes, report = work / "cassettes", work / "report.json"
    argv = [cmd, "target", "--profile", profile, "--seed", str(seed), "--protocol", protocol,
            "--sandbox-net", "--time-budget", str(budget), "--cassette-dir", str(cassettes),
            "--report", f"json:{report}"]
    load = loadavg()
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    doc = json.loads(report.read_text()) if report.is_file() else {}
    found = []
    for f in doc.get("findings") or []:
        path = Path(f["cassette"]) if f.get("cassette") else None
        at = path.stat().st_mtime - t0 if path is not None and path.is_file() else None
        found.append({"oracle": f.get("oracle"), "severity": f.get("severity"),
                      "rule": f.get("rule"), "status": f.get("status"),
                      "seconds": None if at is None else round(at, 1),
                      "steps": len(f.get("steps") or []),
                      "cassette": str(path) if path is not None else None})
    return {"profile": profile, "seed": seed, "protocol": protocol, "exit": proc.returncode,
            "wall": round(wall, 1), "examples": doc.get("examples_run"),
            "steps": doc.get("steps_run"), "load_before": load, "load_after": loadavg(),
            "agent_version": ((doc.get("agent") or {}).get("agentInfo") or {}).get("version"),
            "findings": found,
            "stderr_tail": proc.stderr.strip().splitlines()[-3:] if proc.returncode > 1 else []}


def _judge(run: dict[str, Any]) -> dict[str, Any]:
    """Which kept findings the run met (and when), and which findings nobody reviewed."""
    version = get_profile(run["profile"]).version
    proto = int(run["protocol"]) if run["protocol"] in ("1", "2") else 1
    kept = [k for k in load_kept(KEPT) if k.applies(run["profile"], version)
            and proto in k.cassettes]
    bad = [f for f in run["findings"] if f["severity"] in ("MUST", "SHOULD")]
    met = {}
    for k in kept:
        names = {(k.oracle, k.rule), *RENAMED.get((k.oracle, k.rule), set())}
        times = [f["seconds"] for f in bad if (f["oracle"], f["rule"]) in names]
        met[k.finding] = min((t for t in times if t is not None), default=None) \
            if times else "not found"
    known = {n for k in kept for n in ((k.oracle, k.rule), *RENAMED.get((k.oracle, k.rule), ()))}
    unreviewed = [f for f in bad if (f["oracle"], f["rule"]) not in known]
    return {**run, "kept": met, "unreviewed": unreviewed}


def _keep_evidence(run: dict[str, Any], folder: Path) -> None:
    """Copy the cassette of each unreviewed finding out of the campaign's temporary folder
    (to ``folder/<profile>-<seed>-<name>``): a finding nobody reviewed is reviewed from its
    cassette, and a flaky one may not come back (qwen-code's protocol.malformed at seed 2, on
    2026-12-05, did not)."""
    for f in run["unreviewed"]:
        src = Path(f["cassette"]) if f.get("cassette") else None
        if src is None or not src.is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        dst = folder / f"{run['profile']}-{run['seed']}-{src.name}"
        shutil.copyfile(src, dst)
        f["cassette"] = str(dst)


def _table(runs: list[dict[str, Any]]) -> str:
    lines = ["| agent | seed | kept finding | seconds to it | examples | wall s |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        for name, t in sorted(r["kept"].items()) or [("(none kept)", "")]:
            lines.append(f"| {r['profile']} | {r['seed']} | {name} | {t} | {r['examples']} | "
                         f"{r['wall']} |")
        for f in r["unreviewed"]:
            lines.append(f"| {r['profile']} | {r['seed']} | **unreviewed** {f['severity']} "
                         f"`{f['oracle']}` ({f['rule']}) | {f['seconds']} | | |")
    return "\n".join(lines)


def _compare(a: Path, b: Path) -> str:
    before, after = (json.loads(p.read_text())["runs"] for p in (a, b))
    key = {(r["profile"], r["seed"]): r for r in before}
    lines = ["| agent | seed | kept finding | before | after |", "|---|---|---|---|---|"]
    for r in after:
        old = key.get((r["profile"], r["seed"]), {"kept": {}})
        for name in sorted(set(r["kept"]) | set(old["kept"])):
            lines.append(f"| {r['profile']} | {r['seed']} | {name} | "
                         f"{old['kept'].get(name, '-')} | {r['kept'].get(name, '-')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="codex-acp,claude-agent-acp,gemini-cli")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--protocol", default="1")
    ap.add_argument("--budget", type=float, default=900.0)
    ap.add_argument("--acp-fuzz", default=str(Path(sys.executable).with_name("acp-fuzz")))
    ap.add_argument("--label", default="now")
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args()
    if args.compare:
        print(_compare(*args.compare))
        return
    runs = []
    out = RESULTS / f"known-{args.label}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    for profile in args.profiles.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            with tempfile.TemporaryDirectory(prefix="acp-fuzz-known-") as work:
                run = _judge(_campaign(args.acp_fuzz, profile, seed, args.protocol,
                                       args.budget, Path(work)))
                _keep_evidence(run, RESULTS / f"known-{args.label}-cassettes")
            runs.append(run)
            print(f"{profile} seed {seed}: exit {run['exit']}, {run['wall']} s, kept "
                  f"{run['kept']}, unreviewed {len(run['unreviewed'])}", flush=True)
            # Written after every campaign: a long sweep interrupted keeps what it measured.
            out.write_text(json.dumps({"machine": machine(), "label": args.label,
                                       "command": args.acp_fuzz, "runs": runs}, indent=1))
    print(_table(runs))
    print(f"raw results: {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
