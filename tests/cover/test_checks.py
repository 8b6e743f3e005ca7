"""Users' checks (acp_fuzz.core.checks): registered like a built-in oracle, judged by the same
Evaluator, counted for the matrix; pure, over hand-built histories."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Iterator

import pytest

from acp_fuzz import CheckContext, check
from acp_fuzz.core.checks import REGISTRY, builtin, checks, unregister
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
        assert ctx.index == ctx.step["index"]  # the step's index, as a client check's
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


# -- the built-in checks, in the same registry ---------------------------------------------

WATCH = "test.sees-the-state"


def test_every_catalog_id_maps_to_the_builtin_that_reports_it() -> None:
    builtins = [c for c in checks() if c.builtin]
    assert builtins, "the built-in checks register on import"
    for oracle in CATALOG:
        chk = REGISTRY.get(oracle)
        if chk is not None and not chk.builtin:
            continue  # a user's check (another test's)
        assert chk is not None and chk.builtin, f"{oracle} has no built-in check"
        assert oracle in chk.oracles and chk.info == CATALOG[chk.oracles[0]]
        # The module that declares the row (its decorator) also reports it, or judges it.
        source = inspect.getsource(inspect.getmodule(chk.run))  # type: ignore[arg-type]
        assert source.count(f'"{oracle}"') >= 2, f"{oracle}: not reported where declared"
    owned = [o for c in builtins for o in c.oracles]
    assert len(owned) == len(set(owned)), "an id is owned by two built-in checks"


def test_the_catalog_is_the_rows_the_checks_declare_read_before_any_oracle_ran() -> None:
    """The catalogs are not a table of their own: reading one first (as the command line
    validates --oracle) imports the built-in checks, whose decorators declare every row."""
    code = ("import sys\n"
            "from acp_fuzz.core.findings import CATALOG, CLIENT_CATALOG\n"
            "assert 'acp_fuzz.core.builtin' not in sys.modules\n"
            "assert 'acp_fuzz.core.client_oracles' not in sys.modules\n"
            "print('prompt.leak' in CATALOG, 'client.prompt-empty' in CLIENT_CATALOG,"
            " len(CATALOG), len(CLIENT_CATALOG))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    builtin_rows = [o for c in checks() if c.builtin for o in c.oracles]
    client_rows = [o for c in checks("client") if c.builtin for o in c.oracles]
    assert out == ["True", "True", str(len(builtin_rows)), str(len(client_rows))]


def test_builtin_ids_are_neither_taken_again_nor_unregistered() -> None:
    with pytest.raises(ValueError, match="taken"):
        builtin("prompt.leak", severity="MUST", rule="SP-AGENT-APPEND-MUST",
                summary="again")(lambda j, ev: None)
    with pytest.raises(ValueError, match="severity must be one of"):
        builtin("myorg.row", severity="MAY", rule="SP-AGENT-APPEND-MUST",
                summary="a row is checked as a user's is")(lambda j, ev: None)
    assert "myorg.row" not in CATALOG
    unregister("prompt.leak")
    assert "prompt.leak" in REGISTRY and "prompt.leak" in CATALOG


@pytest.fixture
def watcher() -> Iterator[list[tuple[int, str, int, bool]]]:
    seen: list[tuple[int, str, int, bool]] = []

    @check(WATCH, severity="info", rule="SP-AGENT-APPEND-PLACEMENT-SHOULD",
           summary="records what it sees (a test)")
    def sees(ctx: CheckContext, event: Event) -> None:
        # The state after the event: the session made by a step's answer is there already,
        # and the built-ins' findings for this event are in.
        seen.append((event.seq, event.kind, len(ctx.client_blocks("A")),
                     "A" in ctx._tracker.sessions))

    yield seen
    unregister(WATCH)


def test_a_user_check_runs_after_the_builtins_with_the_same_state(
        watcher: list[tuple[int, str, int, bool]]) -> None:
    order = [c.info.id for c in checks()]
    assert order.index(WATCH) > max(order.index(c.info.id) for c in checks() if c.builtin)
    events = _history("Be a pirate captain, always.")  # the prompt in the user turn too
    judge = Evaluator()
    judge.feed(events)
    # The answer to session/new (seq 1) has made session A when the user's check sees it.
    assert watcher[0] == (0, "step", 1, False)
    assert watcher[1] == (1, "verdict", 1, True)
    assert [s for s, *_ in watcher] == [e.seq for e in events]
    # The built-ins judged the same history as without the user's check.
    unregister(WATCH)
    alone = Evaluator()
    alone.feed(events)
    assert judge.findings() == alone.findings()
    assert {k: v for k, v in judge.judged().items() if k[0] != WATCH} == alone.judged()


def test_a_users_check_may_judge_several_oracles_each_its_own_row() -> None:
    """``@check(..., also=...)``: one pass over the events, several oracles (as a built-in
    check may), each with its catalog row; the check speaks only for its own ids."""
    from acp_fuzz.core.checks import REGISTRY, check, unregister
    from acp_fuzz.core.errors import HarnessError

    first, second = "test.turn-seen", "test.user-text-seen"

    @check(first, severity="info", rule="ACPFUZZ-SESSION-ISOLATION-MUST", summary="a turn",
           also=[(second, "SHOULD", "SP-AGENT-APPEND-PLACEMENT-SHOULD", "a user text")])
    def both(ctx: CheckContext, event: Event) -> None:
        if event.kind != "model":
            return
        x = ctx.exchange(event)
        ctx.judge()
        ctx.report("a turn", session=x.session)
        ctx.judge(oracle=second)
        if any("pirate" in t for t in x.texts("user")):
            ctx.report("a user text", session=x.session, oracle=second)

    try:
        assert REGISTRY[first] is REGISTRY[second]
        assert CATALOG[second].severity == "SHOULD" and CATALOG[first].severity == "info"
        found = {(f.oracle, f.severity, f.rule) for f in evaluate(
            _history("Reply with ok. Be a pirate captain, always."))}
        assert {(first, "info", "ACPFUZZ-SESSION-ISOLATION-MUST"),
                (second, "SHOULD", "SP-AGENT-APPEND-PLACEMENT-SHOULD")} <= found
        assert second not in {f.oracle for f in evaluate(_history("Reply with ok."))}
    finally:
        unregister(first)
    assert first not in REGISTRY and second not in REGISTRY and second not in CATALOG

    @check("test.greedy", severity="info", rule="R", summary="s")
    def greedy(ctx: CheckContext, event: Event) -> None:
        ctx.report("not mine", oracle="prompt.leak")  # a built-in's id: refused

    try:
        with pytest.raises(HarnessError, match=r"'prompt\.leak' is not one of its oracles"):
            evaluate(_history("Reply with ok."))
    finally:
        unregister("test.greedy")
    for bad in ([("x.y", "info", "R")], ["x.y"], [("test.same", "info", "R", "s")]):
        with pytest.raises(ValueError):
            check("test.same", severity="info", rule="R", summary="s", also=bad)
