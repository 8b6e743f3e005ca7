#!/usr/bin/env python3
"""Answers with wrong ids. For the first request (id N): an answer with id N + 1000, one with
the string id "N", then the right answer, then the right answer again (a duplicate). For every
later request: first another duplicate of the first answer, then the right answer
{"n": <its id>}. Exits 0 at stdin EOF."""

from _agentlib import read_msg, send

first = read_msg()
if first is not None:
    rid = first["id"]
    send({"jsonrpc": "2.0", "id": rid + 1000, "result": {"which": "unknown"}})
    send({"jsonrpc": "2.0", "id": str(rid), "result": {"which": "string"}})
    send({"jsonrpc": "2.0", "id": rid, "result": {"which": "right"}})
    send({"jsonrpc": "2.0", "id": rid, "result": {"which": "duplicate"}})
    while (msg := read_msg()) is not None:
        if "id" in msg:
            send({"jsonrpc": "2.0", "id": rid, "result": {"which": "duplicate"}})
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"n": msg["id"]}})
