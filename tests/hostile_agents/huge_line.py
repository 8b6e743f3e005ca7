#!/usr/bin/env python3
"""Before answering initialize, writes one 40 MB notification line (in 1 MiB pieces, so the
agent never holds it whole either)."""

from _agentlib import INIT_RESULT, drain_stdin, read_msg, reply, write_raw

TOTAL = 40 * 1000 * 1000
msg = read_msg()
head = b'{"jsonrpc":"2.0","method":"session/update","params":{"blob":"'
tail = b'"}}\n'
write_raw(head)
chunk = b"a" * (1 << 20)
left = TOTAL - len(head) - len(tail) + 1  # +1: the newline is not part of the line
while left > 0:
    piece = chunk[: min(left, len(chunk))]
    write_raw(piece)
    left -= len(piece)
write_raw(tail)
if msg is not None:
    reply(msg, INIT_RESULT)
drain_stdin()
