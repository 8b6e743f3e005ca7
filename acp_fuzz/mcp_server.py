"""acp-fuzz's MCP server: a small, real stdio MCP server that offers one tool.

Run it as ``python -m acp_fuzz.mcp_server --tool NAME``. It speaks the Model Context Protocol
(JSON-RPC 2.0, one message per line, on stdin and stdout) as a server: ``initialize``
(answered with the protocol version the client asked for when it is one of
:data:`VERSIONS`, else the newest), ``ping``, ``tools/list`` (one tool, ``NAME``, which takes
no argument) and ``tools/call`` of that tool (it answers ``ok``); every other request gets
``-32601``, notifications (``notifications/initialized``, ``notifications/cancelled``) are
read and ignored, and a line that is not JSON gets ``-32700``. It exits when stdin ends.

acp-fuzz names it in the ``mcpServers`` of a step that says ``"mcp": true`` (the harness
builds the command line: this interpreter, this module, a tool name that is a canary of the
session, ``acpfuzz_mcp_<hex>``), so that the oracles can see whether the server's tool
reaches the model in the session that named it, and in no other (``mcp.tool-missing``,
``mcp.tool-leak``). It is the standard library alone, like the reference agent: an agent
launches it inside the same sandbox, which shows this interpreter and package read-only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import IO, Any

__all__ = ["SERVER_NAME", "VERSIONS", "handle", "main", "serve"]

SERVER_NAME = "acp-fuzz"
#: The MCP protocol versions it answers, newest first.
VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
#: What a tool name may be (the model APIs' own limit: letters, digits, ``_`` and ``-``).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DESCRIPTION = "acp-fuzz's canary tool: answers ok. Call it only when asked to by name."


def handle(message: Any, tool: str) -> dict[str, Any] | None:
    """The answer to one parsed message (``None`` for a notification)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return {"jsonrpc": "2.0", "id": None,
                "error": {"code": -32600, "message": "Invalid Request"}}
    if "id" not in message:
        return None
    rid, method = message["id"], message.get("method")
    raw = message.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        result: dict[str, Any] = {
            "protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": SERVER_NAME, "version": "1.0.0"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [{"name": tool, "description": _DESCRIPTION,
                             "inputSchema": {"type": "object", "properties": {}}}]}
    elif method == "tools/call" and params.get("name") == tool:
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    elif method == "tools/call":
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32602, "message": "Unknown tool"}}
    else:
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def serve(tool: str, stdin: IO[str], stdout: IO[str]) -> int:
    """Answer every line of ``stdin`` on ``stdout`` until ``stdin`` ends."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            answer: dict[str, Any] | None = {"jsonrpc": "2.0", "id": None,
                                             "error": {"code": -32700, "message": "Parse error"}}
        else:
            answer = handle(message, tool)
        if answer is not None:
            stdout.write(json.dumps(answer, separators=(",", ":")) + "\n")
            stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acp_fuzz.mcp_server",
                                     description="acp-fuzz's stdio MCP server: one tool.")
    parser.add_argument("--tool", required=True, help="the tool's name")
    args = parser.parse_args(argv)
    if not TOOL_NAME.match(args.tool):
        parser.error("--tool: letters, digits, _ and - only, at most 64")
    return serve(args.tool, sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
