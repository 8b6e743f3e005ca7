#!/usr/bin/env python3
"""A correct agent whose command list arrives late: after a prompt's answer, one line later.

Like codex-acp, it announces its commands (``available_commands_update`` with ``compact``)
after the fact rather than in an answer; here deterministically. Its command list is ready
once it has served two turns (loaded lazily, as real agents load their skills), and it
writes the announcement, for the session of that second turn, only when its next input line
arrives, before it handles that line. So a client that stops right after the second turn's
answer never sees it, and one that makes a round trip (any request) always does.

It advertises no ``systemPrompt`` (so a campaign judges none of its sessions' prompts) and
calls no model. ``/compact`` is answered as any turn (``end_turn``); every other method but
``initialize``, ``session/new`` and ``session/prompt`` gets ``-32601``. At the end of its
input it exits at once.
"""

from __future__ import annotations

from typing import Any

from _agentlib import INIT_RESULT, BasicAgent, read_msg, send

ANNOUNCE_AFTER_TURNS = 2


def announcement(session_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session_id,
        "update": {"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "compact", "description": "Summarise the conversation"}]}}}


def main() -> None:
    agent = BasicAgent(INIT_RESULT)  # no systemPrompt advertised: none is judged
    turns = 0
    pending: str | None = None  # the session whose announcement waits for the next line
    announced = False
    while (msg := read_msg()) is not None:
        if pending is not None:
            send(announcement(pending))
            pending, announced = None, True
        if "id" not in msg or "method" not in msg:
            continue
        agent.answer(msg)
        if msg["method"] == "session/prompt":
            turns += 1
            if turns >= ANNOUNCE_AFTER_TURNS and not announced:
                pending = msg["params"]["sessionId"]


if __name__ == "__main__":
    main()
