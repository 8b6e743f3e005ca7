"""The MCP servers a session names (issue #33 §1): ``mcp.tool-missing`` (its tool missing
from an override (MUST) or append (SHOULD) turn while sessions without a prompt get theirs)
and ``mcp.tool-leak`` (another session's MCP tool in a request). Hand-built histories: a
step that names acp-fuzz's MCP server is annotated with its tool, as the runner does."""

from __future__ import annotations

from typing import Any

from test_oracles import H, P, Q, appended, ids, only, sp

from acp_fuzz.core.oracles import Evaluator
from acp_fuzz.core.payloads import OMIT
from acp_fuzz.core.steps import mcp_tool_for, validate_step

BASE = ["read_file", "list_directory"]


def named(h: H, handle: str, prompt: Any = OMIT, *, op: str = "new", **kw: Any) -> None:
    """A step naming the MCP server (the runner's annotation), and its reply."""
    h.step(op, handle, mcp=True, **({} if prompt is OMIT else {"systemPrompt": prompt}), **kw)
    step = next(e for e in reversed(h.h.snapshot()) if e.kind == "step")
    step.data["mcp_tool"] = mcp_tool_for(kw.get("new", handle))  # type: ignore[index]


def turn(h: H, handle: str, system: list[str], *tools: str) -> None:
    names = [*BASE, *(f"mcp__acp-fuzz__{t}" for t in tools)]
    h.prompt(handle, system=system, body={"tools": [
        {"type": "function", "function": {"name": n}} for n in names]})


def test_the_tool_is_per_handle_and_the_step_key_is_a_boolean() -> None:
    assert mcp_tool_for("A") != mcp_tool_for("B")
    assert mcp_tool_for("A").startswith("acpfuzz_mcp_") and len(mcp_tool_for("A")) == 22
    assert validate_step({"op": "new", "session": "A", "mcp": True})["mcp"] is True
    for bad in ("yes", 1, ["python", "-c", "evil"]):
        try:
            validate_step({"op": "load", "session": "A", "mcp": bad})
        except ValueError as e:
            assert "'mcp' must be true or false" in str(e)
        else:
            raise AssertionError(bad)


def test_the_tool_missing_under_override_is_a_must_and_under_append_a_should() -> None:
    h = H()
    named(h, "A")
    turn(h, "A", appended(), mcp_tool_for("A"))
    named(h, "B", sp("override", P))
    turn(h, "B", [P])
    named(h, "C", sp("append", Q))
    turn(h, "C", appended(Q))
    found = {f.session: f for f in h.findings() if f.oracle == "mcp.tool-missing"}
    assert (found["B"].severity, found["B"].rule) == ("MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF")
    assert (found["C"].severity, found["C"].rule) == ("SHOULD", "ACPFUZZ-APPEND-SCOPE-SHOULD")
    assert found["B"].evidence["tool"] == mcp_tool_for("B")
    assert "scope.tools-changed" not in ids(h.findings())  # the canary tools are mcp.*'s


def test_nothing_missing_where_no_plain_session_showed_an_mcp_tool() -> None:
    h = H()
    named(h, "A")
    turn(h, "A", appended())  # this agent passes no MCP tool on at all: not judged
    named(h, "B", sp("override", P))
    turn(h, "B", [P])
    assert "mcp.tool-missing" not in ids(h.findings())
    e = Evaluator()
    e.feed(h.h.snapshot())
    assert ("mcp.tool-missing", "SP-AGENT-OVERRIDE-SCOPE-DEF") not in e.judged()


def test_another_session_s_tool_is_a_leak_its_own_and_a_fork_source_s_are_not() -> None:
    h = H()
    named(h, "A")
    turn(h, "A", appended(), mcp_tool_for("A"))
    h.new("B")
    turn(h, "B", appended(), mcp_tool_for("A"))
    f = only(h.findings(), "mcp.tool-leak")
    assert (f.session, f.evidence["foreign_session"], f.severity, f.rule) == \
        ("B", "A", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST")
    h2 = H()
    named(h2, "A")
    h2.step("fork", "A", new="C")
    turn(h2, "C", appended(), mcp_tool_for("A"))  # the fork may hold its source's
    named(h2, "A", op="load")
    turn(h2, "A", appended(), mcp_tool_for("A"))
    h2.step("load", "A")  # a load that names no server: the tool is no longer owed
    turn(h2, "A", appended())
    assert not {"mcp.tool-leak", "mcp.tool-missing"} & ids(h2.findings())


def test_the_server_entry_names_its_transport_in_v2_only() -> None:
    from acp_fuzz.core.steps import lifecycle_request

    server = [{"name": "acp-fuzz", "command": "/py", "args": [], "env": []}]
    step = {"op": "new", "session": "A", "mcp": True}
    assert lifecycle_request(step, mcp_servers=server)[1]["mcpServers"] == server
    assert lifecycle_request(step, protocol=2, mcp_servers=server)[1]["mcpServers"] == [
        {**server[0], "type": "stdio"}]
    assert lifecycle_request({"op": "new", "session": "A"}, mcp_servers=server)[1][
        "mcpServers"] == []
