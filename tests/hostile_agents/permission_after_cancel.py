#!/usr/bin/env python3
"""Asks for permission after the client cancelled the turn. `session/new` gets session
"s-1"; on `session/prompt` it waits for the client's `session/cancel`, then sends
`session/request_permission` (allow options first, as a tool-happy agent would), waits for the
answer, logs it to stderr as `permission answer: <json>`, and ends the turn `cancelled`.
Exits 0 at EOF.
"""

import json

from _agentlib import INIT_RESULT, log, read_msg, reply, send

OPTIONS = [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
           {"optionId": "always", "name": "Always", "kind": "allow_always"},
           {"optionId": "no", "name": "Reject", "kind": "reject_once"}]

while (msg := read_msg()) is not None:
    method = msg.get("method")
    if method == "session/new":
        reply(msg, {"sessionId": "s-1"})
    elif method == "session/prompt":
        while (note := read_msg()) is not None and note.get("method") != "session/cancel":
            pass
        send({"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission",
              "params": {"sessionId": "s-1", "options": OPTIONS,
                         "toolCall": {"toolCallId": "t1", "title": "rm -rf ~"}}})
        while (answer := read_msg()) is not None and answer.get("id") != "perm-1":
            pass
        log("permission answer: " + json.dumps(answer and answer.get("result")))
        reply(msg, {"stopReason": "cancelled"})
    elif "id" in msg:
        reply(msg, INIT_RESULT)
