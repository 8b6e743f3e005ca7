"""acp-fuzz's stdio MCP server (``python -m acp_fuzz.mcp_server``), spoken to by the official
MCP Python SDK's client, as an agent would launch it: initialize, the tool listed under the
name it was given, a call answered, an unknown tool refused (issue #33 §1)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOOL = "acpfuzz_mcp_1a2b3c4d"


async def _talk() -> tuple[str, list[str], str, bool]:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "acp_fuzz.mcp_server", "--tool", TOOL])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        called = await session.call_tool(TOOL, {})
        text = called.content[0].text if called.content else ""  # type: ignore[union-attr]
        return (init.server_info.name, [t.name for t in tools.tools], text,
                bool(called.is_error))


def test_the_official_client_lists_and_calls_the_tool() -> None:
    name, tools, text, error = asyncio.run(_talk())
    assert (name, tools, text, error) == ("acp-fuzz", [TOOL], "ok", False)


def test_bad_input_gets_errors_not_a_crash_and_a_bad_name_is_refused() -> None:
    lines = [b"not json\n", b"[1]\n",
             json.dumps({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}).encode() + b"\n",
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "other"}}).encode() + b"\n",
             json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
             + b"\n"]
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz.mcp_server", "--tool", TOOL],
                          input=b"".join(lines), capture_output=True, timeout=30, check=True)
    codes = [json.loads(x)["error"]["code"] for x in proc.stdout.splitlines()]
    assert codes == [-32700, -32600, -32601, -32602]
    bad = subprocess.run([sys.executable, "-m", "acp_fuzz.mcp_server", "--tool", "a b"],
                         capture_output=True, timeout=30)
    assert bad.returncode == 2 and b"--tool" in bad.stderr


def test_the_reference_agent_launches_it_inside_the_fs_sandbox(no_orphans: object) -> None:
    """A step naming the server: the reference agent, confined by ``--sandbox-fs``, starts it
    (the sandbox shows this interpreter and package read-only) and its tool reaches the
    model in that session's request and no other's."""
    from dataclasses import replace

    from acp_fuzz.core.baseline import Baseline
    from acp_fuzz.core.steps import mcp_tool_for
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import run_steps
    from acp_fuzz.engine.process.sandbox import bwrap_works
    from tests.security._isolation import missing

    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    spec = replace(TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"]),
                   sandbox_fs=True)
    history, found = run_steps(spec, [
        {"op": "new", "session": "A", "cwd": "distinct", "mcp": True},
        {"op": "prompt", "session": "A"},
        {"op": "new", "session": "B", "cwd": "distinct"}, {"op": "prompt", "session": "B"}],
        baseline=Baseline())
    tools = [[t["function"]["name"] for t in e.data["body"]["tools"]]
             for e in history.events if e.kind == "model"]
    assert tools == [["read_file", "list_directory", f"mcp__acp-fuzz__{mcp_tool_for('A')}"],
                     ["read_file", "list_directory"]]
    assert [f for f in found if f.severity != "info"] == []
    sent = [e.data["msg"]["params"]["mcpServers"] for e in history.events if e.kind == "acp"
            and e.data["dir"] == "send" and e.data["msg"].get("method") == "session/new"]
    assert sent[0][0]["args"] == ["-m", "acp_fuzz.mcp_server", "--tool", mcp_tool_for("A")]
    assert sent[1] == []
