"""Deadlines learned from the agent (acp_fuzz/engine/campaign/deadlines.py), end to end with
run_campaign.

A hang is still found, confirmed with the full timeout once, shrunk and confirmed with the
learned (shorter) deadline; a slow but correct agent is never reported as hung. No wall-clock
assertion: the deadlines and the number of full-timeout waits are what the campaign recorded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.deadlines import FLOOR
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = pytest.mark.integration

LATER = Path(__file__).resolve().parents[1] / "hostile_agents" / "later.py"
#: --timeout for these campaigns: well above the learned deadline of a fast agent (FLOOR).
CEILING = 6.0


def _campaign(tmp_path: Path, *mode: str) -> tuple[object, Path]:
    spec = TargetSpec.from_command([sys.executable, str(LATER), *mode],
                                   request_timeout=CEILING)
    cfg = CampaignSettings(max_examples=3, max_steps=4, cassette_dir=tmp_path / "c")
    return run_campaign(spec, cfg), tmp_path / "c"


@pytest.mark.slow
def test_a_hang_is_confirmed_once_with_the_full_timeout_then_shrunk_on_the_learned_deadline(
        tmp_path: Path, no_orphans: object) -> None:
    result, _ = _campaign(tmp_path, "hang")
    (report,) = result.reports  # type: ignore[attr-defined]
    assert report.oracles == ["agent.hang"] and report.status == "failed"
    learned = result.deadlines  # type: ignore[attr-defined]
    # One wait to the full timeout in the whole campaign: the first sight of the hang.
    assert learned["full_waits"] == 1 and learned["hang_confirmed"] == ["session/new"]
    assert learned["ceiling"] == CEILING and learned["deadlines"]["session/new"] == FLOOR
    cassette = read_cassette(report.cassette)
    assert cassette.header.settings["deadlines"]["deadlines"]["session/new"] == FLOOR
    # The cassette's run (a shrink trial) gave up on the learned deadline, not the timeout.
    waits = [e.data["waited"] for e in cassette.events
             if e.kind == "verdict" and e.data.get("outcome") == "timeout"]
    assert waits and all(w["deadline"] == FLOOR and not w.get("full_wait") for w in waits)


@pytest.mark.slow
def test_a_slow_but_correct_agent_is_not_called_hung(tmp_path: Path,
                                                     no_orphans: object) -> None:
    # Every request with a systemPrompt is answered after 3 s: past the learned deadline
    # (FLOOR, from the fast calibration), within --timeout.
    result, cassettes = _campaign(tmp_path, "slow", "3")
    assert result.reports == []  # type: ignore[attr-defined]
    learned = result.deadlines  # type: ignore[attr-defined]
    assert learned["hang_confirmed"] == [] and learned["full_waits"] >= 1
    # The deadline grew with what the agent showed it needs.
    assert learned["slowest"]["session/new"] >= 3.0
    assert learned["deadlines"]["session/new"] == CEILING
    assert not list(cassettes.glob("*.cassette"))
