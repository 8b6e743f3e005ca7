#!/usr/bin/env python3
"""Floods the client with notifications that are small on the wire and big once parsed.

Well-behaved (initialize, session/new, session/prompt) until a request that carries a
``systemPrompt``; before answering each such request it writes COUNT ``session/update``
notifications, each holding a list of SIZE empty objects (``[{},{},...]``: 3 bytes an element
on the wire, about 72 in a Python harness). ``flood_shapes.py [COUNT [SIZE]]``: 200 and
100,000 by default. Exits 0 at stdin EOF.
"""

import sys

from _agentlib import BasicAgent

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 200
SIZE = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000


def flood() -> None:
    out = sys.stdout.buffer
    items = b",".join([b"{}"] * SIZE)
    for _ in range(COUNT):
        out.write(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1",'
                  b'"update":{"sessionUpdate":"agent_message_chunk","items":[%s]}}}\n' % items)
    out.flush()


BasicAgent().serve(flood)
