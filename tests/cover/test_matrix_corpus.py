"""The matrix's corpus (acp_fuzz.reporting.matrix): the replays of an agent's reviewed
cassettes merged into its column. A cassette that still fails makes its rule fail even where
the campaign passed it, each cell says where its verdict came from, a fixed or skipped
cassette is a note, and a document from before the corpus renders as it did."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path
from typing import Any

from acp_fuzz.core.findings import Finding
from acp_fuzz.engine.campaign.replay import ReplayResult
from acp_fuzz.reporting.matrix import (
    cells_to_json,
    column_from_report,
    column_not_run,
    corpus_entry,
    corpus_skip,
    matrix_html,
    matrix_markdown,
    matrix_preamble,
)

ALL = {"system_prompt": True, "override": True, "load": True, "resume": True, "fork": True}
LOST = {"oracle": "prompt.lost", "severity": "MUST", "rule": "SP-AGENT-APPLY-NEW-MUST"}
CHANGE = {"oracle": "prompt.change-ignored", "severity": "SHOULD",
          "rule": "SP-LIFECYCLE-CHANGE-SHOULD"}
REAL = "cassettes/real/claude/prompt.lost.cassette"


def doc(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "agent": {"protocolVersion": 1, "agentInfo": {"name": "claude", "version": "0.101.0"}},
        "examples_run": 57, "steps_run": 711, "seed": 0, "capabilities": ALL,
        "findings": [], "info": [],
        "judged": [{"oracle": "prompt.lost", "rule": "SP-AGENT-APPLY-NEW-MUST", "checks": 116},
                   {"oracle": "prompt.change-ignored", "rule": "SP-LIFECYCLE-CHANGE-SHOULD",
                    "checks": 9}]}
    base.update(kw)
    return base


def replayed(verdict: str, cassette: str = REAL, *, failing: Any = (LOST,),
             recorded: Any = (LOST,), reproduced: int = 3, runs: int = 3,
             error: str | None = None) -> dict[str, Any]:
    return {"cassette": cassette, "verdict": verdict, "runs": runs, "reproduced": reproduced,
            "error": error, "failing": list(failing), "recorded": list(recorded)}


def corpus(*entries: dict[str, Any], skipped: Any = (), **kw: Any) -> dict[str, Any]:
    return {"dir": "cassettes/real/claude", "runs": 3, "replayed": list(entries),
            "skipped": list(skipped), **kw}


def table_line(md: str, rule: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| `{rule}`"))


def test_a_corpus_failure_fails_a_rule_the_campaign_passed_and_links_its_cassette(
        tmp_path: Path) -> None:
    alone = column_from_report(doc(), profile="claude")
    assert alone.cells["SP-AGENT-APPLY-NEW-MUST"].status == "pass"  # what the campaign says

    col = column_from_report(doc(), profile="claude", corpus=corpus(replayed("FAILED")))
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert (cell.status, cell.text, cell.source) == ("fail", "MUST: prompt.lost", "corpus")
    assert cell.cassette is None and cell.corpus == (REAL,)
    # The rules the corpus does not speak about keep the campaign's verdict.
    other = col.cells["SP-LIFECYCLE-CHANGE-SHOULD"]
    assert (other.status, other.source) == ("pass", "campaign")

    md = matrix_markdown([col], base=Path("docs"))
    assert table_line(md, "SP-AGENT-APPLY-NEW-MUST").endswith(
        "| **FAIL**: MUST: prompt.lost ([corpus cassette]"
        "(../cassettes/real/claude/prompt.lost.cassette)) (corpus) |")
    assert "(corpus)" not in table_line(md, "SP-LIFECYCLE-CHANGE-SHOULD")
    assert "1 fail, 0 flaky" in md
    assert ("\n  - corpus `cassettes/real/claude`: 1 cassette replayed against the profile's "
            "agent (3 runs each): 1 failed.\n") in md
    assert ("\n  - failed `cassettes/real/claude/prompt.lost.cassette`: MUST prompt.lost "
            "(SP-AGENT-APPLY-NEW-MUST) (3/3 runs).\n") in md
    page = matrix_html([col], base=Path("docs"))
    assert ('FAIL: MUST: prompt.lost (<a href="../cassettes/real/claude/prompt.lost.cassette">'
            "corpus cassette</a>) <small>(corpus)</small>") in page
    assert cells_to_json(col)["SP-AGENT-APPLY-NEW-MUST"] == {
        "status": "fail", "text": "MUST: prompt.lost", "cassette": None, "corpus": [REAL],
        "source": "corpus"}


def test_a_failure_in_both_says_so_and_links_both_cassettes() -> None:
    campaign = {"oracle": "prompt.change-ignored", "severity": "SHOULD",
                "rule": "SP-LIFECYCLE-CHANGE-SHOULD", "status": "flaky",
                "cassette": "cassettes/matrix/claude/prompt.change-ignored-seed0.cassette"}
    col = column_from_report(
        doc(findings=[campaign]), profile="claude",
        corpus=corpus(replayed("FAILED", "cassettes/real/claude/change.cassette",
                               failing=[CHANGE, LOST], recorded=[CHANGE])))
    both = col.cells["SP-LIFECYCLE-CHANGE-SHOULD"]
    # The campaign's flaky finding and the corpus's reproduced one: a failure.
    assert (both.status, both.source) == ("fail", "campaign+corpus")
    assert both.cassette == campaign["cassette"]
    assert both.corpus == ("cassettes/real/claude/change.cassette",)
    line = table_line(matrix_markdown([col]), "SP-LIFECYCLE-CHANGE-SHOULD")
    assert line.endswith("([cassette](cassettes/matrix/claude/prompt.change-ignored-seed0"
                         ".cassette), [corpus cassette](cassettes/real/claude/change.cassette))"
                         " (campaign+corpus) |")
    # One cassette may fail two rules: each gets the link.
    assert col.cells["SP-AGENT-APPLY-NEW-MUST"].corpus == ("cassettes/real/claude/change.cassette",)
    # MUST outranks SHOULD and the oracles are all named.
    merged = column_from_report(
        doc(findings=[{**campaign, "rule": "SP-AGENT-APPLY-NEW-MUST", "status": "failed"}]),
        profile="claude", corpus=corpus(replayed("FAILED")))
    cell = merged.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert cell.text == "MUST: prompt.change-ignored, prompt.lost"
    assert cell.source == "campaign+corpus"


def test_a_flaky_corpus_cassette_is_a_flaky_cell_unless_something_reproduced() -> None:
    flaky = corpus(replayed("FLAKY", reproduced=1))
    col = column_from_report(doc(), profile="claude", corpus=flaky)
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert (cell.status, cell.source) == ("flaky", "corpus")
    md = matrix_markdown([col])
    assert "**flaky**: MUST: prompt.lost" in table_line(md, "SP-AGENT-APPLY-NEW-MUST")
    assert "  - flaky `cassettes/real/claude/prompt.lost.cassette`" in md and "1/3 runs" in md
    campaign_failed = {**LOST, "status": "failed", "cassette": "c.cassette"}
    worse = column_from_report(doc(findings=[campaign_failed]), profile="claude", corpus=flaky)
    assert worse.cells["SP-AGENT-APPLY-NEW-MUST"].status == "fail"


def test_fixed_passed_error_and_skipped_cassettes_fail_nothing_and_are_listed() -> None:
    col = column_from_report(doc(), profile="claude", corpus=corpus(
        replayed("FIXED", "a.cassette", failing=[], reproduced=0),
        replayed("PASSED", "b.cassette", failing=[], recorded=[], reproduced=0),
        replayed("ERROR", "c.cassette", failing=[], runs=0, reproduced=0,
                 error="cannot read the cassette"),
        skipped=[{"cassette": "d.cassette",
                  "why": "recorded from version 0.100.0; the profile pins 0.101.0"}]))
    # The cassette that could not be replayed takes its rule's cell: not pass (issue #31 §2).
    error = col.cells.pop("SP-AGENT-APPLY-NEW-MUST")
    assert (error.status, error.source, error.corpus) == ("error", "corpus", ("c.cassette",))
    assert error.text == "corpus replay failed: cannot read the cassette"
    assert {c.status for c in col.cells.values()} <= {"pass", "untested", "info", "na"}
    assert {c.source for c in col.cells.values()} == {"campaign"}
    assert [(n.what, n.cassette) for n in col.corpus] == [
        ("corpus", "cassettes/real/claude"), ("fixed", "a.cassette"), ("passed", "b.cassette"),
        ("error", "c.cassette"), ("skipped", "d.cassette")]
    head, fixed, passed, error, skipped = (n.text for n in col.corpus)
    assert head == ("3 cassettes replayed against the profile's agent (3 runs each): 1 fixed, "
                    "1 passed, 1 not replayed; 1 skipped")
    assert fixed == "no longer fails: MUST prompt.lost (SP-AGENT-APPLY-NEW-MUST) (0/3 runs)"
    assert passed == "recorded no failure and shows none (0/3 runs)"
    assert error == "not replayed: cannot read the cassette"
    assert skipped == "recorded from version 0.100.0; the profile pins 0.101.0"
    page = matrix_html([col])
    assert "<li>fixed <code>a.cassette</code>: no longer fails" in page
    assert "<li>skipped <code>d.cassette</code>: recorded from version 0.100.0" in page


def test_an_empty_interrupted_or_unreplayed_corpus_says_so() -> None:
    empty = column_from_report(doc(), profile="claude", corpus=corpus())
    assert [n.text for n in empty.corpus] == ["no cassette"]
    stopped = column_from_report(doc(), profile="claude",
                                 corpus=corpus(replayed("FAILED"), interrupted=True))
    assert stopped.corpus[0].text.endswith("1 failed; interrupted")
    one_run = column_from_report(doc(), profile="claude", corpus={
        **corpus(replayed("FIXED", failing=[], runs=1, reproduced=0)), "runs": 1})
    assert "(1 run each)" in one_run.corpus[0].text
    gone = column_not_run("claude", "not installed",
                          corpus={"dir": "cassettes/real/claude", "not_replayed": "not run"})
    assert [(n.what, n.text) for n in gone.corpus] == [("corpus", "not replayed: not run")]
    assert {c.status for c in gone.cells.values()} == {"untested"}


def test_a_column_not_run_still_fails_the_rules_its_corpus_fails() -> None:
    col = column_not_run("claude", "calibration failed", corpus=corpus(replayed("FAILED")))
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert (cell.status, cell.source, cell.corpus) == ("fail", "corpus", (REAL,))
    assert col.cells["SES-AGENT-BASELINE-MUST"].text == "not run: calibration failed"


def test_a_failing_replay_that_names_no_failure_falls_back_on_what_was_recorded() -> None:
    # A hand-made document (or a replay whose new findings are info only): the cassette is
    # still a failure of the rules it recorded, never silently dropped.
    col = column_from_report(doc(), profile="claude",
                             corpus=corpus(replayed("FAILED", failing=[])))
    assert col.cells["SP-AGENT-APPLY-NEW-MUST"].status == "fail"
    # Info findings and probes are never a cell.
    probe = {"oracle": "payload.probe", "severity": "MUST", "rule": "SP-AGENT-APPEND-MUST"}
    info = {"oracle": "lifecycle.omitted-fallback", "severity": "info",
            "rule": "SP-LIFECYCLE-OMIT-MAY"}
    none = column_from_report(doc(), profile="claude",
                              corpus=corpus(replayed("FAILED", failing=[probe, info])))
    assert {c.status for c in none.cells.values()} <= {"pass", "untested", "na"}
    assert none.corpus[1].text == "no finding named (3/3 runs)"


def test_a_document_from_before_the_corpus_renders_as_it_did() -> None:
    old = column_from_report(doc(), profile="claude")
    assert old.corpus == ()
    assert {c.source for c in old.cells.values()} == {"campaign"}
    md = matrix_markdown([old])
    assert "(corpus)" not in md and "(campaign+corpus)" not in md and "\n  - " not in md
    assert md == matrix_markdown([column_from_report(doc(), profile="claude", corpus=None)])
    assert "<ul><li>" in matrix_html([old]) and "<li><ul>" not in matrix_html([old])
    # Its preamble has no corpus paragraph (its others: made by, the cells, the facts, the
    # sample); with a corpus root, one names the folder.
    before = matrix_preamble("acp-fuzz matrix", version="0.1.0")
    now = matrix_preamble("acp-fuzz matrix", version="0.1.0", corpus_root="cassettes/real/")
    assert len(before) == 4 and len(now) == 5 and now[:2] + now[3:] == before
    assert "`cassettes/real/<profile>/`" in now[2] and "**FAIL**" in now[2]
    plain = matrix_preamble("acp-fuzz matrix", version="0.1.0", corpus_root="cassettes/real",
                            interrupted=True, plain=True)
    assert plain[0] == ("Made by acp-fuzz matrix with acp-fuzz 0.1.0 (interrupted: agents not "
                        "run are missing).")
    assert all("`" not in p and "**" not in p for p in plain)
    assert "cassettes/real/<profile>/ recorded from the same agent version, in" in plain[2]


def test_a_corpus_cassette_counts_only_from_the_same_agent_version() -> None:
    def init(version: Any = "0.101.0", name: str = "claude", proto: int = 1) -> dict[str, Any]:
        key = "info" if proto >= 2 else "agentInfo"
        return {"protocolVersion": proto, key: {"name": name, "version": version}}

    assert corpus_skip(init(), pinned="0.101.0", reported="0.101.0", agent="claude",
                       protocol=1) is None
    assert corpus_skip(init("0.100.0"), pinned="0.101.0") == \
        "recorded from version 0.100.0; the profile pins 0.101.0"
    assert corpus_skip(init("0.2.0"), reported="0.1.0") == \
        "recorded from version 0.2.0; the agent reports 0.1.0"
    # An agent that numbers itself apart from its package: either version is this one.
    assert corpus_skip(init("7.0"), pinned="0.101.0", reported="7.0") is None
    assert corpus_skip(init("6.0"), pinned="0.101.0", reported="7.0") == \
        "recorded from version 6.0; the profile pins 0.101.0 and the agent reports 7.0"
    assert corpus_skip(None, pinned="0.101.0", reported="0.101.0") == \
        "records no agent version; the profile pins 0.101.0"
    assert corpus_skip(init(name="codex"), pinned="0.101.0", agent="claude") == \
        "recorded from agent codex; this one is claude"
    assert corpus_skip(init(proto=2), pinned="0.101.0", protocol=1) == \
        "recorded in ACP v2; this matrix speaks v1"
    # Nothing known to compare with: the cassette counts.
    assert corpus_skip(None) is None


def test_a_replay_result_becomes_a_corpus_entry() -> None:
    lost = Finding("prompt.lost", "MUST", "SP-AGENT-APPLY-NEW-MUST", "gone")
    info = Finding("lifecycle.omitted-fallback", "info", "SP-LIFECYCLE-OMIT-MAY", "kept")
    other = Finding("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", "not the verdict's")
    failed = ReplayResult(Path(REAL), "FLAKY", oracles=["prompt.lost"], runs=3, reproduced=2,
                          findings=[[lost, info, other], [lost], []])
    recorded = [{**LOST, "message": "x"}, {"oracle": "i", "severity": "info", "rule": "R"}, 3]
    assert corpus_entry(failed, recorded) == {  # type: ignore[arg-type]
        "cassette": REAL, "verdict": "FLAKY", "runs": 3, "reproduced": 2, "error": None,
        "failing": [LOST], "recorded": [LOST]}
    fixed = corpus_entry(ReplayResult(Path(REAL), "FIXED", oracles=["prompt.lost"], runs=3,
                                      findings=[[info], [], []]), [LOST])
    assert fixed["failing"] == [] and fixed["recorded"] == [LOST]
    broken = corpus_entry(ReplayResult(Path(REAL), "ERROR", error="agent did not start"))
    assert (broken["verdict"], broken["error"], broken["recorded"]) == (
        "ERROR", "agent did not start", [])


class _Hrefs(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v or "" for k, v in attrs if k == "href"]


def test_a_hostile_corpus_path_stays_text_in_both_formats() -> None:
    evil = "javascript:alert(1)|`\n# x<script>.cassette"
    col = column_from_report(doc(), profile="claude", corpus=corpus(
        replayed("FAILED", evil), skipped=[{"cassette": evil, "why": "<b>why</b>\n# h"}]))
    md = matrix_markdown([col])
    header = table_line(md, "SP-AGENT-APPLY-NEW-MUST")
    assert header.count(" | ") == 2, header  # the path did not split the row
    # Outside code spans (where it is literal text), no markup of the stranger's survives.
    prose = re.sub(r"(`+).*?\1", "", md)
    assert "\n# " not in md and "<script>" not in prose and "<b>" not in prose
    parser = _Hrefs()
    page = matrix_html([col])
    parser.feed(page)
    assert parser.hrefs and all(":" not in h for h in parser.hrefs)  # a relative path only
    assert "<script>" not in page and "<b>" not in page


def test_a_kept_cassette_that_cannot_be_replayed_errors_the_kept_rule() -> None:
    """A cassette whose header could not be read names no recorded rule: the kept finding's
    rule (kept.toml) is the cell that cannot be passed."""
    kept = {"finding": "claude-agent-acp 5", "oracle": "prompt.lost",
            "rule": "SP-AGENT-APPLY-NEW-MUST", "clock": None}
    col = column_from_report(doc(), profile="claude", corpus=corpus(
        {**replayed("ERROR", recorded=[], failing=[], error="the agent did not start"),
         "kept": kept}))
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert cell.status == "error" and "the agent did not start" in cell.text
    md = matrix_markdown([col])
    assert "**ERROR**: corpus replay failed" in table_line(md, "SP-AGENT-APPLY-NEW-MUST")
    assert "error `cassettes/real/claude/prompt.lost.cassette`: kept finding claude-agent-acp " \
           "5: not replayed" in md
    assert "1 error, " in md


def test_a_clock_dependent_cassette_that_replays_fixed_says_so() -> None:
    kept = {"finding": "gemini-cli 6", "oracle": "prompt.lost", "rule": "SP-AGENT-APPLY-NEW-MUST",
            "clock": "a load that crosses a minute boundary finds the session"}
    col = column_from_report(doc(), profile="claude", corpus=corpus(
        {**replayed("FIXED", failing=[], reproduced=0), "kept": kept}))
    cell = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert cell.status == "pass"
    assert "a clock-dependent corpus cassette replayed FIXED (a load that crosses" in cell.text
    fixed = next(n for n in col.corpus if n.what == "fixed")
    assert "FIXED may be the clock" in fixed.text


def test_a_kept_finding_absent_from_this_version_is_listed() -> None:
    col = column_from_report(doc(), profile="gemini", corpus=corpus(kept_absent=[
        {"finding": "gemini-cli 6", "oracle": "session.reattach-failed",
         "rule": "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
         "why": "gemini-cli 0.61.0 answers protocolVersion 1 to an offer of 2"}]))
    assert [n.text for n in col.corpus if n.what == "kept"] == [
        "gemini-cli 6 (session.reattach-failed, ACPFUZZ-REATTACH-ADVERTISED-SHOULD): no cassette "
        "in this ACP version: gemini-cli 0.61.0 answers protocolVersion 1 to an offer of 2"]
