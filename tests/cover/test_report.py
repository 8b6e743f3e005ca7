"""The Markdown bug report (pure: no agent is started)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from acp_fuzz.core.cassette import Cassette, Header, read_cassette
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import Event
from acp_fuzz.reporting import CLIP, render_markdown

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "leak.cassette"
EXAMPLE_REPORT = ROOT / "docs" / "examples" / "leak-report.md"
SHOWN = "docs/examples/leak.cassette"


def test_example_report_has_every_part() -> None:
    text = render_markdown(read_cassette(EXAMPLE), path=SHOWN)
    # Agent name and version, from the recorded initialize result.
    assert text.startswith("# prompt.leak: `acp-fuzz-reference-agent` `0.1.0`\n")
    # The finding: oracle, rule, severity, status and rate.
    assert "| `prompt.leak` | `ACPFUZZ-SESSION-ISOLATION-MUST` | MUST | failed | 3/3 |" in text
    # The transcript: the four requests, numbered, each as a JSON block.
    methods = re.findall(r"^(\d+)\. `([^`]+)`$", text, flags=re.M)
    assert methods == [("1", "initialize"), ("2", "session/new"), ("3", "session/new"),
                       ("4", "session/prompt")]
    assert text.count("   ```json\n") == 4
    assert "<sandbox>/work/A" in text and "/tmp/acp-fuzz-" not in text
    # What reached the model (B's text in A's system slot) vs what should have (A's text).
    model = text.split("## What reached the model", 1)[1].split("## Reproduce", 1)[0]
    reached, expected, foreign = re.findall(r"```text\n(.*?)\n```", model, flags=re.S)
    assert "Never mention the weather in any reply." in reached
    assert "Always answer in the voice of a pirate captain." not in reached
    assert expected == "Always answer in the voice of a pirate captain."
    assert foreign == "Never mention the weather in any reply."
    # The exact replay command.
    assert f"```sh\nacp-fuzz replay {SHOWN} -- ./your-agent\n```" in text


def test_committed_example_is_up_to_date() -> None:
    assert EXAMPLE_REPORT.read_text(encoding="utf-8") == render_markdown(
        read_cassette(EXAMPLE), path=SHOWN)


def _cassette(events: list[dict[str, Any]], findings: list[Finding],
              initialize: Any = None) -> Cassette:
    evs = [Event(i, float(i), e["kind"], e["data"]) for i, e in enumerate(events)]
    header = Header(target=["my-agent", "--acp"], kind="finding", initialize=initialize,
                    meta={"status": "flaky", "runs": 3, "reproduced": 1,
                          "findings": [f.to_wire() for f in findings]})
    return Cassette(header=header, events=evs)


def _send(rid: int, method: str, params: Any) -> dict[str, Any]:
    return {"kind": "acp", "data": {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid,
                                                          "method": method, "params": params}}}


def test_long_strings_are_clipped_and_fences_survive_backticks() -> None:
    long_text = "```\n" + "x" * 5000
    sp = {"mode": "override", "content": [{"type": "text", "text": long_text}]}
    events = [
        {"kind": "step", "data": {"index": 0, "name": "new",
                                  "args": {"op": "new", "session": "A", "systemPrompt": sp}}},
        _send(1, "session/new", {"cwd": "/w", "mcpServers": [], "systemPrompt": sp}),
        {"kind": "acp", "data": {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 1,
                                                        "result": {"sessionId": "s1"}}}},
        {"kind": "model", "data": {"api": "openai.chat", "method": "POST", "path": "/v1",
                                   "segments": [{"slot": "system", "path": "messages[0]",
                                                 "text": "You are helpful."}],
                                   "session": "A", "turn": 1}},
    ]
    lost = Finding("prompt.lost", "MUST", "SP-AGENT-APPLY-NEW-MUST",
                   "session A: the prompt from step 0 is not in the request", step=0,
                   session="A", evidence={"model_event": 3})
    info = Finding("lifecycle.omitted-fallback", "info", "SP-LIFECYCLE-OMIT-MAY", "kept")
    text = render_markdown(_cassette(events, [lost, info]))
    assert "x" * 5000 not in text
    assert "x" * (CLIP - 10) in text and "[5004 chars]" in text
    # No agentInfo: the agent is named by its command.
    assert text.startswith("# prompt.lost: `my-agent`\n")
    assert "| `prompt.lost` | `SP-AGENT-APPLY-NEW-MUST` | MUST | flaky | 1/3 |" in text
    assert "in only some of 3" in text
    assert "`lifecycle.omitted-fallback`" in text.split("## What the client did")[0]
    # A block of text that holds ``` is fenced with four backticks.
    assert "````text\n```\nxxx" in text
    assert "in place of the agent's own default instructions" in text
    assert "You are helpful." in text
    assert "acp-fuzz replay <cassette>" in text


def test_a_cassette_without_failures_says_so() -> None:
    events = [{"kind": "step", "data": {"index": 0, "name": "list", "args": {"op": "list"}}},
              _send(1, "session/list", {})]
    text = render_markdown(_cassette(events, []), path="x.cassette")
    assert text.startswith("# no failure: `my-agent`")
    assert "No MUST or SHOULD finding was recorded" in text
    assert "## What reached the model" not in text
    assert "(no response)" in text
    assert "acp-fuzz replay x.cassette" in text


def test_a_client_cassette_is_reproduced_with_replay_client() -> None:
    """A cassette of ``acp-fuzz client`` is replayed against a client, not an agent: the
    report gives ``replay --client``, and says when the scenario's steps are needed again."""
    def report(steps: list[dict[str, Any]]) -> str:
        header = Header(target=["my-client"], kind="client-finding", settings={
            "capabilities": {"protocol": 1},
            "scenario": {"command": ["my-client"], "steps": steps}})
        text = render_markdown(Cassette(header=header, events=[]), path="c.cassette")
        return text.split("## Reproduce", 1)[1]

    one = report([{"args": []}])
    assert "```sh\nacp-fuzz replay --client c.cassette -- ./your-client\n```" in one
    assert "./your-agent" not in one and "--profile" not in one and "step(s)" not in one
    two = report([{"args": ["new"]}, {"args": ["prompt", "hi"]}])
    assert "a scenario of 2 step(s)" in two and "--step" in two


def test_a_status_is_one_word_on_both_sides_and_old_client_cassettes_read_the_same() -> None:
    """Agent and client campaigns say failed, flaky, unconfirmed (core.findings.Status); a
    client cassette recorded before said FAILED, and its report still says every run."""
    from dataclasses import replace

    from acp_fuzz.core.findings import Status

    assert Status.of(3, 3) is Status.FAILED and Status.of(2, 3) is Status.FLAKY
    assert Status.FAILED == "failed" and Status.UNCONFIRMED.label == "UNCONFIRMED"
    f = Finding("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", "m", step=0)
    old = _cassette([], [f])
    for recorded in ("FAILED", "failed"):
        header = replace(old.header, meta={**old.header.meta, "status": recorded,
                                           "reproduced": 3})
        text = render_markdown(Cassette(header=header, events=old.events))
        assert "failure in every one of 3 confirmation run(s)" in text, recorded
    assert "in only some of 3" in render_markdown(old)  # flaky, 1/3
