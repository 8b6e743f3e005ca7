"""What a prompt must not change beside the instructions (issue #33 §1): the tools a
session's turns offer the model (``scope.tools-changed``) and the modes and config options
its ``session/new`` answers (``scope.config-changed``), between sessions with an override
(MUST) or append (SHOULD) prompt and sessions without one. Hand-built histories."""

from __future__ import annotations

from typing import Any

from test_oracles import H, P, Q, appended, ids, only, sp

from acp_fuzz.core.oracles import Evaluator
from acp_fuzz.core.payloads import OMIT, classify
from acp_fuzz.core.tools import tool_names

TOOLS = ["read_file", "list_directory"]


def chat(*names: str) -> dict[str, Any]:
    return {"model": "m", "messages": [], "tools": [
        {"type": "function", "function": {"name": n, "parameters": {}}} for n in names]}


def turn(h: H, handle: str, system: list[str], tools: list[str]) -> None:
    h.prompt(handle, system=system, body=chat(*tools))


def test_the_tools_of_each_api_are_named() -> None:
    assert tool_names("openai.chat", chat("a", "b")) == {"a", "b"}
    assert tool_names("anthropic.messages", {"tools": [{"name": "Bash"}, {"x": 1}, 3]}) == \
        {"Bash"}
    assert tool_names("openai.responses", {"tools": [
        {"type": "function", "name": "shell"}, {"type": "web_search"},
        {"type": "mcp", "server_label": "acp-fuzz"}]}) == {"shell", "web_search", "mcp:acp-fuzz"}
    assert tool_names("gemini", {"tools": [{"functionDeclarations": [{"name": "ls"}]},
                                           {"googleSearch": {}}]}) == {"ls", "googleSearch"}
    assert tool_names("openai.chat", {"tools": "no"}) == frozenset()
    assert tool_names("openai.chat", None) == frozenset()


def test_a_tool_dropped_under_override_is_a_must_and_under_append_a_should() -> None:
    h = H()
    h.new("A")
    turn(h, "A", appended(), TOOLS)
    h.new("B", sp("override", P))
    turn(h, "B", [P], ["read_file"])
    h.new("C", sp("append", Q))
    turn(h, "C", appended(Q), [*TOOLS, "web_fetch"])
    found = [f for f in h.findings() if f.oracle == "scope.tools-changed"]
    by = {f.session: f for f in found}
    assert (by["B"].severity, by["B"].rule) == ("MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF")
    assert by["B"].evidence["dropped"] == ["list_directory"]
    assert (by["C"].severity, by["C"].rule) == ("SHOULD", "ACPFUZZ-APPEND-SCOPE-SHOULD")
    assert by["C"].evidence["added"] == ["web_fetch"]


def test_the_same_tools_in_every_mode_and_tools_that_vary_among_plain_sessions_are_fine(
        ) -> None:
    h = H()
    h.new("A")
    turn(h, "A", appended(), [*TOOLS, "sometimes"])
    h.new("D")
    turn(h, "D", appended(), TOOLS)
    h.new("B", sp("override", P))
    turn(h, "B", [P], TOOLS)  # "sometimes" is not in every plain request: not owed
    h.new("C", sp("append", Q))
    turn(h, "C", appended(Q), [*TOOLS, "sometimes"])  # in one plain request: not new
    assert "scope.tools-changed" not in ids(h.findings())
    e = Evaluator()
    e.feed(h.h.snapshot())
    assert e.judged()[("scope.tools-changed", "SP-AGENT-OVERRIDE-SCOPE-DEF")] == 1


def test_nothing_to_compare_without_a_plain_session_s_turn_or_after_a_switch() -> None:
    h = H()
    h.new("B", sp("override", P))
    turn(h, "B", [P], ["read_file"])  # no session without a prompt yet
    h.new("A")
    turn(h, "A", appended(), TOOLS)
    h.new("C", sp("override", P))
    h.step("set_mode", "C")
    turn(h, "C", [P], [])  # a mode switched: a plan mode may offer fewer tools
    assert "scope.tools-changed" not in ids(h.findings())


def new_answered(h: H, handle: str, prompt: Any, result: dict[str, Any]) -> None:
    """A session/new step whose answer (with its modes and config options) is recorded."""
    args: dict[str, Any] = {"op": "new", "session": handle}
    if prompt is not OMIT:
        args["systemPrompt"] = prompt
    c = classify(prompt, h.caps)
    h.h.append("step", {"index": h.index, "name": "new", "args": args, "class": {
        "kind": c.kind, "reason": c.reason, "severity": c.severity, "rule": c.rule}})
    rid = 100 + h.index
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid,
                                              "method": "session/new", "params": {}}})
    h.ids += 1
    h.sids[handle] = f"sess-{h.ids}"
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": rid, "result": {
        "sessionId": h.sids[handle], **result}}})
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "ok",
                           "sessionId": h.sids[handle]})
    h.index += 1


def options(model: str) -> dict[str, Any]:
    return {"modes": {"currentModeId": "code", "availableModes": [{"id": "code"}, {"id": "ask"}]},
            "configOptions": [{"id": "model", "type": "select", "currentValue": model,
                               "options": [{"value": "big"}, {"value": "mini"}]}],
            "_meta": {"sessionStartedAt": "differs every time"}}


def test_other_config_options_under_override_are_a_must() -> None:
    h = H()
    new_answered(h, "A", OMIT, options("big"))
    new_answered(h, "B", sp("override", P), options("mini"))
    new_answered(h, "C", sp("append", Q), options("big"))
    f = only(h.findings(), "scope.config-changed")
    assert (f.session, f.severity, f.rule) == ("B", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF")
    assert f.evidence["now"]["configOptions"][0]["currentValue"] == "mini"


def test_config_is_compared_only_with_settled_plain_sessions() -> None:
    h = H()
    new_answered(h, "B", sp("override", P), options("mini"))  # nothing to compare with yet
    new_answered(h, "A", OMIT, options("big"))
    new_answered(h, "D", None, options("mini"))  # plain sessions disagree: no verdict
    new_answered(h, "C", sp("append", Q), options("big"))
    new_answered(h, "E", {"mode": "prepend", "content": []}, {})  # refused kind: not judged
    assert "scope.config-changed" not in ids(h.findings())


def test_a_session_with_an_mcp_server_is_compared_only_with_sessions_that_have_one() -> None:
    """codex-acp 2.6.0 offers list_mcp_resources, list_mcp_resource_templates and
    read_mcp_resource in any session with an MCP server: a session with acp-fuzz's server and
    an append prompt is not compared with a plain session without one (a false alarm of the
    first run against it), but with a plain session that has one too; and a fork of it
    inherits the server."""
    mcp_tools = [*TOOLS, "list_mcp_resources", "read_mcp_resource"]
    h = H()
    h.new("A", sp("append", Q), mcp=True)
    h.new("B")
    turn(h, "B", appended(), TOOLS)
    turn(h, "A", appended(Q), mcp_tools)
    assert "scope.tools-changed" not in ids(h.findings())
    h.new("C", mcp=True)
    turn(h, "C", appended(), mcp_tools)
    h.new("D", sp("override", P), mcp=True)
    turn(h, "D", [P], TOOLS)  # with its server, yet without the tools a plain one gets
    h.step("fork", "A", new="E")
    turn(h, "E", appended(Q), mcp_tools)
    found = [f for f in h.findings() if f.oracle == "scope.tools-changed"]
    assert [(f.session, f.severity) for f in found] == [("D", "MUST")]
    assert found[0].evidence["dropped"] == ["list_mcp_resources", "read_mcp_resource"]
