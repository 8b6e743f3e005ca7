#!/usr/bin/env python3
"""Before answering initialize, writes a JSON-looking line containing invalid UTF-8 bytes."""

from _agentlib import INIT_RESULT, drain_stdin, read_msg, reply, write_raw

msg = read_msg()
write_raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"text":"bad \xff\xfe bytes"}}\n')
if msg is not None:
    reply(msg, INIT_RESULT)
drain_stdin()
