"""Finds and shrinks the two planted compaction bugs (issue #22 §1), in v1 and v2.

The reference agent under ``--variant compacting`` (profile ``reference-compacting``) compacts
on its ``/compact`` command, on a reply reporting its context nearly full, and on the
context-length error. Its two bugs:

* ``compaction-drops-prompt``: the prompt it rebuilds at compaction is its defaults only.
  ``prompt.lost`` (MUST), the evidence naming the compaction; at most four steps: new A (P);
  prompt A; compact A; prompt A (a compaction forced by overflow shows it in three: the turn
  the error interrupted is retried on the rebuilt prompt).
* ``compaction-keeps-stale``: a changed prompt held back until the compaction is still held
  back after it. ``prompt.change-ignored`` (SHOULD) in six steps: new A (P); prompt A;
  resume (or load) A (Q); compact A; prompt A; prompt A. The two turns after the compaction
  stay: with one, the change may still land (``IGNORED_AFTER``).

A correct compacting agent, and one that defers a change until the compaction, give nothing
that fails: ``test_compaction_search.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

#: bug -> (oracle, severity, the longest minimal reproduction, the rebuild it names).
BUGS = {
    "compaction-drops-prompt": ("prompt.lost", "MUST", 4),
    "compaction-keeps-stale": ("prompt.change-ignored", "SHOULD", 6),
}


def compacting(bug: str, protocol: str) -> TargetSpec:
    return TargetSpec.from_profile(
        "reference-compacting", protocol=protocol,
        command=[sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", bug])


@pytest.mark.parametrize("protocol", ["1", "2"])
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_compaction_bug_is_found_and_shrunk(bug: str, protocol: str, tmp_path: Path,
                                              no_orphans: object) -> None:
    oracle, severity, longest = BUGS[bug]
    result = run_campaign(compacting(bug, protocol),
                          CampaignSettings(cassette_dir=tmp_path, max_failures=1, seed=0))
    assert result.reports, f"{bug} not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    (f,) = [f for f in report.findings if f.oracle == oracle]
    assert f.severity == severity
    ops = [s["op"] for s in report.steps]
    assert "compact" in ops, report.steps
    assert len(report.steps) <= longest, report.steps
    if oracle == "prompt.lost":
        assert "compaction" in f.evidence.get("compaction", "") or f.step == ops.index("compact")
    else:
        assert f.evidence["rebuilt_by"].startswith("the compaction at step")
        assert len(f.evidence["turns_after"]) == 2
        # The shrunk reproduction keeps both turns after the compaction.
        assert ops[-2:] == ["prompt", "prompt"]
    assert result.exit_code == (1 if severity == "MUST" else 0)
