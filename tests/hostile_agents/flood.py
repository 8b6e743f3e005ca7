#!/usr/bin/env python3
"""On initialize, writes 100,000 session/update notifications first, then the answer."""

import sys

from _agentlib import INIT_RESULT, drain_stdin, read_msg, reply

COUNT = 100_000
msg = read_msg()
out = sys.stdout.buffer
for i in range(COUNT):
    out.write(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1",'
              b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
              b'"text":"chunk %d"}}}}\n' % i)
out.flush()
if msg is not None:
    reply(msg, INIT_RESULT)
drain_stdin()
