"""``session.listed-other-id`` and ``session.deleted-usable`` over hand-built histories (no
processes): what each judges, what it reports, and what it leaves alone (issue #38 §5)."""

from __future__ import annotations

from typing import Any

from acp_fuzz.core.findings import Finding
from acp_fuzz.core.oracles import Evaluator
from tests.cover.test_oracles import BASE, H

LISTED = "session.listed-other-id"
DELETED = "session.deleted-usable"


def _list(h: H, sessions: list[str], *, cursor: str | None = None, rid: int = 900) -> None:
    """A list step as the runner records it: the request, its answer, the verdicts."""
    h.h.append("step", {"index": h.index, "name": "list", "args": {"op": "list"}})
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid,
                                              "method": "session/list", "params": {}}})
    result: dict[str, Any] = {"sessions": [{"sessionId": s, "cwd": "/w"} for s in sessions]}
    if cursor is not None:
        result["nextCursor"] = cursor
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": rid, "result": result}})
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "ok"})
    h.h.append("verdict", {"step": h.index, "what": "probe-list", "outcome": "ok",
                           "sessions": sessions})
    h.index += 1


def _judge(h: H) -> tuple[list[Finding], dict[tuple[str, str], int]]:
    e = Evaluator(baseline=BASE)
    e.feed(h.h.snapshot())
    return e.findings(), e.judged()


def _cold(restart: bool = True) -> H:
    h = H()
    h.new("A")
    if restart:
        h.step("restart")
    h.step("load", "A")
    return h


def test_a_list_after_a_cold_load_that_shows_another_id_is_a_should() -> None:
    h = _cold()
    _list(h, ["sess-9"])
    found, judged = _judge(h)
    (f,) = [f for f in found if f.oracle == LISTED]
    assert (f.severity, f.rule, f.session, f.step) == ("SHOULD", "ACPFUZZ-LIST-IDS-SHOULD", "A",
                                                       3)
    assert f.evidence["session_id"] == "sess-1" and f.evidence["unknown"] == ["sess-9"]
    assert f.evidence["loaded_by"].startswith("3: session/load A")
    assert judged[(LISTED, "ACPFUZZ-LIST-IDS-SHOULD")] == 1


def test_its_own_id_listed_or_missing_alone_or_another_page_is_no_finding() -> None:
    for listed, cursor, counted in ((["sess-1"], None, 1), ([], None, 1),
                                    (["sess-9"], "next", 0)):
        h = _cold()
        _list(h, listed, cursor=cursor)
        found, judged = _judge(h)
        assert [f for f in found if f.oracle == LISTED] == [], listed
        assert judged.get((LISTED, "ACPFUZZ-LIST-IDS-SHOULD"), 0) == counted, listed


def test_a_warm_load_or_a_deleted_session_is_not_judged_by_the_list() -> None:
    h = _cold(restart=False)
    _list(h, ["sess-9"])
    found, judged = _judge(h)
    assert [f for f in found if f.oracle == LISTED] == []
    assert (LISTED, "ACPFUZZ-LIST-IDS-SHOULD") not in judged
    h = _cold()
    h.step("delete", "A")
    _list(h, ["sess-9"])
    assert [f for f in _judge(h)[0] if f.oracle == LISTED] == []


def test_a_turn_served_after_a_delete_is_recorded_at_info() -> None:
    h = H()
    h.new("A")
    h.step("delete", "A")
    h.step("prompt", "A", stop_reason="end_turn")
    found, judged = _judge(h)
    (f,) = [f for f in found if f.oracle == DELETED]
    assert (f.severity, f.rule, f.step) == ("info", "ACPFUZZ-DELETE-LIVE-MAY", 2)
    assert f.evidence == {"deleted_by": "2: session/delete A", "stopReason": "end_turn"}
    assert judged[(DELETED, "ACPFUZZ-DELETE-LIVE-MAY")] == 1
    # Only the info: nothing else is said of a turn of a session the tracker let go.
    assert [x for x in found if x.severity != "info"] == []


def test_a_refused_turn_or_a_new_session_under_the_handle_is_no_finding() -> None:
    h = H()
    h.new("A")
    h.step("delete", "A")
    h.step("prompt", "A", outcome="error", error={"code": -32002, "message": "not found"})
    found, judged = _judge(h)
    assert [f for f in found if f.oracle == DELETED] == []
    assert judged[(DELETED, "ACPFUZZ-DELETE-LIVE-MAY")] == 1
    assert [x for x in found if x.severity != "info"] == []
    h = H()
    h.new("A")
    h.step("delete", "A")
    h.new("A")
    h.step("prompt", "A", stop_reason="end_turn")
    found, judged = _judge(h)
    assert [f for f in found if f.oracle == DELETED] == []
    assert (DELETED, "ACPFUZZ-DELETE-LIVE-MAY") not in judged
