#!/usr/bin/env python3
"""Before answering initialize, writes lines that are not JSON-RPC objects: plain text, a JSON
array, a JSON number, an empty line, broken JSON, NaN, and a valid notification ending in CRLF.
The initialize answer itself ends in CRLF too. Exits 0 at stdin EOF."""

from _agentlib import INIT_RESULT, drain_stdin, read_msg, send, write_raw

msg = read_msg()
write_raw(b"Starting agent... this is not json\n")
write_raw(b"[1, 2, 3]\n")
write_raw(b"42\n")
write_raw(b"\n")
write_raw(b'{"jsonrpc": "2.0", "method": \n')
write_raw(b"NaN\n")
send({"jsonrpc": "2.0", "method": "session/update", "params": {"crlf": True}}, end=b"\r\n")
if msg is not None:
    send({"jsonrpc": "2.0", "id": msg["id"], "result": INIT_RESULT}, end=b"\r\n")
drain_stdin()
