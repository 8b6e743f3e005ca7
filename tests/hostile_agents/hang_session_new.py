#!/usr/bin/env python3
"""Answers initialize; on session/new stops reading and hangs forever (dies on SIGTERM)."""

from _agentlib import INIT_RESULT, hang, read_msg, reply

while True:
    msg = read_msg()
    if msg is None:
        break
    if msg.get("method") == "session/new":
        break
    if "id" in msg:
        reply(msg, INIT_RESULT)
hang()
