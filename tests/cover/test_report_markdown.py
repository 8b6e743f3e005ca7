"""The Markdown page of a campaign, either direction (``--report markdown:PATH``;
:mod:`acp_fuzz.reporting.summary`): what a client or an agent chose is escaped, secrets are
redacted, and a rule with a SHOULD finding is never shown as pass
(:mod:`acp_fuzz.reporting.rules`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.findings import Finding, Status
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.engine.client.campaign import ClientCampaignResult, ClientReport, ClientSettings
from acp_fuzz.reporting.rules import FINDING, rule_rows
from acp_fuzz.reporting.summary import client_markdown

HOSTILE = "| <img src=x> [a](http://e.example) `x`"
CHANGED = ("client.prompt-changed", "SP-CLIENT-RESEND-SHOULD")
EMPTY = ("client.prompt-empty", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT")


def _result(*, strict: bool = False) -> ClientCampaignResult:
    should = Finding(*CHANGED[:1], "SHOULD", CHANGED[1], f"sent {HOSTILE} and canary A1", step=0)
    return ClientCampaignResult(
        settings=ClientSettings(strict=strict),
        scenario=Scenario(("my-client", "{agent}", "canary A1")), examples_run=2, runs=3,
        client_info={"name": HOSTILE, "version": "1"},
        reports=[ClientReport(status=Status.FAILED, runs=3, reproduced=3, findings=[should],
                              cassette=Path("c/x.cassette"),
                              caps=CapabilitySet(system_prompt=True, load=True))],
        judged=Counter({CHANGED: 4, EMPTY: 4}))


def test_the_verdicts_never_pass_a_rule_with_a_finding() -> None:
    rows = {(r.oracle, r.rule): r.verdict for r in rule_rows(_result())}
    assert rows == {CHANGED: FINDING, EMPTY: "pass"}
    strict = {(r.oracle, r.rule): r.verdict for r in rule_rows(_result(strict=True))}
    assert strict == {CHANGED: "FAIL", EMPTY: "pass"}


def test_the_client_page_escapes_and_redacts() -> None:
    page = client_markdown(_result(), secrets=["canary A1"])
    assert page.startswith("# acp-fuzz client: ")
    assert "canary A1" not in page and "<img" not in page.replace("\\<img", "")
    assert "`[a](http://e.example)`" in page  # a link-like word only as code
    table = [ln for ln in page.splitlines() if ln.startswith("| SHOULD |")]
    assert len(table) == 1 and table[0].count(" | ") == 4  # no cell of its own
    assert "Smallest capability set: `v1: systemPrompt, loadSession`" in page
    assert "| `SP-CLIENT-RESEND-SHOULD` | `client.prompt-changed` | 4 | finding (not failing " \
           "without --strict) |" in page
    assert "| `SP-CLIENT-CONTENT-EMPTY-MUSTNOT` | `client.prompt-empty` | 4 | pass |" in page
