"""Users' checks (acp_fuzz.core.checks): registered like a built-in oracle, judged by the same
Evaluator, counted for the matrix; pure, over hand-built histories."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acp_fuzz import CheckContext, check
from acp_fuzz.core.checks import REGISTRY, unregister
from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.findings import CATALOG
from acp_fuzz.core.history import Event
from acp_fuzz.core.oracles import Evaluator, evaluate

ID = "test.user-turn"


@pytest.fixture
def registered() -> Iterator[None]:
    @check(ID, severity="SHOULD", rule="SP-AGENT-APPEND-PLACEMENT-SHOULD",
           summary="a client prompt's text in a user turn")
    def user_turn(ctx: CheckContext, event: Event) -> None:
        if event.kind != "model":
            return
        x = ctx.exchange(event)
        if x.session is None:
            return
        ctx.judge()
        for text in x.texts("user"):
            if any(b in text for b in ctx.client_blocks(x.session)):
                ctx.report(f"session {x.session}: prompt in a user turn", session=x.session,
                           model_event=event.seq)

    yield
    unregister(ID)


def _history(user_text: str) -> list[Event]:
    sp = {"mode": "append", "content": [{"type": "text", "text": "Be a pirate captain, always."}]}
    data = [
        ("step", {"index": 0, "name": "new", "args": {"op": "new", "session": "A",
                                                      "systemPrompt": sp}}),
        ("verdict", {"step": 0, "what": "reply", "outcome": "ok", "sessionId": "s1"}),
        ("step", {"index": 1, "name": "prompt", "args": {"op": "prompt", "session": "A"},
                  "turn": 1, "nonce": "acpfuzz-000000000000"}),
        ("model", {"api": "openai.chat", "method": "POST", "path": "/v1/chat/completions",
                   "headers": {}, "body": {}, "session": "A", "turn": 1, "side": False,
                   "status": 200, "reply_text": "ok",
                   "segments": [{"slot": "system", "path": "messages[0]",
                                 "text": "You are helpful. Be a pirate captain, always."},
                                {"slot": "user", "path": "messages[1]", "text": user_text}]}),
        ("verdict", {"step": 1, "what": "reply", "outcome": "ok"}),
    ]
    return [Event(i, float(i), kind, d) for i, (kind, d) in enumerate(data)]


def test_a_registered_check_reports_like_a_builtin(registered: None) -> None:
    assert CATALOG[ID].severity == "SHOULD" and ID in REGISTRY
    bad = evaluate(_history("Reply with ok. Be a pirate captain, always."))
    mine = [f for f in bad if f.oracle == ID]
    assert len(mine) == 1
    assert (mine[0].severity, mine[0].rule, mine[0].step, mine[0].session) == (
        "SHOULD", "SP-AGENT-APPEND-PLACEMENT-SHOULD", 1, "A")
    assert mine[0].evidence == {"model_event": 3}
    assert not [f for f in evaluate(_history("Reply with ok.")) if f.oracle == ID]


def test_its_cases_are_counted_for_the_matrix(registered: None) -> None:
    judge = Evaluator()
    judge.feed(_history("Reply with ok."))
    assert judge.judged()[(ID, "SP-AGENT-APPEND-PLACEMENT-SHOULD")] == 1


def test_fed_in_pieces_it_judges_as_whole(registered: None) -> None:
    events = _history("Be a pirate captain, always.")
    judge = Evaluator()
    for e in events:
        judge.feed([e])
    assert judge.findings() == evaluate(events)


def test_registering_checks_is_strict(registered: None) -> None:
    with pytest.raises(ValueError, match="taken"):
        check(ID, severity="MUST", rule="R", summary="s")(lambda ctx, ev: None)
    with pytest.raises(ValueError, match="taken"):
        check("prompt.leak", severity="MUST", rule="R", summary="s")(lambda ctx, ev: None)
    with pytest.raises(ValueError, match="severity"):
        check("test.x", severity="MAY", rule="R", summary="s")
    with pytest.raises(ValueError, match="word"):
        check("test x", severity="MUST", rule="R", summary="s")
    with pytest.raises(ValueError, match="rule and a summary"):
        check("test.x", severity="MUST", rule="", summary="s")
    assert "test.x" not in CATALOG


def test_a_check_that_raises_is_named_in_one_line() -> None:
    @check("test.broken", severity="MUST", rule="R", summary="raises")
    def broken(ctx: CheckContext, event: Event) -> None:
        raise KeyError("oops\nsecond line")

    try:
        with pytest.raises(HarnessError) as e:
            evaluate(_history("x"))
        assert str(e.value).startswith("check test.broken failed on event 0 (step): KeyError")
    finally:
        unregister("test.broken")
    assert "test.broken" not in CATALOG and "test.broken" not in REGISTRY


def test_a_report_with_an_unknown_severity_is_refused(registered: None) -> None:
    @check("test.bad-severity", severity="info", rule="R", summary="s")
    def bad(ctx: CheckContext, event: Event) -> None:
        ctx.report("x", severity="MAY")

    try:
        with pytest.raises(HarnessError, match="severity 'MAY'"):
            evaluate(_history("x"))
    finally:
        unregister("test.bad-severity")
