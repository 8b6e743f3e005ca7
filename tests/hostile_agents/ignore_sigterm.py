#!/usr/bin/env python3
"""Ignores SIGTERM, answers initialize, and hangs forever, even after stdin EOF."""

import signal

from _agentlib import INIT_RESULT, drain_stdin, hang, read_msg, reply

signal.signal(signal.SIGTERM, signal.SIG_IGN)
msg = read_msg()
if msg is not None:
    reply(msg, INIT_RESULT)
drain_stdin()
hang()
