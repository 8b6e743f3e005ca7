"""The client table of docs/matrix.md (acp_fuzz.reporting.client_matrix): cells from reports,
and the section replaced in place without touching the agent table."""

from __future__ import annotations

from pathlib import Path

from acp_fuzz.core.client_oracles import CLIENT_CATALOG
from acp_fuzz.reporting.client_matrix import (
    BEGIN,
    END,
    client_matrix_html,
    client_matrix_markdown,
    client_rows,
    column_from_reports,
    column_not_run,
    replace_section,
)

RULE = CLIENT_CATALOG["client.legacy-meta-prompt"].rule


def test_rows_are_the_catalog_with_the_prompt_block_rule_split_out() -> None:
    rows = client_rows()
    assert [r[0] for r in rows if r[0] != "client.capability-unadvertised"] == [
        o for o in CLIENT_CATALOG if o != "client.capability-unadvertised"]
    assert [r[2] for r in rows if r[0] == "client.capability-unadvertised"] == [
        "CAP-CLIENT-GATE-MUSTNOT", "PROMPT-CLIENT-CAP-MUSTNOT"]


def test_cells_take_the_worst_finding_then_checks_then_not_judged() -> None:
    reports = [
        {"findings": [], "info": [{"oracle": "client.prompt-not-resent", "severity": "info",
                                   "rule": "SP-CLIENT-RESEND-SHOULD"}],
         "judged": [{"oracle": "client.prompt-unadvertised", "rule": "SP-CLIENT-GATE-MUSTNOT",
                     "checks": 1}]},
        {"findings": [{"oracle": "client.legacy-meta-prompt", "severity": "SHOULD",
                       "rule": RULE},
                      {"oracle": "client.legacy-meta-prompt", "severity": "info",
                       "rule": RULE}],
         "judged": [{"oracle": "client.prompt-unadvertised", "rule": "SP-CLIENT-GATE-MUSTNOT",
                     "checks": 4}]},
    ]
    col = column_from_reports("c", reports, corpus=[("../x.cassette",
                                                     ["client.legacy-meta-prompt"])])
    assert col.cells[("client.legacy-meta-prompt", RULE)].markdown() == \
        "**FAIL**: SHOULD ([cassette](../x.cassette))"
    assert col.cells[("client.prompt-not-resent", "SP-CLIENT-RESEND-SHOULD")].markdown() == \
        "info"
    assert col.cells[("client.prompt-unadvertised", "SP-CLIENT-GATE-MUSTNOT")].markdown() == \
        "pass: 5 checks"
    assert col.cells[("client.prompt-empty", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT")].markdown() == \
        "not judged"


def test_the_section_is_replaced_in_place_or_appended() -> None:
    col = column_from_reports("ref", [{"findings": [], "judged": []}])
    section = client_matrix_markdown([col], preamble="made by x")
    assert section.startswith(BEGIN) and section.rstrip().endswith(END)
    assert "| Oracle | Severity | Rule | ref |" in section
    assert len([ln for ln in section.splitlines() if ln.startswith("| `")]) == len(client_rows())
    doc = "# Conformance matrix\n\n| agents |\n"
    once = replace_section(doc, section)
    assert once == doc + "\n" + section
    again = replace_section(once + "\ntrailer\n", section.replace("made by x", "made by y"))
    assert again.count(BEGIN) == 1 and "made by y" in again and "made by x" not in again
    assert again.startswith(doc) and again.endswith("trailer\n")


HOSTILE = "evil | <b>x</b> [l](http://e.example) \u202e`"


def test_a_title_and_a_reported_cassette_are_escaped_for_markdown_and_html() -> None:
    """Titles come from ``matrix --client TITLE=...`` and reports from ``--from-json``: no
    table cell ends early, no tag or link renders, a cassette path is only a link target."""
    report = {"findings": [{"oracle": "client.prompt-empty", "severity": "MUST",
                            "rule": "SP-CLIENT-CONTENT-EMPTY-MUSTNOT",
                            "cassette": "out/a b\"><script>.cassette"}]}
    col = column_from_reports(HOSTILE, [report], base=Path("/x").resolve())
    md = client_matrix_markdown([col])
    head = next(ln for ln in md.splitlines() if ln.startswith("| Oracle"))
    # Four cells (an escaped bar ends none), no tag, the link-like word only in a code span.
    assert head.count(" | ") == 3 and "<b>" not in head and "`[l](http://e.example)`" in head
    assert "\u202e" not in md
    row = next(ln for ln in md.splitlines() if "client.prompt-empty" in ln)
    assert "**FAIL**: MUST ([cassette](" in row and "<script>" not in row and '"' not in row
    page = client_matrix_html([col])
    assert "<b>" not in page and "<script>" not in page and "&lt;b&gt;" in page
    assert '<td class="fail">FAIL: MUST (<a href="' in page


def test_a_client_not_run_says_why_in_every_cell_and_below() -> None:
    col = column_not_run("gone", "cannot start the client")
    md = client_matrix_markdown([col])
    assert all(c.status == "not run" for c in col.cells.values())
    assert len(col.cells) == len(client_rows())
    assert "- gone: not run: cannot start the client." in md
    assert "<li>gone: not run: cannot start the client.</li>" in client_matrix_html([col])
