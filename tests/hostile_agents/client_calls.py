#!/usr/bin/env python3
"""Calls the client. On `_test/call_client {"calls": [{"method", "params"}, ...]}` it sends each
call to the client as a request (ids "c1", "c2", ...), waits for each answer, and answers with
{"responses": [<the answer objects, as received>]}. initialize gets a v1 result. Exits 0 at EOF.
"""

from _agentlib import INIT_RESULT, read_msg, reply, send

counter = 0
while (msg := read_msg()) is not None:
    if "id" not in msg:
        continue
    if msg.get("method") == "_test/call_client":
        responses = []
        for call in msg["params"]["calls"]:
            counter += 1
            cid = f"c{counter}"
            send({"jsonrpc": "2.0", "id": cid, "method": call["method"],
                  "params": call.get("params")})
            while (answer := read_msg()) is not None:
                if answer.get("id") == cid and "method" not in answer:
                    responses.append(answer)
                    break
        reply(msg, {"responses": responses})
    else:
        reply(msg, INIT_RESULT)
