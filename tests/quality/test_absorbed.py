"""A rule that failed an example is never a pass (issue #31 §2), end to end against the
reference agent.

``--bug leak`` keeps one prompt for the whole process: session B's request carries A's text
(``prompt.leak``) and, in the same example, A's later request has lost its own
(``prompt.lost``). The campaign shrinks the example to the shorter of the two, the leak, and
reports it; ``prompt.lost`` then has no report of its own. It used to count as judged and
unfailed, so the matrix said **pass** for ``SP-AGENT-APPLY-NEW-MUST`` on an agent that broke
it. Such an oracle is now *absorbed* (:meth:`CampaignResult.absorbed`): the text report says so
and how to search for it alone, the JSON report keeps it, the JUnit case fails, the matrix
cell is **unconfirmed**, and the ``--oracle`` search the report suggests finds it on its own.

The same happened on a real agent: a matrix run of pi-acp 0.0.34 met
``session.listed-other-id`` once, shrank the example into its known ``turn.silent-failure``,
wrote no cassette and showed ``ACPFUZZ-LIST-IDS-SHOULD`` as pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.findings import CATALOG
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, run_campaign
from acp_fuzz.reporting.campaign import campaign_cases, result_from_json, result_to_json
from acp_fuzz.reporting.html import campaign_html
from acp_fuzz.reporting.matrix import column_from_report
from acp_fuzz.reporting.text import campaign_lines

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

LEAK = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                "--bug", "leak"])


@pytest.fixture(scope="module")
def leak(tmp_path_factory: pytest.TempPathFactory) -> CampaignResult:
    out = tmp_path_factory.mktemp("absorbed")
    return run_campaign(LEAK, CampaignSettings(seed=0, max_examples=40,
                                               cassette_dir=out / "cassettes"))


def test_the_lost_prompt_that_shrank_into_the_leak_is_absorbed(leak: CampaignResult) -> None:
    reported = {f.oracle for r in leak.reports for f in r.findings}
    assert "prompt.leak" in reported and "prompt.lost" not in reported
    absorbed = {f.oracle: f for f in leak.absorbed()}
    assert set(absorbed) == {"prompt.lost"}
    assert absorbed["prompt.lost"].rule == "SP-AGENT-APPLY-NEW-MUST"
    assert absorbed["prompt.lost"].severity == "MUST"
    # It was judged: without this change its rule had checks and no finding, a pass.
    assert any(o == "prompt.lost" for o, _ in leak.judged)


def test_the_matrix_cell_is_unconfirmed_never_pass(leak: CampaignResult) -> None:
    col = column_from_report(result_to_json(leak), profile="reference")
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert cell.status == "unconfirmed"
    assert "prompt.lost" in cell.text and "not confirmed on its own" in cell.text
    assert col.cells["ACPFUZZ-SESSION-ISOLATION-MUST"].status == "fail"


def test_the_reports_say_so(leak: CampaignResult) -> None:
    text = "\n".join(line.text for line in campaign_lines(leak))
    assert "UNCONFIRMED  prompt.lost (MUST, SP-AGENT-APPLY-NEW-MUST)" in text
    assert "--oracle prompt.lost" in text
    # The example it failed in is shown: the shortest, as steps a reader can follow.
    assert "    in an example of " in text and "session/new A" in text
    cases = {(c.classname, c.name): c for c in campaign_cases(leak)}
    lost = cases[("acp-fuzz.prompt.lost", "SP-AGENT-APPLY-NEW-MUST")]
    assert lost.outcome == "failure"
    page = campaign_html(leak)
    assert "Seen failing, not confirmed" in page and "--oracle prompt.lost" in page
    key = "<td><code>SP-AGENT-APPLY-NEW-MUST</code></td><td><code>prompt.lost</code></td>"
    row = page.split(key, 1)[1].split("</tr>", 1)[0]
    assert "<td>unconfirmed</td>" in row and "<td>pass</td>" not in row
    # The JSON report keeps it, and report merge reads it back.
    doc = result_to_json(leak)
    (entry,) = doc["absorbed"]
    assert entry["oracle"] == "prompt.lost" and entry["steps"] \
        and entry["steps"][0]["op"] == "new"
    # The leak's report says what its shrink passes did, and keeps it through report merge.
    (leak_report,) = leak.reports
    assert leak_report.shrink["to"] == len(leak_report.steps) <= leak_report.shrink["from"]
    again = result_from_json(doc)
    assert again.reports[0].shrink == leak_report.shrink
    assert [f.oracle for f in again.absorbed()] == ["prompt.lost"]
    assert again.absorbed()[0].evidence["example_steps"] == entry["steps"]


def test_the_suggested_search_finds_it_alone(tmp_path: Path) -> None:
    alone = run_campaign(LEAK, CampaignSettings(seed=0, max_examples=40,
                                                exclude_oracles=tuple(sorted(
                                                    set(CATALOG) - {"prompt.lost"})),
                                                cassette_dir=tmp_path / "cassettes"))
    reported = [f.oracle for r in alone.reports for f in r.findings]
    assert reported == ["prompt.lost"]
    assert alone.reports[0].status == "failed" and len(alone.reports[0].steps) == 3
    assert alone.absorbed() == []
