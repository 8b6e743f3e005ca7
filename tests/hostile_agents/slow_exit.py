#!/usr/bin/env python3
"""Correct, but like codex-acp slow to leave: after stdin EOF it takes 0.5 s more (writing its
state, say) and then exits 0. Answers initialize, session/new and session/prompt, no model."""

import time

from _agentlib import INIT_RESULT, read_msg, reply

count = 0
while True:
    msg = read_msg()
    if msg is None:
        break
    method = msg.get("method")
    if method == "initialize":
        reply(msg, INIT_RESULT)
    elif method == "session/new":
        count += 1
        reply(msg, {"sessionId": f"s{count}"})
    elif method == "session/prompt":
        reply(msg, {"stopReason": "end_turn"})
    elif "id" in msg:
        reply(msg, {})
time.sleep(0.5)
