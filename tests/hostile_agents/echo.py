#!/usr/bin/env python3
"""A well-behaved agent for basic tests; exits 0 at stdin EOF.

initialize -> a v1 result; session/new -> {"sessionId": "s-<n>"};
_test/emit {"stdout": [lines], "stderr": text, "stderr_bytes": n, "notifications": n} -> writes
    them, then {}; _test/env -> the environment; _test/fail -> error -32000 with params as data;
_test/hold -> answered only when the notification _test/release arrives;
anything else -> {"method": ..., "params": ...}. A line that is not JSON -> -32700 with id null.
"""

import json
import os
import sys

from _agentlib import INIT_RESULT, log, reply, send, write_raw

log("echo agent ready")
sessions = 0
held = []
for line in sys.stdin.buffer:
    try:
        msg = json.loads(line)
    except ValueError:
        send({"jsonrpc": "2.0", "id": None,
              "error": {"code": -32700, "message": "Parse error"}})
        continue
    method = msg.get("method")
    params = msg.get("params")
    if "id" not in msg:
        if method == "_test/release":
            for req in held:
                reply(req, {"released": True})
            held.clear()
        continue
    if method == "initialize":
        reply(msg, INIT_RESULT)
    elif method == "session/new":
        sessions += 1
        reply(msg, {"sessionId": f"s-{sessions}"})
    elif method == "_test/emit":
        for text in params.get("stdout", []):
            write_raw(text.encode("utf-8") + b"\n")
        for i in range(params.get("notifications", 0)):
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"n": i}})
        if params.get("stderr"):
            sys.stderr.write(params["stderr"])
        if params.get("stderr_bytes"):
            sys.stderr.write("e" * params["stderr_bytes"])
        sys.stderr.flush()
        reply(msg, {})
    elif method == "_test/env":
        reply(msg, dict(os.environ))
    elif method == "_test/fail":
        send({"jsonrpc": "2.0", "id": msg["id"],
              "error": {"code": -32000, "message": "requested failure", "data": params}})
    elif method == "_test/hold":
        held.append(msg)
    else:
        reply(msg, {"method": method, "params": params})
