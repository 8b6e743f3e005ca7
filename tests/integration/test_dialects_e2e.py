"""The legacy dialects end to end, against the reference agent speaking each one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.oracles import evaluate
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = pytest.mark.integration
DIALECTS = ["claude-meta", "pi-meta", "goose"]
TEXT = "Answer as a patient reviewer of pull requests."


def ref(dialect: str, *bug: str) -> TargetSpec:
    return TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                    "--dialect", dialect, *bug])


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("mode", ["append", "override"])
def test_detected_and_applied(dialect: str, mode: str, no_orphans: object) -> None:
    sp = {"mode": mode, "content": [{"type": "text", "text": TEXT}]}
    with Run(ref(dialect)) as run:
        run.initialize()
        assert run.dialect == dialect  # auto-detected from initialize
        assert run.execute({"op": "new", "session": "A", "systemPrompt": sp}).outcome == "ok"
        run.execute({"op": "prompt", "session": "A"})
        # Legacy dialects carry no prompt on load: the runner never claims to re-send one.
        run.execute({"op": "load", "session": "A", "systemPrompt": sp})
        run.execute({"op": "prompt", "session": "A"})
        sent = [m for _, m in run.history.acp_messages("send") if isinstance(m, dict)]
        assert not any("systemPrompt" in (m.get("params") or {}) for m in sent)
        (_, first), (_, second) = run.history.model_exchanges()
        assert TEXT in "\n".join(first.texts("system"))
        assert TEXT in "\n".join(second.texts("system"))  # kept across the load
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_leak_is_found_through_each_dialect(dialect: str, tmp_path: Path,
                                              no_orphans: object) -> None:
    # -x: the test reads the first report only (without it the campaign searched on for other
    # bugs through all 100 examples; docs/performance.md, "The test suite in CI").
    result = run_campaign(ref(dialect, "--bug", "leak"), CampaignSettings(
        shrink_examples=10, cassette_dir=tmp_path, max_failures=1))
    assert result.reports, f"leak not found through {dialect}"
    assert "prompt.leak" in result.reports[0].oracles
    assert len(result.reports[0].steps) == 3


def test_a_pi_meta_prompt_to_an_agent_without_its_capability_is_a_probe(tmp_path: Path) -> None:
    """``--dialect pi-meta`` on an agent that does not advertise pi's field (pi-acp's npm
    releases): a warning says the prompt is not honoured, and nothing is judged as lost."""
    report = tmp_path / "r.json"
    proc = run_cli(tmp_path, "target", "--dialect", "pi-meta", "-n", "8",
                   "--cassette-dir", str(tmp_path / "c"), "--report", f"json:{report}",
                   "--", sys.executable, "-m", "acp_fuzz.reference_agent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: --dialect pi-meta: the agent does not advertise " \
           "agentCapabilities._meta.piAcp.systemPrompt" in proc.stderr
    assert json.loads(report.read_text())["findings"] == []
