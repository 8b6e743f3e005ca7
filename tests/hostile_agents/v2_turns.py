#!/usr/bin/env python3
"""A minimal ACP v2 agent with odd but telling turns, chosen by argv[1]:

* ``idle-first``: a turn's ``running`` and ``idle`` updates are written before the answer
  to ``session/prompt`` (the v2 spec lets updates and answers race);
* ``no-idle``: the prompt is answered with its ``messageId`` and reported ``running``, and
  the turn never ends (no ``idle``): a hang that only the state updates show.

It never calls a model: a turn only exercises the protocol.
"""

import sys

from _agentlib import read_msg, reply, send

MODE = sys.argv[1]
INIT = {"protocolVersion": 2, "info": {"name": "v2-turns-test-agent", "version": "0"},
        "capabilities": {"session": {}}, "authMethods": []}


def update(sid: str, upd: dict) -> None:
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": sid, "update": upd}})


count = 0
while True:
    msg = read_msg()
    if msg is None:
        break
    method = msg.get("method")
    if "id" not in msg:
        continue
    if method == "initialize":
        reply(msg, INIT)
    elif method == "session/new":
        count += 1
        reply(msg, {"sessionId": f"s{count}"})
    elif method == "session/prompt":
        sid = msg["params"]["sessionId"]
        running = {"sessionUpdate": "state_update", "state": "running"}
        idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
        if MODE == "idle-first":
            update(sid, running)
            update(sid, idle)
            reply(msg, {"messageId": "m1"})
        else:
            reply(msg, {"messageId": "m1"})
            update(sid, running)
    else:
        send({"jsonrpc": "2.0", "id": msg["id"],
              "error": {"code": -32601, "message": "Method not found"}})
