"""The reference agent's MCP client: the stdio servers a session names, and their tools.

When ``session/new``, ``session/load``, ``session/resume`` or ``session/fork`` names stdio
MCP servers (``mcpServers`` entries with a ``command``), the agent starts each one, asks it
``initialize`` and ``tools/list`` (the requests written at once, in order; the server exits
when its stdin ends), and offers the session's model requests each tool as the Chat
Completions function ``mcp__<server>__<tool>``. It never calls one: the fake model answers in
text. A server that does not start or answer within :data:`TIMEOUT_S` offers nothing (one
log line). The servers are the session's own: a load or resume that names none leaves the
session with none, and a fork has the servers its request names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

__all__ = ["TIMEOUT_S", "connect", "function_tools"]

TIMEOUT_S = 10.0
_VERSION = "2025-06-18"


def connect(servers: Any, log: Callable[[str], None]) -> list[tuple[str, dict[str, Any]]]:
    """``(server name, tool)`` for every tool of every stdio server in ``servers`` (an
    ``mcpServers`` array the request validated)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for server in servers if isinstance(servers, list) else []:
        if isinstance(server, dict) and isinstance(server.get("command"), str):
            name = str(server.get("name", "mcp"))
            out += [(name, tool) for tool in _tools(server, log)]
    return out


def _tools(server: dict[str, Any], log: Callable[[str], None]) -> list[dict[str, Any]]:
    args = [a for a in server.get("args", []) if isinstance(a, str)] \
        if isinstance(server.get("args"), list) else []
    env = dict(os.environ)
    for e in server.get("env", []) if isinstance(server.get("env"), list) else []:
        if isinstance(e, dict) and isinstance(e.get("name"), str) \
                and isinstance(e.get("value"), str):
            env[e["name"]] = e["value"]
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": _VERSION, "capabilities": {},
            "clientInfo": {"name": "acp-fuzz-reference-agent", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}]
    try:
        proc = subprocess.run([server["command"], *args], env=env, capture_output=True,
                              input="".join(json.dumps(r) + "\n" for r in requests),
                              text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        log(f"mcp server {server.get('name')!r} not started: {type(e).__name__}")
        return []
    for line in proc.stdout.splitlines():
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        result = answer.get("result") if isinstance(answer, dict) else None
        if answer.get("id") == 2 and isinstance(result, dict) \
                and isinstance(result.get("tools"), list):
            return [t for t in result["tools"]
                    if isinstance(t, dict) and isinstance(t.get("name"), str)]
    log(f"mcp server {server.get('name')!r} listed no tools")
    return []


def function_tools(tools: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], ...]:
    """The session's MCP tools as Chat Completions function tools."""
    return tuple({"type": "function", "function": {
        "name": f"mcp__{server}__{tool['name']}"[:64],
        "description": str(tool.get("description", ""))[:1024],
        "parameters": tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict)
        else {"type": "object", "properties": {}}}} for server, tool in tools)
