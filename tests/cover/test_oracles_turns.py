"""Failing turns (issue #22 §4), on hand-built histories: ``session.turn-failed`` after an
accepted prompt, and ``reject.side-effect`` for a session a refused change made unusable.
Both rest on SP-AGENT-ERROR-NOSIDEEFFECT-MUST: an agent that cannot apply a prompt refuses
the request instead, and a refused request changes nothing."""

from __future__ import annotations

from test_oracles import BASE, H, P, Q, appended, ids, only, sp

from acp_fuzz.core.history import ModelExchange, Segment
from acp_fuzz.core.oracles import Evaluator

TURN_ERROR = {"code": -32603, "message": "Internal error: prompt too long"}


def failing_turn(h: H, session: str, *, model_status: int | None = None) -> int:
    """A prompt step answered with an error; ``model_status``: one model request of the
    turn, answered by the fake model with that status."""
    h.h.append("step", {"index": h.index, "name": "prompt",
                        "args": {"op": "prompt", "session": session}, "turn": 99,
                        "nonce": "n"})
    if model_status is not None:
        x = ModelExchange(api="openai.chat", method="POST", path="/v1/chat/completions",
                          headers={}, body=None,
                          segments=(Segment("system", "messages[0].content", P),),
                          session=session, turn=99, side=False, status=model_status,
                          reply_text="")
        h.h.append("model", x.to_wire())
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "error",
                           "error": TURN_ERROR})
    h.index += 1
    return h.index - 1


def test_a_turn_failing_right_after_an_accepted_prompt_is_must() -> None:
    h = H()
    h.new("B")
    h.prompt("B", system=appended())
    accepted = h.new("A", sp("append", P * 400))
    failing_turn(h, "A")
    f = only(h.findings(), "session.turn-failed")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")
    assert f.evidence["accepted_by"].startswith(f"{accepted + 1}: session/new A")
    assert f.evidence["error"] == TURN_ERROR


def test_after_an_accepted_load_or_fork_too() -> None:
    for op, extra in (("load", {}), ("resume", {}), ("fork", {"new": "C"})):
        h = H()
        h.new("A", sp("append", P))
        h.prompt("A", system=appended(P))
        h.step(op, "A", systemPrompt=sp("append", Q), **extra)
        failing_turn(h, "C" if op == "fork" else "A")
        assert "session.turn-failed" in ids(h.findings()), op


def test_not_judged_before_any_turn_completed() -> None:
    # An agent whose every turn fails here is misconfigured (acp-fuzz doctor), not this bug.
    h = H()
    h.new("A", sp("append", P))
    failing_turn(h, "A")
    assert h.findings() == []


def test_not_when_the_fake_model_answered_the_turn_with_an_error() -> None:
    h = H()
    h.new("B")
    h.prompt("B", system=appended())
    h.new("A", sp("append", P))
    failing_turn(h, "A", model_status=400)
    assert "session.turn-failed" not in ids(h.findings())


def test_not_for_a_later_turn_nor_without_a_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    failing_turn(h, "A")  # the second turn after the prompt: a turn can fail for many reasons
    h.new("B")  # no prompt: nothing was accepted that could be unusable
    failing_turn(h, "B")
    assert "session.turn-failed" not in ids(h.findings())


def test_a_turn_that_completes_is_judged_and_clean() -> None:
    h = H()
    h.new("B")
    h.prompt("B", system=appended())
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    assert h.findings() == []
    judge = Evaluator(baseline=BASE)
    judge.feed(h.h.snapshot())
    assert judge.judged()[("session.turn-failed", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")] == 1


def test_a_refused_change_that_leaves_the_session_unusable_is_a_side_effect() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    refused = h.step("resume", "A", outcome="error",
                     error={"code": -32602, "message": "bad prompt"},
                     systemPrompt=sp("append", Q))
    failing_turn(h, "A")
    f = only(h.findings(), "reject.side-effect")
    assert f.evidence["rejected_by"].startswith(f"{refused + 1}: session/resume A")
    assert "session.turn-failed" not in ids(h.findings())


def test_a_refused_load_after_a_restart_may_leave_the_session_closed() -> None:
    # Not loaded in this process: its turn failing is the right answer.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("restart")
    h.step("load", "A", outcome="error", error={"code": -32000, "message": "no"})
    failing_turn(h, "A")
    assert "reject.side-effect" not in ids(h.findings())


def test_a_turn_of_a_session_not_open_in_this_process_is_not_judged() -> None:
    # Seen on claude-agent-acp 0.101.0 at seeds 2 and 3 (issue #31 §3b): new A with a prompt;
    # restart; the load or resume of A refused (-32002); the prompt of A answered -32002. A is
    # not open in the new process, so the error is right and no accepted prompt was unusable:
    # the refused reattach is session.reattach-failed's to judge, never session.turn-failed's.
    for op in ("load", "resume"):
        h = H()
        h.new("B")
        h.prompt("B", system=appended())
        h.new("A", sp("append", P))
        h.step("restart")
        h.step(op, "A", outcome="error", error={"code": -32002, "message": "not found"},
               systemPrompt=sp("append", P))
        failing_turn(h, "A")
        found = ids(h.findings())
        assert "session.turn-failed" not in found, op
        assert "reject.side-effect" not in found, op
        judge = Evaluator(baseline=BASE)
        judge.feed(h.h.snapshot())
        assert ("session.turn-failed", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST") not in judge.judged()


# -- leaks in session/list titles (§4) --------------------------------------------------------

def listing(h: H, titles: dict[str, str], rid: int = 90) -> None:
    h.step("list")
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid,
                                              "method": "session/list", "params": {}}})
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": rid, "result": {
        "sessions": [{"sessionId": h.sids[k], "cwd": "/w", "title": t}
                     for k, t in titles.items()]}}})


def test_a_title_made_from_another_session_s_prompt_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    listing(h, {"A": Q[:40], "B": "Answer only in French"})
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"]) == ("A", "B")
    assert f.evidence["title"] == Q[:40] and "session/list" in f.message
    h2 = H()
    h2.new("A", sp("append", P))
    h2.new("B", sp("append", Q))
    listing(h2, {"A": f"Chat: {Q}"})  # the whole block inside a longer title
    assert only(h2.findings(), "prompt.leak").session == "A"


def test_titles_from_the_session_s_own_prompt_or_words_are_no_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.step("fork", "A", new="C")
    listing(h, {"A": P, "B": Q[:30], "C": P[:30]})
    assert "prompt.leak" not in ids(h.findings())
    h2 = H()
    h2.new("A", sp("append", P))
    h2.new("B", sp("append", Q))
    listing(h2, {"A": "Answer", "B": "Review code"})  # short words, by chance
    assert "prompt.leak" not in ids(h2.findings())
