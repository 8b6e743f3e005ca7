#!/usr/bin/env python3
"""An agent that answers requests while its turns wait on the model, as the real Node and
Rust agents do (codex-acp, claude-agent-acp, pi-acp): each ``session/prompt`` runs on a
thread of its own, which calls ``$OPENAI_BASE_URL/chat/completions`` with the prompt's text
and answers ``end_turn`` (each session's conversation is kept, and sent again with its next
turn, a load's too, after a restart as well); every other request is answered at once by
the reading thread.

``concurrent.py [drop-on-load]``: with ``drop-on-load``, a ``session/load`` takes
:data:`LOAD_SECONDS` (longer than the harness's settle of a request beside a held turn used
to be) and then drops the running turn of every other session, which is never answered:
pi-acp 0.0.34's ``loadSession`` ends with ``closeAllExcept`` (docs/findings.md, 2026-12-06).
Without it, a load is answered at once and drops nothing.
"""

import json
import os
import sys
import threading
import time
import urllib.request
from typing import Any

from _agentlib import read_msg, reply, send

DROP_ON_LOAD = "drop-on-load" in sys.argv[1:]
#: How long a load takes with ``drop-on-load`` (a slow load, as pi-acp's).
LOAD_SECONDS = 0.6
INIT = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True},
        "authMethods": [], "agentInfo": {"name": "concurrent-test-agent", "version": "0"}}
_out = threading.Lock()
_dropped: set[str] = set()  # sessions whose running turn a load dropped
_cancelled: set[str] = set()  # sessions whose running turn a session/cancel stopped
#: Each session's conversation, kept in a file so that a load after a restart has it.
STORE = os.path.join(os.environ.get("HOME", "."), ".concurrent-test-agent")


def _history(sid: str) -> list[dict[str, str]]:
    try:
        with open(os.path.join(STORE, sid + ".json"), encoding="utf-8") as f:
            return list(json.load(f))
    except (OSError, ValueError):
        return []


def _keep(sid: str, messages: list[dict[str, str]]) -> None:
    os.makedirs(STORE, exist_ok=True)
    with open(os.path.join(STORE, sid + ".json"), "w", encoding="utf-8") as f:
        json.dump(messages, f)


def _send(obj: Any) -> None:
    with _out:
        send(obj)


def _turn(msg: dict[str, Any]) -> None:
    params = msg.get("params") or {}
    sid = params.get("sessionId")
    text = " ".join(b.get("text", "") for b in params.get("prompt") or []
                    if isinstance(b, dict))
    messages = [*_history(sid), {"role": "user", "content": text}]
    body = json.dumps({"model": "m", "messages": messages})
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 data=body.encode(), method="POST", headers={
                                     "Content-Type": "application/json",
                                     "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())["choices"][0]["message"]["content"]
    except Exception as e:  # a failed model call (a cut answer too): say so
        _send({"jsonrpc": "2.0", "id": msg["id"], "error": {
            "code": -32603, "message": f"model call failed: {type(e).__name__}"}})
        return
    _keep(sid, [*messages, {"role": "assistant", "content": answer}])
    if sid in _dropped:
        return  # its process was disposed of mid-turn: nobody answers
    stop = "cancelled" if sid in _cancelled else "end_turn"
    _send({"jsonrpc": "2.0", "id": msg["id"], "result": {"stopReason": stop}})


def main() -> None:
    sessions = 0
    running: dict[str, threading.Thread] = {}
    while (msg := read_msg()) is not None:
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "session/cancel":
            _cancelled.add(params.get("sessionId"))
        if "id" not in msg or method is None:
            continue
        if method == "initialize":
            with _out:
                reply(msg, INIT)
        elif method == "session/new":
            sessions += 1
            with _out:
                reply(msg, {"sessionId": f"s-{os.getpid()}-{sessions}"})
        elif method == "session/prompt":
            _dropped.discard(params.get("sessionId"))
            _cancelled.discard(params.get("sessionId"))
            t = threading.Thread(target=_turn, args=(msg,), daemon=True)
            running[params.get("sessionId")] = t
            t.start()
        elif method == "session/load":
            if DROP_ON_LOAD:
                time.sleep(LOAD_SECONDS)
                _dropped.update(s for s, t in running.items()
                                if s != params.get("sessionId") and t.is_alive())
            with _out:
                reply(msg, {})
        else:
            _send({"jsonrpc": "2.0", "id": msg["id"],
                   "error": {"code": -32601, "message": "Method not found"}})


main()
