"""The client table of docs/matrix.md (acp_fuzz.reporting.client_matrix): cells from reports,
and the section replaced in place without touching the agent table."""

from __future__ import annotations

from acp_fuzz.core.client_oracles import CLIENT_CATALOG
from acp_fuzz.reporting.client_matrix import (
    BEGIN,
    END,
    client_matrix_markdown,
    client_rows,
    column_from_reports,
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
    assert col.cells[("client.legacy-meta-prompt", RULE)] == \
        "**FAIL**: SHOULD ([cassette](../x.cassette))"
    assert col.cells[("client.prompt-not-resent", "SP-CLIENT-RESEND-SHOULD")] == "info"
    assert col.cells[("client.prompt-unadvertised", "SP-CLIENT-GATE-MUSTNOT")] == \
        "pass: 5 checks"
    assert col.cells[("client.prompt-empty", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT")] == "not judged"


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
