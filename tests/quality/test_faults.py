"""Finds and shrinks the two planted model-failure bugs (issue #32 §2) at seeds 1-3, and the
correct reference agent, which retries a failed model request with the same messages, is
clean.

* ``retry-drops-prompt``: the retry after a failed model request is rebuilt without the
  system message: ``prompt.lost`` (MUST) at the faulted turn; two steps: new A (P); a
  faulted turn of A.
* ``fault-ends-silently``: a failed model request ends the turn with ``end_turn`` and
  nothing said: ``turn.silent-failure`` (SHOULD), two steps: new A; a faulted turn of A.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

#: bug -> (oracle, severity).
BUGS = {
    "retry-drops-prompt": ("prompt.lost", "MUST"),
    "fault-ends-silently": ("turn.silent-failure", "SHOULD"),
}


def argv(*bugs: str) -> list[str]:
    out = [sys.executable, "-m", "acp_fuzz.reference_agent"]
    for bug in bugs:
        out += ["--bug", bug]
    return out


def reference(*bugs: str) -> TargetSpec:
    return TargetSpec.from_profile("reference", command=argv(*bugs))


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_model_failure_bug_is_found_shrunk_and_replayed(bug: str, seed: int, tmp_path: Path,
                                                          no_orphans: object) -> None:
    oracle, severity = BUGS[bug]
    result = run_campaign(reference(bug), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed, strict=severity == "SHOULD"))
    assert result.reports, f"{bug} not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    (f,) = [f for f in report.findings if f.oracle == oracle]
    assert f.severity == severity
    assert len(report.steps) == 2, report.steps
    assert report.steps[0]["op"] == "new" and "fault" in report.steps[1], report.steps
    assert report.cassette is not None
    again = replay_cassette(report.cassette, target=argv(bug), runs=2)
    assert again.verdict == "FAILED" and again.reproduced == 2, again.line()
    fixed = replay_cassette(report.cassette, target=argv())
    assert fixed.verdict == "FIXED", fixed.line()
    faulted = [x for _, x in read_cassette(report.cassette).history().model_exchanges()
               if x.fault is not None]
    assert faulted, "the cassette records the faulted exchange"
