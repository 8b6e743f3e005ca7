"""The HTML report (``target --report html:PATH``, ``show --html``), the per-rule JUnit cases,
the replay JSON document and the closing summary line: pure builders over hand-made results
and the committed leak cassette."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from acp_fuzz.core.cassette import Cassette, read_cassette
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import Event
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.replay import ReplayResult
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, FindingReport
from acp_fuzz.reporting.campaign import campaign_cases
from acp_fuzz.reporting.html import CSP, campaign_html, cassette_html, marked
from acp_fuzz.reporting.replay import replay_to_json
from acp_fuzz.reporting.text import summary_line

LEAK = Path(__file__).resolve().parents[2] / "cassettes" / "reference" / "leak.cassette"
HOSTILE = "<img src=x onerror=alert(1)></script><script>window.pwned=1</script>&amp;"


def hostile_leak(text: str = HOSTILE) -> Cassette:
    """The leak cassette with session A's prompt (and so the leaked text in B's request)
    replaced by ``text`` followed by the canary, and a hostile agent name."""
    c = read_cassette(LEAK)
    old = "emoji 🤖🧪🔥 and ZWJ family 👨\u200d👩\u200d👧"

    def swap(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(old, text)
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    events = [Event(e.seq, e.t, e.kind, swap(dict(e.data))) for e in c.events]
    header = dataclasses.replace(c.header, initialize=swap(c.header.initialize),
                                 meta=swap(c.header.meta))
    header.initialize["agentInfo"]["name"] = HOSTILE
    return Cassette(header, events)


def _marks(page: str, cls: str) -> list[str]:
    return re.findall(rf'<mark class="{cls}">(.*?)</mark>', page, re.S)


def test_the_leaked_text_is_marked_and_every_hostile_text_escaped() -> None:
    page = cassette_html(hostile_leak(), path="x</code><script>.cassette")
    # The foreign text in B's request, and only there (the legend aside).
    leaked = [m for m in _marks(page, "leaked") if m != "leaked"]
    assert leaked == ["&lt;img src=x onerror=alert(1)&gt;&lt;/script&gt;&lt;script&gt;"
                      "window.pwned=1&lt;/script&gt;&amp;amp; [acp-fuzz canary A1]"]
    assert "<script" not in page and "<img" not in page
    assert page.count("<mark") == 4  # the legend's three and the one leak
    assert f'content="{CSP}"' in page and "default-src 'none'" in CSP
    assert not re.search(r"(?i)(src|href)=\"?(https?:|//)", page)  # nothing fetched


def test_a_lost_and_a_duplicated_block_are_marked() -> None:
    c = read_cassette(LEAK)
    block = "emoji 🤖🧪🔥 and ZWJ family 👨\u200d👩\u200d👧 [acp-fuzz canary A1]"
    # A's own request (made up): the block twice. B's request: given B a prompt it lacks.
    events = list(c.events)
    x = dict(events[19].data)
    x["session"] = "A"
    x["segments"] = [{"slot": "system", "path": "system", "text": f"{block}\n{block}"}]
    events[19] = Event(19, events[19].t, "model", x)
    step = dict(events[11].data)
    step["args"] = {"op": "new", "session": "B", "systemPrompt": {
        "mode": "append", "content": [{"type": "text", "text": "B's own words"}]}}
    events[11] = Event(11, events[11].t, "step", step)
    y = {**x, "session": "B", "segments": [{"slot": "system", "path": "s", "text": "other"}]}
    events.append(Event(len(events), 0.0, "model", y))
    meta = {**c.header.meta, "findings": []}
    page = cassette_html(Cassette(dataclasses.replace(c.header, meta=meta), events))
    assert [m for m in _marks(page, "duplicated") if m != "duplicated"] == [block]
    assert [m for m in _marks(page, "lost") if m != "lost"] == ["B&#x27;s own words"]
    assert [m for m in _marks(page, "leaked") if m != "leaked"] == []


def test_marked_escapes_each_piece_and_skips_overlaps() -> None:
    assert marked("a<b>c", [(1, 4, "leaked"), (2, 3, "lost")]) == \
        'a<mark class="leaked">&lt;b&gt;</mark>c'
    assert marked("\u202eab", []) == "\\u202eab"  # no bidi override reorders the page


def _result(**kw: Any) -> CampaignResult:
    caps = Capabilities.from_initialize({})
    return CampaignResult(agent={"name": HOSTILE, "version": "1"}, initialize={}, caps=caps,
                          settings=CampaignSettings(max_examples=10), **kw)


LEAK_F = Finding("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", "leaks", step=2,
                 session="B", evidence={"foreign_session": "A", "model_event": 19})
DUP_F = Finding("prompt.duplicated", "SHOULD", "ACPFUZZ-PROMPT-ONCE-SHOULD", "twice")


def _report(*findings: Finding, cassette: Path | None = None) -> FindingReport:
    return FindingReport(status="failed", runs=3, reproduced=3, findings=list(findings),
                         steps=[{"op": "new", "session": "A"}], requests=[], cassette=cassette)


def test_junit_has_one_case_per_rule_checked() -> None:
    judged = {("prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST"): 7,
              ("prompt.lost", "SP-AGENT-APPLY-NEW-MUST"): 5,
              ("prompt.duplicated", "ACPFUZZ-PROMPT-ONCE-SHOULD"): 5}
    clean = campaign_cases(_result(judged=judged))
    assert [(c.classname, c.name, c.outcome) for c in clean] == [
        ("acp-fuzz.prompt.duplicated", "ACPFUZZ-PROMPT-ONCE-SHOULD", "pass"),
        ("acp-fuzz.prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST", "pass"),
        ("acp-fuzz.prompt.lost", "SP-AGENT-APPLY-NEW-MUST", "pass")]
    assert clean[1].text == "7 case(s) judged"
    found = campaign_cases(_result(judged=judged, reports=[_report(LEAK_F, DUP_F)]))
    outcome = {c.classname: (c.outcome, c.type) for c in found}
    assert outcome == {"acp-fuzz.prompt.duplicated": ("pass", ""),  # a SHOULD, not --strict
                       "acp-fuzz.prompt.leak": ("failure", "MUST"),
                       "acp-fuzz.prompt.lost": ("pass", "")}
    assert "SHOULD: twice" in next(c.text for c in found if c.name.endswith("ONCE-SHOULD"))
    strict = _result(judged=judged, reports=[_report(DUP_F)])
    strict.settings = CampaignSettings(strict=True)
    assert sum(c.outcome == "failure" for c in campaign_cases(strict)) == 1
    assert [c.name for c in campaign_cases(_result())] == ["campaign"]


def test_the_summary_line_counts_and_explains_the_examples() -> None:
    line = summary_line(_result(examples_run=3, steps_run=9), 2.04)
    assert (line.text, line.style) == ("3 examples (3 drawn, 0 shrinking, 0 discarded draws), "
                                       "9 steps, 0 findings (0 MUST, 0 SHOULD), 2.0 s (seed 0)",
                                       "bold green")
    line = summary_line(_result(examples_run=14, steps_run=1, shrink_runs=3, discarded=1,
                                shrink_trials=5, confirm_runs=3,
                                reports=[_report(LEAK_F, DUP_F)]), 1.0)
    assert line.text.startswith("14 examples (10 drawn, 3 shrinking, 1 discarded draw), "
                                "5 shrink trials, 3 confirm runs, 1 step, 2 findings "
                                "(1 MUST, 1 SHOULD)")
    assert line.style == "bold red"


def test_the_campaign_page_shows_findings_first_with_steps_and_the_turn_view() -> None:
    cassette = Path("c/prompt.leak-seed0.cassette")
    result = _result(examples_run=3, steps_run=9, reports=[_report(LEAK_F, cassette=cassette)],
                     judged={("prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST"): 7})
    page = campaign_html(result, secrets=["canary A1"], cassettes={cassette: hostile_leak()})
    assert page.index("<h2>Findings</h2>") < page.index("What reached the model") \
        < page.index("<h2>Rules checked</h2>")
    assert "<li>session/new A (systemPrompt omitted)</li>" in page
    assert "canary A1" not in page and "[acp-fuzz &lt;redacted&gt;]" in page
    assert len([m for m in _marks(page, "leaked") if m != "leaked"]) == 1
    assert "<script" not in page and "<img" not in page


def test_the_replay_json_holds_each_verdict_and_finding() -> None:
    results = [ReplayResult(Path("a.cassette"), "FAILED", ["prompt.leak"], 1, 1, [[LEAK_F]]),
               ReplayResult(Path("b.cassette"), "ERROR", error="unreadable")]
    doc = replay_to_json(results, 2)
    assert doc["verdicts"] == {"ERROR": 1, "FAILED": 1} and doc["exit_code"] == 2
    a, b = doc["cassettes"]
    assert (a["path"], a["verdict"], a["reproduced"], a["findings"][0][0]["oracle"]) == \
        ("a.cassette", "FAILED", 1, "prompt.leak")
    assert (b["error"], b["findings"], b["divergence"]) == ("unreadable", [], None)


def test_the_client_page_escapes_the_clients_text_and_never_passes_a_should_finding(
        ) -> None:
    """``client --report html:PATH`` (:func:`client_html`): the same page as an agent's,
    the client's name and messages escaped and its secrets redacted; a SHOULD finding (not
    failing without --strict) is said, not shown as pass."""
    from collections import Counter

    from acp_fuzz.core.capability_sets import CapabilitySet
    from acp_fuzz.core.findings import Status
    from acp_fuzz.core.scenarios import Scenario
    from acp_fuzz.engine.client.campaign import (
        ClientCampaignResult,
        ClientReport,
        ClientSettings,
    )
    from acp_fuzz.reporting.html import client_html

    should = Finding("client.prompt-changed", "SHOULD", "SP-CLIENT-RESEND-SHOULD",
                     f"sent {HOSTILE} and canary A1", step=0)
    result = ClientCampaignResult(
        settings=ClientSettings(), scenario=Scenario(("my-client", "{agent}", HOSTILE)),
        examples_run=2, runs=3, client_info={"name": HOSTILE, "version": "canary A1"},
        reports=[ClientReport(status=Status.FAILED, runs=3, reproduced=3, findings=[should],
                              cassette=Path("c/x.cassette"),
                              caps=CapabilitySet(system_prompt=True, load=True))],
        judged=Counter({("client.prompt-changed", "SP-CLIENT-RESEND-SHOULD"): 4,
                        ("client.prompt-empty", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT"): 4}))
    page = client_html(result, secrets=["canary A1"])
    assert "<script" not in page and "<img" not in page and "canary A1" not in page
    assert "&lt;img src=x" in page and "&lt;redacted&gt;" in page
    assert "<li><code>my-client {agent} &lt;img" in page  # the scenario, escaped
    assert "<td>finding (not failing without --strict)</td>" in page
    assert "<td>pass</td>" in page  # the empty-content rule held
    assert "Smallest capability set: <code>v1: systemPrompt, loadSession</code>" in page
