"""The plain-text campaign report shared by ``acp-fuzz target`` and the pytest plugin."""

from __future__ import annotations

from pathlib import Path

from acp_fuzz.core.findings import Finding
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, FindingReport
from acp_fuzz.reporting.text import campaign_lines


def _result(*reports: FindingReport) -> CampaignResult:
    r = CampaignResult(agent={}, initialize={}, caps=Capabilities(), settings=CampaignSettings())
    r.reports = list(reports)
    return r


def test_a_failure_reads_as_label_findings_steps_and_replay() -> None:
    hostile = "lost \x1b[31m\u202e here"
    rep = FindingReport(
        status="flaky", runs=3, reproduced=2,
        findings=[Finding("prompt.lost", "MUST", "SP-AGENT-APPLY-NEW-MUST", hostile, step=1,
                          evidence={"expected": "P"})],
        steps=[{"op": "new", "session": "A"}, {"op": "prompt", "session": "A"}],
        requests=[{"method": "session/new"}], cassette=Path("c/prompt.lost.cassette"))
    lines = campaign_lines(_result(rep), lambda c: f"{c} -- ./agent")
    texts = [line.text for line in lines]
    assert texts[1] == "FLAKY (2/3 re-runs): minimal reproduction in 2 step(s), reproduced 2/3"
    assert (lines[1].style, lines[1].lead) == ("bold red", len("FLAKY (2/3 re-runs)"))
    finding = next(line for line in lines if "prompt.lost" in line.text)
    assert finding.style == "red" and "\x1b" not in finding.text and "\\x1b" in finding.text
    assert "\u202e" not in finding.text
    assert "  1. session/new A (systemPrompt omitted)" in texts
    assert texts[-1] == "replay:   acp-fuzz replay c/prompt.lost.cassette -- ./agent"


def test_a_should_failure_is_red_only_under_strict() -> None:
    """A SHOULD finding is reported, shrunk and confirmed, but fails the run only under
    --strict: its head is not painted as a failure of the run without it."""
    rep = FindingReport(
        status="failed", runs=3, reproduced=3,
        findings=[Finding("prompt.duplicated", "SHOULD", "ACPFUZZ-PROMPT-ONCE-SHOULD", "twice")],
        steps=[{"op": "new", "session": "A"}], requests=[], cassette=Path("c/x.cassette"))
    lenient = campaign_lines(_result(rep))
    assert (lenient[1].text, lenient[1].style) == (
        "FAILED: minimal reproduction in 1 step(s), reproduced 3/3", "bold yellow")
    strict = _result(rep)
    strict.settings = CampaignSettings(strict=True)
    assert campaign_lines(strict)[1].style == "bold red"


def test_an_agent_and_a_client_failure_are_printed_by_the_same_code() -> None:
    """The two sides differ only in what they found and what they show of its
    reproduction: the head, the findings and the cassette lines are one function's."""
    from acp_fuzz.reporting.text import failure_lines

    f = Finding("client.prompt-empty", "MUST", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT", "empty", step=1)
    lines = failure_lines("failed", "3/3", "client.prompt-empty (MUST, R)", [f],
                          [], None, "", failing=True)
    assert [line.text for line in lines][:2] == [
        "", "FAILED: client.prompt-empty (MUST, R), reproduced 3/3"]
    assert lines[-1].text.startswith("cassette: not written")


def test_no_failure_says_so_in_green() -> None:
    (line,) = campaign_lines(_result())
    assert (line.text, line.style) == ("no failing findings", "green")


def test_the_covering_line_counts_the_examples_past_the_plan_apart() -> None:
    """A failure that cut a covering example short gets one more built for what it left
    unsent: ``40 of 39`` read as a miscount, so the line says where the extra one came from."""
    from acp_fuzz.cli.target import _covering_line
    from acp_fuzz.core.payloads import Capabilities
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings

    r = CampaignResult(agent={}, initialize={}, caps=Capabilities(), settings=CampaignSettings())
    r.covering_examples, r.covering_seconds = 40, 9.04
    assert _covering_line(r, 39) == ("covering examples: 40 (39 planned, 1 more for what a "
                                     "failure cut short) in 9.0 s")
    r.covering_examples = 39
    assert _covering_line(r, 39) == "covering examples: 39 of 39 in 9.0 s"
    assert _covering_line(r, 0) == "covering examples: 39 in 9.0 s"
