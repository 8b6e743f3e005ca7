#!/usr/bin/env python3
"""On initialize, writes the first half of its answer (no newline) and goes silent; exits 0 at
stdin EOF, leaving the half line as the last thing on stdout."""

from _agentlib import drain_stdin, read_msg, write_raw

msg = read_msg()
if msg is not None:
    write_raw(b'{"jsonrpc":"2.0","id":%d,"result":{"protocolVer' % msg["id"])
drain_stdin()
