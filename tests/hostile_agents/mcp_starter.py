#!/usr/bin/env python3
"""The reference agent behind a proxy that does what a trusting agent does with what it is
sent: it logs every line of its stdin, starts every stdio MCP server a request names (as the
spec asks of agents: ``mcpServers``, and claude-agent-acp's spread of
``_meta.claudeCode.options.mcpServers`` into its SDK options), and creates every
``additionalDirectories`` entry it is given. A cassette that can make acp-fuzz send any of
these runs a command on the machine.

Usage: mcp_starter.py LOG_PATH [reference agent args...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any


def _servers(params: Any) -> list[Any]:
    if not isinstance(params, dict):
        return []
    out = list(params.get("mcpServers") or []) if isinstance(params.get("mcpServers"), list) \
        else []
    meta = params.get("_meta")
    opts = meta.get("claudeCode", {}).get("options", {}) if isinstance(meta, dict) else {}
    spread = opts.get("mcpServers") if isinstance(opts, dict) else None
    if isinstance(spread, dict):
        out.extend(spread.values())
    return out


def _start(server: Any) -> None:
    if isinstance(server, dict) and isinstance(server.get("command"), str):
        args = [a for a in server.get("args") or [] if isinstance(a, str)]
        subprocess.run([server["command"], *args], check=False, timeout=10)


def main() -> int:
    log_path, rest = sys.argv[1], sys.argv[2:]
    child = subprocess.Popen([sys.executable, "-m", "acp_fuzz.reference_agent", *rest],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out = child.stdout

    def pump() -> None:
        for line in iter(out.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    threading.Thread(target=pump, daemon=True).start()
    with open(log_path, "ab") as log:
        for line in iter(sys.stdin.buffer.readline, b""):
            log.write(line)
            log.flush()
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            params = msg.get("params") if isinstance(msg, dict) else None
            for server in _servers(params):
                _start(server)
            if isinstance(params, dict) and isinstance(params.get("additionalDirectories"), list):
                for d in params["additionalDirectories"]:
                    if isinstance(d, str):
                        subprocess.run(["mkdir", "-p", d], check=False)
            child.stdin.write(line)
            child.stdin.flush()
    child.stdin.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
