"""Regenerate ``leak.cassette`` and ``leak-report.md`` in this folder.

Run from the repository root::

    python docs/examples/generate_leak_report.py

It does what ``acp-fuzz target`` does for the reference agent's planted ``leak`` bug, minus the
search: probe and calibrate the agent, run the known minimal steps (two sessions with
different prompts, then one turn in the first), confirm them on three fresh agent processes,
save the finding cassette, and render its Markdown report with ``acp_fuzz.reporting``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import (
    CampaignSettings,
    FindingReport,
    calibrate,
    requests_of,
    run_steps,
    save_finding,
)
from acp_fuzz.reporting import render_markdown

HERE = Path(__file__).resolve().parent
RUNS = 3
#: What the cassette records as the agent command: portable, unlike this interpreter's path.
RECORDED_ARGV = ("python", "-m", "acp_fuzz.reference_agent", "--bug", "leak")
STEPS = [
    {"op": "new", "session": "A", "systemPrompt": {
        "mode": "append",
        "content": [{"type": "text", "text": "Always answer in the voice of a pirate captain."}]}},
    {"op": "new", "session": "B", "systemPrompt": {
        "mode": "append",
        "content": [{"type": "text", "text": "Never mention the weather in any reply."}]}},
    {"op": "prompt", "session": "A"},
]


def main() -> None:
    spec = TargetSpec.from_command([sys.executable, *RECORDED_ARGV[1:]])
    init, _, baseline = calibrate(spec)
    history, findings = run_steps(spec, STEPS, baseline=baseline)
    oracles = {f.oracle for f in findings if f.severity in ("MUST", "SHOULD")}
    assert "prompt.leak" in oracles, findings
    reproduced = 1
    for _ in range(RUNS - 1):
        _, again = run_steps(spec, STEPS, baseline=baseline)
        reproduced += bool(oracles & {f.oracle for f in again})
    report = FindingReport(status="failed" if reproduced == RUNS else "flaky", runs=RUNS,
                           reproduced=reproduced, findings=findings, steps=STEPS,
                           requests=requests_of(history.events), cassette=None)
    settings = CampaignSettings(cassette_dir=HERE, confirm_runs=RUNS, portable=True)
    written = save_finding(TargetSpec(argv=RECORDED_ARGV), settings, history.events, report,
                           baseline, init)
    cassette = HERE / "leak.cassette"
    written.replace(cassette)
    shown = "docs/examples/leak.cassette"
    (HERE / "leak-report.md").write_text(render_markdown(read_cassette(cassette), path=shown),
                                         encoding="utf-8")
    print(f"wrote {cassette} and {HERE / 'leak-report.md'}")


if __name__ == "__main__":
    main()
