"""Bounds the transport keeps against a flooding agent (memory, not time)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.process.sandbox import Sandbox
from acp_fuzz.engine.process.transport import AgentProcess

pytestmark = pytest.mark.integration

AGENTS = Path(__file__).resolve().parent.parent / "hostile_agents"


def test_notifications_past_the_cap_are_counted_not_recorded(
        no_orphans: Callable[[int | None], None]) -> None:
    history = History()
    with Sandbox() as sb:
        agent = AgentProcess([sys.executable, str(AGENTS / "echo.py")], env=sb.build_env(),
                             cwd=sb.root, history=history, max_recorded_notifications=10)
        agent.start()
        no_orphans(agent.pgid)
        try:
            reply = agent.request("_test/emit", {"notifications": 25}, timeout=30)
            assert reply.outcome == "ok"  # the answer after the flood still arrives
            reply = agent.request("_test/emit", {"notifications": 5}, timeout=30)
            assert reply.outcome == "ok"
        finally:
            agent.close()
    events = history.snapshot()
    notes = [e for e in events if e.kind == "acp" and e.data["dir"] == "recv"
             and isinstance(e.data["msg"], dict) and "id" not in e.data["msg"]]
    assert len(notes) == 10
    assert agent.dropped_notifications == 20
    capped = [e.data for e in events if e.kind == "process"
              and e.data["what"] == "notifications-capped"]
    dropped = [e.data for e in events if e.kind == "process"
               and e.data["what"] == "notifications-dropped"]
    assert [c["limit"] for c in capped] == [10]
    assert [d["count"] for d in dropped] == [20]
    # The cap marker comes right after the last recorded notification.
    seq = {e.seq: e for e in events}
    cap_seq = next(e.seq for e in events if e.kind == "process"
                   and e.data["what"] == "notifications-capped")
    assert seq[cap_seq - 1] is notes[-1]


def test_notification_bytes_cap(no_orphans: Callable[[int | None], None]) -> None:
    # Every line is one notification; the byte budget stops recording before the count does.
    history = History()
    with Sandbox() as sb:
        agent = AgentProcess([sys.executable, str(AGENTS / "echo.py")], env=sb.build_env(),
                             cwd=sb.root, history=history, max_recorded_notifications=1000,
                             max_recorded_notification_bytes=500)
        agent.start()
        no_orphans(agent.pgid)
        try:
            reply = agent.request("_test/emit", {"notifications": 50}, timeout=30)
            assert reply.outcome == "ok"
        finally:
            agent.close()
    events = history.snapshot()
    notes = [e for e in events if e.kind == "acp" and e.data["dir"] == "recv"
             and isinstance(e.data["msg"], dict) and "id" not in e.data["msg"]]
    assert 0 < len(notes) < 50
    assert agent.dropped_notifications == 50 - len(notes)
    (capped,) = [e.data for e in events if e.kind == "process"
                 and e.data["what"] == "notifications-capped"]
    assert capped["limit_bytes"] == 500
