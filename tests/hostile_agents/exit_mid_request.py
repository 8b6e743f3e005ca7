#!/usr/bin/env python3
"""Answers initialize, reads the next request, and exits with status 5 without answering it."""

import os

from _agentlib import INIT_RESULT, log, read_msg, reply

msg = read_msg()
if msg is not None:
    reply(msg, INIT_RESULT)
msg = read_msg()
log(f"exiting in the middle of {msg and msg.get('method')}")
os._exit(5)
