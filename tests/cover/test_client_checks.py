"""Client checks (``@check(..., direction="client")``): in the same registry as the agent's,
judged by :func:`judge_client` beside the built-in client oracles and never by an agent's
Evaluator; pure, over hand-built client histories."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from acp_fuzz import ClientContext, check
from acp_fuzz.core.checks import REGISTRY, checks, unregister
from acp_fuzz.core.client_oracles import judge_client
from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.findings import CATALOG, CLIENT_CATALOG, oracle_info
from acp_fuzz.core.history import Event
from acp_fuzz.core.oracles import evaluate
from tests.cover.test_checks import _history
from tests.cover.test_client_oracles import ALL_V1, Conv, P

ID = "test.client-prompt-seen"
RULE = "SP-CLIENT-RESEND-SHOULD"


@pytest.fixture
def seen() -> Iterator[list[tuple[Any, ...]]]:
    """A client check that records what its context shows, and reports each session/prompt
    whose session has a systemPrompt."""
    log: list[tuple[Any, ...]] = []

    @check(ID, severity="SHOULD", rule=RULE, summary="a prompt to a session with a prompt",
           direction="client")
    def prompt_seen(ctx: ClientContext, event: Event) -> None:
        msg = event.data.get("msg") if event.kind == "acp" else None
        if not isinstance(msg, dict) or msg.get("method") != "session/prompt":
            return
        sid = msg["params"]["sessionId"]
        init = ctx.initialize(event)
        assert ctx.index == ctx.step  # the shared spelling, and the one client checks used
        log.append((ctx.index, ctx.connection(event), ctx.protocol(event),
                    ctx.capabilities(event).system_prompt, init is not None,
                    ctx.session_prompt(sid), ctx.sessions()))
        ctx.judge()
        if ctx.session_prompt(sid) is not None:
            ctx.report(f"session {sid} prompted", session=sid, event=event.seq)

    yield log
    unregister(ID)


def _conv() -> Conv:
    c = Conv().step(0).init(ALL_V1, offer=1)
    c.new("S", P).prompt("S")
    c.step(1).init(ALL_V1, conn=1, offer=1)
    c.reattach("session/load", "S", P, conn=1)
    return c.prompt("S", conn=1)


def test_a_client_check_is_registered_on_the_client_side(seen: list[tuple[Any, ...]]) -> None:
    assert ID in CLIENT_CATALOG and ID not in CATALOG and ID in REGISTRY
    assert oracle_info(ID).rule == RULE  # the one lookup over both catalogs
    assert [c.info.id for c in checks("client")][-1] == ID
    assert ID not in {c.info.id for c in checks("agent")}
    builtins = [c for c in checks("client") if c.builtin]
    assert len(builtins) == 1 and builtins[0].oracles[0] == "client.prompt-unadvertised"
    assert set(builtins[0].oracles) == set(CLIENT_CATALOG) - {ID}


def test_judge_client_runs_it_after_the_builtins(seen: list[tuple[Any, ...]]) -> None:
    c = _conv()
    without = judge_client([])  # nothing judged when nothing happened
    assert without.findings == []
    verdict = judge_client(c.h.snapshot())
    # Both prompts: the context shows the connection, what it advertised and the session's
    # prompt as the client sent it (the answer to session/new was judged before).
    assert seen == [(0, 0, 1, True, True, P, ["S"]), (1, 1, 1, True, True, P, ["S"])]
    assert [(f.oracle, f.step, f.session, f.severity, f.rule) for f in verdict.findings] == [
        (ID, 0, "S", "SHOULD", RULE), (ID, 1, "S", "SHOULD", RULE)]
    assert verdict.judged[(ID, RULE)] == 2
    # The built-ins judged as they do without it.
    unregister(ID)
    alone = judge_client(c.h.snapshot())
    assert alone.findings == []
    assert verdict.judged - alone.judged == {(ID, RULE): 2}


def test_an_agent_history_never_runs_a_client_check(seen: list[tuple[Any, ...]]) -> None:
    evaluate(_history("hi"))
    assert seen == []


def test_a_client_check_that_raises_is_a_one_line_harness_error() -> None:
    @check("test.client-broken", severity="info", rule=RULE, summary="raises",
           direction="client")
    def broken(ctx: ClientContext, event: Event) -> None:
        raise RuntimeError("boom")

    try:
        with pytest.raises(HarnessError, match=r"check test.client-broken failed on event 0 "
                                               r"\(step\): RuntimeError: boom"):
            judge_client(_conv().h.snapshot())
    finally:
        unregister("test.client-broken")
    assert "test.client-broken" not in CLIENT_CATALOG and "test.client-broken" not in REGISTRY


def test_ids_are_taken_across_sides_and_the_direction_is_checked() -> None:
    with pytest.raises(ValueError, match="taken"):
        check("client.prompt-empty", severity="MUST", rule=RULE, summary="x")(
            lambda ctx, ev: None)
    with pytest.raises(ValueError, match="taken"):
        check("prompt.leak", severity="MUST", rule=RULE, summary="x", direction="client")(
            lambda ctx, ev: None)
    with pytest.raises(ValueError, match="direction"):
        check("test.nowhere", severity="MUST", rule=RULE, summary="x", direction="server")
    unregister("client.prompt-empty")  # a built-in stays
    assert "client.prompt-empty" in REGISTRY and "client.prompt-empty" in CLIENT_CATALOG


def test_the_client_matrix_has_a_row_for_it(seen: list[tuple[Any, ...]]) -> None:
    from acp_fuzz.reporting.client_matrix import client_rows, column_from_reports

    assert client_rows()[-1] == (ID, "SHOULD", RULE)
    report = {"findings": [], "judged": [{"oracle": ID, "rule": RULE, "checks": 2}]}
    assert column_from_reports("c", [report]).cells[(ID, RULE)].markdown() == "pass: 2 checks"
