#!/usr/bin/env python3
"""Floods the client with answers to requests it never sent.

Well-behaved (initialize, session/new, session/prompt, like ``later.py``) until a request that
carries a ``systemPrompt``; before answering each such request it writes COUNT responses whose
ids no request has (numbers from 10**9 and strings), each carrying SIZE characters of text.
``flood_responses.py [COUNT [SIZE]]``: 100,000 and 1,000 by default. Exits 0 at stdin EOF.
"""

import sys

from _agentlib import BasicAgent

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
SIZE = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000


def flood() -> None:
    out = sys.stdout.buffer
    text = b"x" * SIZE
    for i in range(COUNT):
        rid = b"%d" % (10**9 + i) if i % 2 else b'"stray-%d"' % i
        out.write(b'{"jsonrpc":"2.0","id":%s,"result":{"text":"%s"}}\n' % (rid, text))
    out.flush()


BasicAgent().serve(flood)
