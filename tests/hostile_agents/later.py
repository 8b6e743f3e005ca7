#!/usr/bin/env python3
"""Well-behaved until the first request that carries a ``systemPrompt``, then hostile.

So that ``acp-fuzz target`` gets through the probe and the calibration (initialize, then
prompt-less session/new and session/prompt, which this agent answers correctly without calling
any model) and reports what the misbehaviour is as a finding. ``later.py MODE``:

- ``exit``: exits with status 5 without answering the trigger;
- ``hang``: stops reading and never answers (dies on SIGTERM);
- ``ignore-sigterm``: ignores SIGTERM, then as ``hang``;
- ``grandchild``: at start, leaves a ``sleep 1000`` child holding stdin/stdout/stderr; at the
  trigger, exits 0 without answering;
- ``non-json``: writes a line of plain text, then answers;
- ``invalid-utf8``: writes a JSON-looking line with invalid UTF-8, then answers;
- ``huge-line``: writes one 40 MB line (in 1 MiB pieces), then answers;
- ``flood``: writes 100,000 valid ``session/update`` notifications, then answers;
- ``half-line``: writes the first half of its answer without a newline, then only reads;
- ``wrong-ids``: answers with an unknown id, then with the right one, then again (duplicate);
- ``deep``: writes a notification nested 200 levels deep and one nested 100,000 levels deep
  (valid JSON; more than Python's parser takes), then answers;
- ``slow [SECONDS]``: answers correctly, but only after SECONDS (default 3): slow, not hung;
- ``slow-exit``: never misbehaves on a request, but like codex-acp takes its time to leave:
  after stdin EOF it waits 0.5 s more (writing its state, say), then exits 0.

Every request after the trigger is treated the same way (the trigger repeats per request).
Where it answers, it answers like a correct agent (an invalid systemPrompt gets -32602), so
that the misbehaviour is the only finding.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from _agentlib import INIT_RESULT, drain_stdin, hang, read_msg, reply, send, write_raw

MODE = sys.argv[1] if len(sys.argv) > 1 else "exit"
MODES = ("exit", "hang", "ignore-sigterm", "grandchild", "non-json", "invalid-utf8",
         "huge-line", "flood", "half-line", "wrong-ids", "deep", "slow", "slow-exit")
if MODE not in MODES:
    sys.exit(f"later.py: unknown mode {MODE!r}; one of {', '.join(MODES)}")

INIT = {**INIT_RESULT, "agentCapabilities": {
    "sessionCapabilities": {"systemPrompt": {"mode": {"override": {}}}}}}

if MODE == "grandchild":
    sleep = shutil.which("sleep")
    argv = [sleep, "1000"] if sleep else [sys.executable, "-c", "import time; time.sleep(1000)"]
    subprocess.Popen(argv)  # inherits fds 0, 1 and 2


def huge_line() -> None:
    total = 40 * 1000 * 1000
    head = b'{"jsonrpc":"2.0","method":"session/update","params":{"blob":"'
    tail = b'"}}\n'
    chunk = b"a" * (1 << 20)
    write_raw(head)
    left = total - len(head) - len(tail) + 1
    while left > 0:
        piece = chunk[: min(left, len(chunk))]
        write_raw(piece)
        left -= len(piece)
    write_raw(tail)


def flood(session_id: str) -> None:
    out = sys.stdout.buffer
    for i in range(100_000):
        out.write(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"%s",'
                  b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
                  b'"text":"chunk %d"}}}}\n' % (session_id.encode(), i))
    out.flush()


def valid_system_prompt(params: Any) -> bool:
    """Absent, null, or {"mode": "append"|"override", "content": [text blocks, ...]}."""
    if not isinstance(params, dict) or params.get("systemPrompt") is None:
        return True
    sp = params["systemPrompt"]
    if not isinstance(sp, dict) or sp.get("mode") not in ("append", "override"):
        return False
    content = sp.get("content")
    return isinstance(content, list) and bool(content) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content)


def answer(msg: dict[str, Any]) -> None:
    method = msg.get("method")
    if method == "initialize":
        reply(msg, INIT)
    elif not valid_system_prompt(msg.get("params")):
        # Rejected like a correct agent would: the only findings are the misbehaviour's own.
        send({"jsonrpc": "2.0", "id": msg["id"],
              "error": {"code": -32602, "message": "Invalid params: systemPrompt"}})
    elif method == "session/new":
        global sessions
        sessions += 1
        reply(msg, {"sessionId": f"s-{sessions}"})
    elif method == "session/prompt":
        reply(msg, {"stopReason": "end_turn"})
    else:
        send({"jsonrpc": "2.0", "id": msg["id"],
              "error": {"code": -32601, "message": "Method not found"}})


def misbehave(msg: dict[str, Any]) -> None:
    if MODE in ("exit", "grandchild"):
        os._exit(5 if MODE == "exit" else 0)
    if MODE in ("hang", "ignore-sigterm"):
        if MODE == "ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        hang()
    if MODE == "half-line":
        write_raw(b'{"jsonrpc":"2.0","id":%d,"result":{"sessio' % msg["id"])
        drain_stdin()
        sys.exit(0)
    if MODE == "non-json":
        write_raw(b"Thinking... (this is not JSON)\n")
    elif MODE == "invalid-utf8":
        write_raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"t":"\xff\xfe"}}\n')
    elif MODE == "huge-line":
        huge_line()
    elif MODE == "flood":
        flood(f"s-{sessions + 1}" if msg.get("method") == "session/new" else
              str((msg.get("params") or {}).get("sessionId", "s-1")))
    elif MODE == "deep":
        for depth in (200, 100_000):
            write_raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"t":'
                      + b"[" * depth + b"]" * depth + b"}}\n")
    elif MODE == "slow":
        time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 3.0)
    elif MODE == "wrong-ids":
        send({"jsonrpc": "2.0", "id": msg["id"] + 1000, "error": {"code": -32000,
                                                                 "message": "wrong id"}})
    answer(msg)
    if MODE == "wrong-ids":
        answer(msg)  # the same answer twice: a duplicate id


sessions = 0
while (msg := read_msg()) is not None:
    if "id" not in msg or "method" not in msg:
        continue  # notifications (session/cancel) and answers
    params = msg.get("params")
    if isinstance(params, dict) and "systemPrompt" in params and MODE != "slow-exit":
        misbehave(msg)
    else:
        answer(msg)
if MODE == "slow-exit":
    time.sleep(0.5)
