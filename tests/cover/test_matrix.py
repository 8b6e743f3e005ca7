"""The conformance matrix's cells and its two renderings (acp_fuzz.reporting.matrix), from
campaign JSON documents built by hand: each cell status, each reason for "not tested", links
relative to where the table is written, and a hostile agent's name escaped in both formats."""

from __future__ import annotations

import html.parser
from pathlib import Path
from typing import Any

from acp_fuzz.reporting.matrix import (
    ROWS,
    column_from_report,
    column_not_run,
    matrix_html,
    matrix_markdown,
)

ALL = {"system_prompt": True, "override": True, "load": True, "resume": True, "fork": True,
       "close": True, "list": True, "delete": False}


def doc(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "agent": {"protocolVersion": 1, "agentInfo": {"name": "demo", "version": "1.2"}},
        "examples_run": 7, "steps_run": 40, "seed": 3, "capabilities": ALL,
        "findings": [], "info": [], "judged": [], "out_of_time": False, "interrupted": False}
    base.update(kw)
    return base


def judged(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"oracle": o, "rule": r, "checks": 2} for o, r in pairs]


def test_a_finding_fails_its_rule_with_its_cassette_and_checks_make_a_pass() -> None:
    col = column_from_report(doc(
        findings=[{"oracle": "prompt.leak", "severity": "MUST",
                   "rule": "ACPFUZZ-SESSION-ISOLATION-MUST", "status": "failed",
                   "cassette": "cassettes/matrix/demo/prompt.leak.cassette"}],
        judged=judged(("prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST"),
                      ("prompt.lost", "SP-AGENT-APPLY-NEW-MUST"),
                      ("prompt.altered", "SP-AGENT-APPLY-NEW-MUST"))),
        profile="demo-profile")
    leak = col.cells["ACPFUZZ-SESSION-ISOLATION-MUST"]
    assert (leak.status, leak.text) == ("fail", "MUST: prompt.leak")
    assert leak.cassette == "cassettes/matrix/demo/prompt.leak.cassette"
    apply = col.cells["SP-AGENT-APPLY-NEW-MUST"]
    assert (apply.status, apply.text) == ("pass", "4 checks")
    assert col.label == "demo 1.2" and col.note == "7 examples, 40 steps, seed 3"
    assert set(col.cells) == {r for r, _ in ROWS}


def test_flaky_and_info_cells_and_a_rule_outside_the_rows() -> None:
    col = column_from_report(doc(
        findings=[{"oracle": "session.reattach-failed", "severity": "SHOULD",
                   "rule": "ACPFUZZ-REATTACH-ADVERTISED-SHOULD", "status": "flaky",
                   "cassette": None},
                  {"oracle": "x.new", "severity": "MUST", "rule": "NEW-RULE-MUST",
                   "status": "failed", "cassette": None}],
        info=[{"oracle": "lifecycle.omitted-fallback", "rule": "SP-LIFECYCLE-OMIT-MAY",
               "evidence": {"choice": "kept"}}]), profile="p")
    assert col.cells["ACPFUZZ-REATTACH-ADVERTISED-SHOULD"].status == "flaky"
    assert col.cells["SP-LIFECYCLE-OMIT-MAY"].text == "lifecycle.omitted-fallback (kept)"
    assert col.cells["NEW-RULE-MUST"].status == "fail"
    assert "NEW-RULE-MUST" in matrix_markdown([col])


def test_a_rule_that_does_not_bind_the_agent_is_not_applicable_never_pass() -> None:
    """gemini-cli and qwen-code advertise no systemPrompt; their probes are judged, and the
    matrix said pass on SP-AGENT-ERROR-NOSIDEEFFECT-MUST (issue #31 §2)."""
    col = column_from_report(doc(
        capabilities={"load": True},
        judged=judged(("reject.side-effect", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"),
                      ("agent.hang", "SES-AGENT-BASELINE-MUST"),
                      ("prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST"))), profile="g")
    for rule in ("SP-AGENT-ERROR-NOSIDEEFFECT-MUST", "ACPFUZZ-SESSION-ISOLATION-MUST"):
        assert (col.cells[rule].status, col.cells[rule].text) == \
            ("na", "no systemPrompt capability")
    assert col.cells["SES-AGENT-BASELINE-MUST"].status == "pass"
    assert "not applicable: no systemPrompt capability" in matrix_markdown([col])
    override = column_from_report(doc(
        capabilities={**ALL, "override": False},
        judged=judged(("payload.invalid-accepted", "SP-AGENT-OVERRIDE-MUST"))), profile="c")
    assert override.cells["SP-AGENT-OVERRIDE-MUST"].status == "na"
    # A failure under a rule that does not bind is still shown: an oracle judged it.
    failed = column_from_report(doc(capabilities={}, findings=[
        {"oracle": "prompt.leak", "severity": "MUST", "rule": "ACPFUZZ-SESSION-ISOLATION-MUST",
         "status": "failed", "cassette": None}]), profile="x")
    assert failed.cells["ACPFUZZ-SESSION-ISOLATION-MUST"].status == "fail"


def test_the_rules_of_the_prompt_s_whole_scope_bind_whom_they_say() -> None:
    """Issue #33's rows: what initialize advertises binds every agent; a prompt shown as a
    user message and append's scope bind an agent that takes a prompt; override's scope one
    that advertises override."""
    scope = [("capability.drift", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD"),
             ("prompt.replayed-as-user", "ACPFUZZ-REPLAY-NOT-USER-SHOULD"),
             ("scope.tools-changed", "ACPFUZZ-APPEND-SCOPE-SHOULD"),
             ("scope.tools-changed", "SP-AGENT-OVERRIDE-SCOPE-DEF")]
    bare = column_from_report(doc(capabilities={"load": True}, judged=judged(*scope)), profile="g")
    assert bare.cells["ACPFUZZ-CAPABILITIES-HOLD-SHOULD"].status == "pass"
    for _, rule in scope[1:]:
        assert (bare.cells[rule].status, bare.cells[rule].text) == \
            ("na", "no systemPrompt capability")
    append_only = column_from_report(doc(capabilities={**ALL, "override": False},
                                         judged=judged(*scope)), profile="c")
    assert [append_only.cells[r].status for _, r in scope] == ["pass", "pass", "pass", "na"]
    assert append_only.cells["SP-AGENT-OVERRIDE-SCOPE-DEF"].text == "override not advertised"
    every = column_from_report(doc(judged=judged(*scope)), profile="all")
    assert {every.cells[r].status for _, r in scope} == {"pass"}


def test_every_rule_an_agent_oracle_cites_is_a_row() -> None:
    """A rule without a row is shown only when it fails: its passes are invisible."""
    from acp_fuzz.core.client_oracles import CLIENT_CATALOG
    from acp_fuzz.core.rules import RULES
    from acp_fuzz.reporting.matrix import ROWS
    client = {o.id for o in CLIENT_CATALOG.values()}
    cited = {r.id for r in RULES for o, _ in r.oracles if o not in client
             and o not in ("payload.probe", "defaults.too-small")}
    assert cited - {r for r, _ in ROWS} == set()


def test_not_tested_says_why() -> None:
    bare = column_from_report(doc(capabilities={"load": True}), profile="g")
    assert bare.cells["SP-AGENT-APPLY-NEW-MUST"].text == "no systemPrompt capability"
    assert bare.cells["ACPFUZZ-CONVERSATION-KEPT-MUST"].text == "no case drawn in 7 examples"
    nothing = column_from_report(doc(capabilities={"system_prompt": True}), profile="n")
    assert nothing.cells["ACPFUZZ-CONVERSATION-KEPT-MUST"].status == "na"
    assert nothing.cells["ACPFUZZ-CONVERSATION-KEPT-MUST"].text == \
        "neither session/load nor session/resume advertised"
    append_only = column_from_report(doc(
        capabilities={**ALL, "override": False},
        info=[{"oracle": "defaults.too-small", "rule": "SP-AGENT-OVERRIDE-REPLACES-DEF"}]),
        profile="c")
    assert append_only.cells["SP-AGENT-OVERRIDE-MUST"].text == "override not advertised"
    assert append_only.cells["SP-AGENT-APPEND-ADDITIVE-DEF"].text == \
        "default instructions too small to judge"
    # The size of the baseline is a reason, never a cell of its own; override's rules do
    # not bind an agent that does not advertise it.
    assert append_only.cells["SP-AGENT-OVERRIDE-REPLACES-DEF"].status == "na"
    gone = column_not_run("gemini-cli", "not installed: run acp-fuzz agents install")
    assert {c.status for c in gone.cells.values()} == {"untested"}
    assert gone.note.startswith("not run: not installed")


def test_a_rule_judged_only_on_one_kind_of_answer_says_it_was_sent() -> None:
    """Cancelled requests answered with a result leave ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD
    nothing to judge: the cell says they were sent, not that no case was drawn."""
    rule = "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD"
    sent = column_from_report(doc(capabilities={"load": True}, coverage={"first_example": {
        "cancel-request:new": 3, "cancel-request:load": 4}}), profile="s")
    assert sent.cells[rule].status == "untested"
    assert sent.cells[rule].text.startswith("cancelled requests sent; each answered with a "
                                            "result")
    unsent = column_from_report(doc(capabilities={"load": True}), profile="u")
    assert unsent.cells[rule].text == "no case drawn in 7 examples"
    # A load judges it too (its prompt after a cancelled refusal), without session/list.
    assert unsent.cells[rule].status == "untested"
    neither = column_from_report(doc(capabilities={"system_prompt": True}), profile="n")
    assert neither.cells[rule].status == "na"


def test_the_compaction_rows_say_when_the_agent_cannot_be_made_to_compact() -> None:
    keeps, applies = "ACPFUZZ-COMPACTION-KEEPS-MUST", "ACPFUZZ-COMPACTION-APPLIES-SHOULD"
    never = column_from_report(doc(capabilities={**ALL, "compact_command": False,
                                                 "compact_usage": False,
                                                 "compact_overflow": False}), profile="n")
    assert never.cells[keeps].text.startswith("cannot be made to compact")
    assert never.cells[applies].text.startswith("cannot be made to compact")
    no_reattach = column_from_report(doc(capabilities={
        "system_prompt": True, "compact_usage": True}), profile="u")
    assert no_reattach.cells[keeps].text == "no case drawn in 7 examples"
    assert no_reattach.cells[applies].text == "no load, resume or fork advertised"
    lost = column_from_report(doc(
        capabilities={**ALL, "compact_command": True},
        findings=[{"oracle": "prompt.lost", "severity": "MUST", "rule": keeps,
                   "status": "failed", "cassette": None}],
        judged=judged(("prompt.change-ignored", applies))), profile="c")
    assert (lost.cells[keeps].status, lost.cells[keeps].text) == ("fail", "MUST: prompt.lost")
    assert (lost.cells[applies].status, lost.cells[applies].text) == ("pass", "2 checks")


def test_columns_of_one_agent_under_two_profiles_are_told_apart() -> None:
    plain = column_from_report(doc(), profile="reference")
    compacting = column_from_report(doc(), profile="reference-compacting")
    other = column_from_report(doc(agent={}), profile="o")
    assert other.label != plain.label
    head = matrix_markdown([plain, compacting, other]).splitlines()[2]
    assert head.endswith(f"| demo 1.2 (reference) | demo 1.2 (reference-compacting) | "
                         f"{other.label} |"), head


def test_a_v2_column_says_so_and_its_replaying_resume_is_a_load() -> None:
    v2 = column_from_report(doc(
        agent={"protocolVersion": 2, "info": {"name": "demo", "version": "2.0"}},
        capabilities={"resume": True, "replay": True}), profile="d")
    assert v2.label == "demo 2.0 (ACP v2)"
    # v2 has no session/load, but a resume with replayFrom owes what a load owes.
    assert v2.cells["ACPFUZZ-CONVERSATION-KEPT-MUST"].text == "no case drawn in 7 examples"
    assert column_from_report(doc(), profile="d").label == "demo 1.2"


def test_links_are_relative_to_the_table(tmp_path: Path) -> None:
    cassette = tmp_path / "cassettes" / "demo" / "prompt.lost.cassette"
    col = column_from_report(doc(findings=[
        {"oracle": "prompt.lost", "severity": "MUST", "rule": "SP-AGENT-APPLY-NEW-MUST",
         "status": "failed", "cassette": str(cassette)}]), profile="demo")
    md = matrix_markdown([col], base=tmp_path / "docs")
    assert "(../cassettes/demo/prompt.lost.cassette)" in md
    assert 'href="../cassettes/demo/prompt.lost.cassette"' in matrix_html([col],
                                                                          base=tmp_path / "docs")


HOSTILE = "<script>alert(1)</script> | [x](http://evil) \x1b[31m"


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.hrefs += [v or "" for k, v in attrs if k == "href"]


def test_a_hostile_agent_name_is_escaped_in_both_formats() -> None:
    col = column_from_report(doc(agent={"agentInfo": {"name": HOSTILE, "version": "\n# 9"}},
                                 findings=[{"oracle": "prompt.lost", "severity": "MUST",
                                            "rule": "SP-AGENT-APPLY-NEW-MUST",
                                            "status": "failed", "cassette": "c/a.cassette"}]),
                             profile="x")
    md = matrix_markdown([col])
    header = next(line for line in md.splitlines() if line.startswith("| Rule"))
    assert header.count(" | ") == 2, header  # the name did not split the table
    assert "<script>" not in md and "\x1b" not in md
    assert md.count("](http://evil)") == md.count("`[x](http://evil)`")  # code, not a link
    assert "\n# 9" not in md
    parser = _Tags()
    parser.feed(matrix_html([col]))
    assert "script" not in parser.tags
    assert parser.hrefs == ["c/a.cassette"]  # only the cassette the campaign wrote


def test_an_agent_s_facts_are_listed_under_it_never_as_cells() -> None:
    """What override keeps of the workspace files, and the refusal codes, are facts under the
    agent (escaped like everything else); a malformed facts field is left out, not an error."""
    ws = {"files": ["AGENTS.md", "CLAUDE.md"],
          "by_mode": {"none": {"AGENTS.md": {"shown": 3, "turns": 3},
                               "CLAUDE.md": {"shown": 0, "turns": 3}},
                      "override": {"AGENTS.md": {"shown": 0, "turns": 2},
                                   "CLAUDE.md": {"shown": 0, "turns": 2}}}}
    codes = {"mode-unknown": {"-32602": 4}, "text-missing": {"1001": 1, "-32602": 2}}
    col = column_from_report(doc(workspace_files=ws, error_codes=codes), profile="demo")
    assert col.facts == (
        "workspace files reaching the model, none: AGENTS.md 3/3",
        "workspace files reaching the model, override: none of AGENTS.md, CLAUDE.md, "
        "GEMINI.md, QWEN.md",
        "refusal codes by payload class: mode-unknown -32602 x4; "
        "text-missing -32602 x2, 1001 x1")
    md = matrix_markdown([col])
    assert "  - fact: workspace files reaching the model, none: AGENTS.md 3/3." in md
    assert "fact: refusal codes by payload class" in matrix_html([col])
    assert all(c.status != "info" for c in col.cells.values())  # facts decide no cell
    bad = column_from_report(doc(workspace_files={"by_mode": ["x"]},
                                 error_codes={"mode-unknown": "<b>"}), profile="demo")
    assert bad.facts == ()
    hostile = column_from_report(doc(error_codes={"<script>": {"1": 1}}), profile="demo")
    assert "<script>" not in matrix_html([hostile])


def test_an_oracle_that_failed_and_shrank_into_another_failure_is_unconfirmed() -> None:
    """Judged and unfailed except for one example whose failure shrank to another bug: the
    cell is unconfirmed and says why, never pass; a confirmed failure of the rule wins."""
    absorbed = [{"oracle": "session.listed-other-id", "severity": "SHOULD",
                 "rule": "ACPFUZZ-LIST-IDS-SHOULD", "message": "m", "step": 4}]
    col = column_from_report(doc(
        absorbed=absorbed, judged=judged(("session.listed-other-id", "ACPFUZZ-LIST-IDS-SHOULD"))),
        profile="p")
    cell = col.cells["ACPFUZZ-LIST-IDS-SHOULD"]
    assert cell.status == "unconfirmed" and cell.cassette is None
    assert cell.text.startswith("SHOULD: session.listed-other-id (failed in the search")
    md = matrix_markdown([col])
    assert "**unconfirmed**" in md and "1 unconfirmed, " in md
    confirmed = column_from_report(doc(absorbed=absorbed, findings=[
        {"oracle": "session.listed-other-id", "severity": "SHOULD",
         "rule": "ACPFUZZ-LIST-IDS-SHOULD", "status": "failed", "cassette": "c.cassette"}]),
        profile="p")
    assert confirmed.cells["ACPFUZZ-LIST-IDS-SHOULD"].status == "fail"
