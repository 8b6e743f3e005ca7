"""End to end: one campaign reports every distinct bug, each shrunk, confirmed and recorded;
``--exclude-oracle`` skips a known one, ``-x`` stops at the first, and a bug that corrupts a
session other than the one acted on (a fork that rewrites its source) is found.

Against the reference agent with planted bugs (``--bug`` repeated plants several). Campaign
sizes are small (the CI budget); the long measurements are in ``benchmarks/``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, run_campaign, steps_of
from tests.integration._support import run_cli

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

# Two independent bugs with different minimal reproductions: a prompt re-sent on load or
# resume is doubled (prompt.duplicated, new + load + prompt), and a fork runs on the defaults
# (prompt.lost, new + fork + prompt the fork). (user-turn would hide the other: every example
# with a prompt and a turn fails at its first turn.)
TWO_BUGS = ("duplicate-on-resume", "fork-drops-prompt")


def agent(*bugs: str) -> list[str]:
    return [sys.executable, "-m", "acp_fuzz.reference_agent",
            *(a for b in bugs for a in ("--bug", b))]


def campaign(tmp_path: Path, *bugs: str, **kw: object) -> CampaignResult:
    cfg = CampaignSettings(cassette_dir=tmp_path / "cassettes", **kw)  # type: ignore[arg-type]
    return run_campaign(TargetSpec.from_command(agent(*bugs)), cfg)


def report_of(result: CampaignResult, oracle: str) -> list[list[dict[str, object]]]:
    return [r.steps for r in result.reports if oracle in r.oracles]


def test_two_independent_bugs_are_both_reported_each_with_its_minimal_cassette(
        tmp_path: Path, no_orphans: object) -> None:
    result = campaign(tmp_path, *TWO_BUGS, max_examples=60)
    found = {o for r in result.reports for o in r.oracles}
    assert {"prompt.duplicated", "prompt.lost"} <= found, [r.oracles for r in result.reports]
    # Each at its own minimum: 3 steps each.
    assert min(len(s) for s in report_of(result, "prompt.duplicated")) == 3
    lost = report_of(result, "prompt.lost")
    assert min(len(s) for s in lost) == 3
    assert any([s["op"] for s in steps] == ["new", "fork", "prompt"] for steps in lost)
    cassettes = [r.cassette for r in result.reports]
    assert all(c is not None and c.is_file() for c in cassettes)
    assert len(set(cassettes)) == len(cassettes), "one cassette per distinct failure"
    for r in result.reports:
        assert r.status == "failed" and r.rate == "3/3", (r.oracles, r.rate)
        assert r.cassette is not None and steps_of(read_cassette(r.cassette).events) == r.steps
    # No two reports are the same failure: oracle and shape of the minimal steps differ.
    keys = [(tuple(r.oracles), tuple(s["op"] for s in r.steps)) for r in result.reports]
    assert len(set(keys)) <= len(keys)
    assert result.exit_code == 1
    # The search went on after the first failure: far more than one example ran.
    assert result.examples_run >= 60


def test_a_fork_that_corrupts_its_source_is_found(tmp_path: Path, no_orphans: object) -> None:
    result = campaign(tmp_path, "fork-corrupts-source", max_failures=1)
    assert result.reports, f"not found in {result.examples_run} examples"
    (report,) = result.reports
    assert report.status == "failed"
    ops = [(s["op"], s["session"]) for s in report.steps]
    # new A (P or none); fork A -> B (Q); prompt A: the turn that shows it is on the source.
    assert ops == [("new", "A"), ("fork", "A"), ("prompt", "A")], report.steps
    assert report.steps[1].get("systemPrompt") is not None
    assert report.steps[1]["systemPrompt"] != report.steps[0].get("systemPrompt")
    assert result.exit_code == 1


def test_exclude_oracle_skips_a_known_bug_and_finds_the_other(tmp_path: Path,
                                                              no_orphans: object) -> None:
    result = campaign(tmp_path, *TWO_BUGS, max_examples=60,
                      exclude_oracles=("prompt.duplicated",))
    oracles = {f.oracle for r in result.reports for f in r.findings}
    assert "prompt.duplicated" not in oracles
    assert "prompt.lost" in {o for r in result.reports for o in r.oracles}


def test_exitfirst_stops_at_the_first_failure(tmp_path: Path, no_orphans: object) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(tmp_path, "target", "-x", "--strict", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{report}", "--", *agent(*TWO_BUGS))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(report.read_text())
    assert len({f["cassette"] for f in data["findings"]}) == 1, data["findings"]
    assert len(list((tmp_path / "c").iterdir())) == 1


def test_an_unknown_oracle_to_exclude_is_a_one_line_usage_error(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--exclude-oracle", "prompt.nope", "--",
                   *agent("user-turn"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "prompt.nope" in lines[0], proc.stderr
