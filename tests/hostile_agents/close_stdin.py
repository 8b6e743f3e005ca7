#!/usr/bin/env python3
"""On initialize, closes its stdin, then answers, then hangs (alive, but deaf)."""

import os

from _agentlib import INIT_RESULT, hang, read_msg, reply

msg = read_msg()
os.close(0)
if msg is not None:
    reply(msg, INIT_RESULT)
hang()
