"""The summary line's example counts, apart (issue #38 §4): drawn examples (what
``--max-examples`` budgets), Hypothesis' shrinking runs, the draws it discarded (from its own
statistics), and beside them the campaign's shrink trials and confirmation runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign
from acp_fuzz.reporting.campaign import result_to_json
from acp_fuzz.reporting.text import summary_line

pytestmark = pytest.mark.integration

AGENTS = Path(__file__).resolve().parents[1] / "hostile_agents"


def test_without_a_failure_the_examples_are_the_drawn_ones_and_the_discarded_draws(
        tmp_path: Path, no_orphans: object) -> None:
    spec = TargetSpec.from_command([sys.executable, str(AGENTS / "late_commands.py")])
    r = run_campaign(spec, CampaignSettings(max_examples=15, seed=1, cover=False,
                                            cassette_dir=tmp_path))
    # Hypothesis ran its 15 valid examples; the rest of what ran were draws it discarded.
    assert r.drawn == 15 and r.discarded >= 1 and r.shrink_runs == 0
    assert r.examples_run == r.drawn + r.discarded
    assert (r.shrink_trials, r.confirm_runs) == (0, 0)
    assert summary_line(r, 1.0).text.startswith(
        f"{r.examples_run} examples (15 drawn, 0 shrinking, {r.discarded} discarded draw")


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_a_failure_adds_shrinking_runs_shrink_trials_and_confirm_runs(
        tmp_path: Path, no_orphans: object) -> None:
    # It exits at the first request that carries a systemPrompt: agent.crash.
    spec = TargetSpec.from_command([sys.executable, str(AGENTS / "later.py"), "exit"])
    r = run_campaign(spec, CampaignSettings(max_examples=15, seed=0, cover=False,
                                            cassette_dir=tmp_path))
    assert r.reports and r.shrink_runs > 0 and r.shrink_trials > 0
    assert r.confirm_runs == 3 * len(r.reports)
    assert r.examples_run == r.drawn + r.shrink_runs + r.discarded
    doc = result_to_json(r)
    assert doc["examples"] == {"drawn": r.drawn, "shrinking": r.shrink_runs,
                               "discarded": r.discarded, "shrink_trials": r.shrink_trials,
                               "confirm_runs": r.confirm_runs}
    text = summary_line(r, 1.0).text
    assert f"({r.drawn} drawn, {r.shrink_runs} shrinking, " in text
    assert f", {r.shrink_trials} shrink trials, {r.confirm_runs} confirm runs, " in text
