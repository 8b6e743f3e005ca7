"""Tiny stdlib-only helpers shared by the hostile test agents (not an agent itself)."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

INIT_RESULT = {
    "protocolVersion": 1,
    "agentCapabilities": {},
    "authMethods": [],
    "agentInfo": {"name": "hostile-test-agent", "version": "0"},
}


def read_msg() -> dict[str, Any] | None:
    """The next message from stdin, or None at EOF."""
    line = sys.stdin.buffer.readline()
    if not line:
        return None
    return json.loads(line)


def send(obj: Any, end: bytes = b"\n") -> None:
    sys.stdout.buffer.write(json.dumps(obj).encode("utf-8") + end)
    sys.stdout.buffer.flush()


def write_raw(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def reply(req: dict[str, Any], result: Any) -> None:
    send({"jsonrpc": "2.0", "id": req["id"], "result": result})


def log(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def drain_stdin() -> None:
    """Read and ignore stdin until EOF."""
    while sys.stdin.buffer.read(65536):
        pass


def hang() -> None:
    """Block forever (until a signal that is not ignored)."""
    while True:
        signal.pause()
