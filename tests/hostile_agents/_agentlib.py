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


#: ``INIT_RESULT`` advertising ``systemPrompt`` (override too): what the flood agents offer.
SP_INIT_RESULT = {**INIT_RESULT, "agentCapabilities": {
    "sessionCapabilities": {"systemPrompt": {"mode": {"override": {}}}}}}


class BasicAgent:
    """A minimal correct agent: answers ``initialize`` (with ``init``), ``session/new``
    (``s-1``, ``s-2``, ...) and ``session/prompt`` (``end_turn``); anything else is method
    not found. The hostile agents misbehave around it."""

    def __init__(self, init: dict[str, Any] = SP_INIT_RESULT) -> None:
        self.init = init
        self.sessions = 0

    def answer(self, msg: dict[str, Any]) -> None:
        method = msg["method"]
        if method == "initialize":
            reply(msg, self.init)
        elif method == "session/new":
            self.sessions += 1
            reply(msg, {"sessionId": f"s-{self.sessions}"})
        elif method == "session/prompt":
            reply(msg, {"stopReason": "end_turn"})
        else:
            send({"jsonrpc": "2.0", "id": msg["id"],
                  "error": {"code": -32601, "message": "Method not found"}})

    def serve(self, before_prompt_carrier: Any = None) -> None:
        """Answer requests from stdin until EOF, calling ``before_prompt_carrier()`` before
        answering each request whose params carry a ``systemPrompt``."""
        while (msg := read_msg()) is not None:
            if "id" not in msg or "method" not in msg:
                continue
            params = msg.get("params")
            if before_prompt_carrier is not None and isinstance(params, dict) \
                    and "systemPrompt" in params:
                before_prompt_carrier()
            self.answer(msg)


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
