"""Huge prompts (issue #33 §3): the planted crash is found, shrunk and replayed at seeds 1-3,
and the agent that refuses them with an error is clean but for info.

* ``huge-prompt-crash``: a systemPrompt of more than 4 MiB of text makes the reference agent
  exit: ``agent.crash`` (MUST), one step: ``new A`` with the 8 MiB or the near-limit prompt
  (the last covering example sends 1 MiB, 8 MiB and near-limit prompts at every seed).
* ``--variant refuses-huge``: the same prompts answered with -32602: ``payload.valid-rejected``
  at info (ACPFUZZ-HUGE-REFUSED-DEF), with the size refused; nothing MUST or SHOULD.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.fills import SIZES, marks_in
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

AGENT = [sys.executable, "-m", "acp_fuzz.reference_agent"]


def reference(*flags: str) -> TargetSpec:
    return TargetSpec.from_profile("reference", command=[*AGENT, *flags])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_crash_on_a_huge_prompt_is_found_shrunk_and_replayed(seed: int, tmp_path: Path,
                                                               no_orphans: object) -> None:
    result = run_campaign(reference("--bug", "huge-prompt-crash"), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed))
    assert result.reports, f"huge-prompt-crash not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert [f.severity for f in report.findings if f.oracle == "agent.crash"] == ["MUST"]
    (step,) = report.steps  # the minimal number of steps: the one request that kills it
    assert step["op"] == "new"
    sizes = [n for b in step["systemPrompt"]["content"] for n in marks_in(b["text"])]
    assert sizes and max(sizes) > 4 * 1024 * 1024, step
    assert report.cassette is not None
    # Written whole and small: the prompt is its mark in the step, the request and the
    # history (the cassette limit is 64 MiB).
    assert report.cassette.stat().st_size < 1024 * 1024
    assert read_cassette(report.cassette).events
    again = replay_cassette(report.cassette, target=[*AGENT, "--bug", "huge-prompt-crash"],
                            runs=2)
    assert again.verdict == "FAILED" and again.reproduced == 2, again.line()
    assert replay_cassette(report.cassette, target=AGENT).verdict == "FIXED"


def test_an_agent_that_refuses_huge_prompts_with_an_error_gets_info_only(
        tmp_path: Path, no_orphans: object) -> None:
    result = run_campaign(reference("--variant", "refuses-huge"), CampaignSettings(
        cassette_dir=tmp_path, seed=1, strict=True))
    assert result.reports == [], [r.findings for r in result.reports]
    refused = [f for f in result.info if f.oracle == "payload.valid-rejected"]
    assert refused and all(f.severity == "info" and f.rule == "ACPFUZZ-HUGE-REFUSED-DEF"
                           and f.evidence["size"] > 4 * 1024 * 1024 for f in refused)
    assert {f"valid:{c}" for c in SIZES} <= set(result.coverage)
