"""pi-acp's session behaviours that had no oracle (issue #38 §5), planted in the reference
agent and found by a default campaign at seeds 1-3:

- ``--bug cold-load-new-id``: after a session is loaded in a new process before its first
  turn, ``session/list`` shows another id in its place (``session.listed-other-id``, SHOULD,
  ACPFUZZ-LIST-IDS-SHOULD): found with ``-x``, confirmed 3/3, shrunk to 4 steps (new A;
  restart; load A; list). The search alone (``--no-cover``) found it at seeds 1-3 too, at
  examples 102, 31 and 38.
- ``--bug delete-keeps-live``: a turn of a deleted session is served
  (``session.deleted-usable``, info, ACPFUZZ-DELETE-LIVE-MAY): an info observation, never
  shrunk; its shortest steps are 3 (new A; delete A; prompt A), from the covering example of
  delete. (The search alone recorded it at seeds 1-3 in 4, 11 and 4 steps.)

The correct agent gives neither, though both are judged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from tests.quality.test_planted_bugs import Track, campaign, first_failure, reference

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

SEEDS = [1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_list_that_shows_another_id_after_a_cold_load_is_found_and_shrunk(
        seed: int, tmp_path: Path, no_orphans: Track) -> None:
    result = first_failure(reference("cold-load-new-id"), tmp_path, seed=seed)
    assert result.reports, f"not found in {result.examples_run} examples"
    (report,) = result.reports
    assert report.status == "failed" and report.reproduced == report.runs == 3
    (f,) = [f for f in report.findings if f.oracle == "session.listed-other-id"]
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-LIST-IDS-SHOULD")
    assert [s["op"] for s in report.steps] == ["new", "restart", "load", "list"]
    assert f.evidence["session_id"] not in f.evidence["listed"] and f.evidence["unknown"]
    assert result.exit_code == 0  # a SHOULD: it fails the run under --strict only
    assert report.cassette is not None
    assert read_cassette(report.cassette).header.meta["findings"][0]["oracle"] == \
        "session.listed-other-id"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_deleted_session_still_served_is_recorded(seed: int, tmp_path: Path,
                                                    no_orphans: Track) -> None:
    result = campaign(reference("delete-keeps-live"), tmp_path, seed=seed)
    assert result.reports == [], [f for r in result.reports for f in r.findings]
    (info,) = [i for i in result.info_reports if i.finding.oracle == "session.deleted-usable"]
    assert (info.finding.severity, info.finding.rule) == ("info", "ACPFUZZ-DELETE-LIVE-MAY")
    assert [(s["op"], s["session"]) for s in info.steps] == [
        ("new", "A"), ("delete", "A"), ("prompt", "A")]


def test_the_correct_agent_refuses_a_deleted_session_and_lists_a_cold_loaded_one(
        tmp_path: Path, no_orphans: Track) -> None:
    # The covering examples of delete and of a list after a cold load are the 5th and 6th.
    result = campaign(reference(), tmp_path, seed=1, max_examples=8)
    found = {f.oracle for f in result.info} | {o for r in result.reports for o in r.oracles}
    assert not found & {"session.deleted-usable", "session.listed-other-id"}, found
    judged = {o for o, _ in result.judged}
    assert {"session.deleted-usable", "session.listed-other-id"} <= judged, judged
    assert {"delete:prompt", "list:cold-load"} <= set(result.coverage)
