#!/usr/bin/env python3
"""Floods the client with requests of its own (agent-to-client JSON-RPC requests).

Well-behaved (initialize, session/new, session/prompt, like ``later.py``) until a request that
carries a ``systemPrompt``; before answering each such request it sends COUNT requests to the
client, then one more ``session/request_permission`` (``toolCallId`` "last"), then the answer.
``flood_requests.py MODE [COUNT [SIZE]]``:

- ``read``: COUNT ``fs/read_text_file`` requests for a file of SIZE bytes that it writes in
  its working directory first (big answers); it reads the answers as they come (a thread);
- ``ask``: COUNT ``session/request_permission`` requests each padded with SIZE characters (big
  requests, small answers); it reads the answers as they come;
- ``deaf``: as ``read``, but after answering the trigger it never reads its stdin again (so
  the client cannot deliver any answer); it waits for a signal.

Defaults: COUNT 1,000, SIZE 1 MiB (``read``, ``deaf``) or 64 KiB (``ask``). Exits 0 at stdin
EOF (``read``, ``ask``).
"""

import json
import os
import queue
import sys
import threading
from typing import Any

from _agentlib import BasicAgent, hang, read_msg, send

MODE = sys.argv[1] if len(sys.argv) > 1 else "read"
if MODE not in ("read", "ask", "deaf"):
    sys.exit(f"flood_requests.py: unknown mode {MODE!r}; one of read, ask, deaf")
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else (64 * 1024 if MODE == "ask" else 1 << 20)
PATH = os.path.join(os.getcwd(), "flood.txt")


def flood(session_id: str) -> None:
    out = sys.stdout.buffer
    if MODE in ("read", "deaf"):
        with open(PATH, "w") as f:
            f.write(("y" * 1023 + "\n") * (SIZE // 1024) + "y" * (SIZE % 1024))
        line = json.dumps({"jsonrpc": "2.0", "method": "fs/read_text_file",
                           "params": {"sessionId": session_id, "path": PATH}})[1:]
        for i in range(COUNT):
            out.write(b'{"id":"r%d",%s\n' % (i, line.encode()))
    else:
        pad = "z" * SIZE
        for i in range(COUNT):
            out.write(json.dumps({"jsonrpc": "2.0", "id": f"p{i}",
                                  "method": "session/request_permission",
                                  "params": {"sessionId": session_id,
                                             "toolCall": {"toolCallId": f"t{i}", "title": pad},
                                             "options": [{"optionId": "no", "name": "No",
                                                          "kind": "reject_once"}]}}
                                 ).encode() + b"\n")
    send({"jsonrpc": "2.0", "id": "last", "method": "session/request_permission",
          "params": {"sessionId": session_id, "toolCall": {"toolCallId": "last"},
                     "options": [{"optionId": "no", "name": "No", "kind": "reject_once"}]}})


def requests() -> Any:
    """The client's requests, in order; answers to ours are read and dropped. ``read`` and
    ``ask`` read stdin on a thread, so the client's answers never back up."""
    if MODE == "deaf":
        while (msg := read_msg()) is not None:
            if "id" in msg and "method" in msg:
                yield msg
        return
    q: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()

    def reader() -> None:
        for raw in sys.stdin.buffer:
            if raw.startswith(b'{"jsonrpc":"2.0","id":"') and b'"method"' not in raw:
                continue  # an answer to one of ours: not parsed, dropped
            msg = json.loads(raw)
            if "id" in msg and "method" in msg:
                q.put(msg)
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    while (msg := q.get()) is not None:
        yield msg


agent = BasicAgent()
for msg in requests():
    params = msg.get("params")
    if isinstance(params, dict) and "systemPrompt" in params:
        flood(f"s-{agent.sessions + 1}" if msg["method"] == "session/new"
              else str(params.get("sessionId", "s-1")))
        agent.answer(msg)
        if MODE == "deaf":
            hang()
    else:
        agent.answer(msg)
