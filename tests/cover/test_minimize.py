"""The minimizer only tries sequences the lifecycle machine itself could have drawn (pure)."""

from __future__ import annotations

from acp_fuzz.campaign import _canonical_handles, _references_ok, _short_forms

NEW_A = {"op": "new", "session": "A"}


def test_a_turn_after_a_restart_needs_a_load_first() -> None:
    assert not _references_ok([NEW_A, {"op": "restart"}, {"op": "prompt", "session": "A"}])
    assert not _references_ok([NEW_A, {"op": "restart"}, {"op": "cancel", "session": "A"}])
    assert _references_ok([NEW_A, {"op": "restart"}, {"op": "load", "session": "A"},
                           {"op": "prompt", "session": "A"}])


def test_a_closed_session_is_reattached_before_use() -> None:
    closed = [NEW_A, {"op": "close", "session": "A"}]
    assert not _references_ok([*closed, {"op": "prompt", "session": "A"}])
    assert _references_ok([*closed, {"op": "resume", "session": "A"},
                            {"op": "prompt", "session": "A"}])


def test_unknown_sessions_are_not_tried() -> None:
    assert not _references_ok([{"op": "load", "session": "A"}])
    assert not _references_ok([{"op": "fork", "session": "A", "new": "B"}])
    assert _references_ok([NEW_A, {"op": "fork", "session": "A", "new": "B"},
                           {"op": "prompt", "session": "B"}])


def test_every_short_form_is_a_legal_sequence() -> None:
    sp = {"mode": "append", "content": [{"type": "text", "text": "x" * 20}]}
    steps = [{"op": "new", "session": "C", "systemPrompt": sp}, {"op": "restart"},
             {"op": "load", "session": "C", "systemPrompt": sp},
             {"op": "fork", "session": "C", "new": "D", "systemPrompt": sp}]
    forms = _short_forms(steps)
    assert forms and all(_references_ok(f) for f in forms)
    assert [len(f) for f in forms] == sorted(len(f) for f in forms)


def test_canonical_names_follow_first_appearance() -> None:
    steps = [{"op": "new", "session": "C"}, {"op": "fork", "session": "C", "new": "A"},
             {"op": "prompt", "session": "A"}]
    assert _canonical_handles(steps) == [
        {"op": "new", "session": "A"}, {"op": "fork", "session": "A", "new": "B"},
        {"op": "prompt", "session": "B"}]
