"""The oracles of a request sent while the model is thinking, on hand-built histories: a
``session/set_mode`` written during a turn (``during: set-mode``) is answered, is not refused,
and counts for the prompt oracles from the moment it is on the wire, as a ``set_mode`` step's
does; a refused one changes nothing. A second ``session/prompt`` of the session
(``during: prompt``) is answered; what the agent did with it is info; its turn's model
requests are judged as any turn's. A ``session/fork`` of it (``during: fork``) is answered;
refused, it makes no session; made, the copy is a session that inherits its source's prompt,
whose turns the prompt oracles judge."""

from __future__ import annotations

from typing import Any

import pytest
from test_oracles import BASE, DEFAULTS, H, P, Q, R, _turn_text, appended, ids, only, sp

from acp_fuzz.core.oracles import Evaluator
from acp_fuzz.core.sessions import Tracker
from acp_fuzz.core.steps import nonce_for

#: A plan mode's instructions in place of the defaults (judged against the defaults learned
#: in the default mode, append looks replaced).
PLAN = ["Plan mode. Write a numbered plan and change nothing at all.\n\n" + P]


def held_switch(h: H, session: str, answer: dict[str, Any] | None, *,
                pending: bool = True, after: list[str] | None = None) -> None:
    """A turn of ``session`` with a ``session/set_mode`` written while its first model
    request was held (``answer``: the ``set_mode`` record of its ``during`` verdict; ``None``:
    nothing was sent), and, when ``after`` is given, a second model request of the turn made
    after the switch was written, with that system text."""
    turn = h.turns.get(session, 0) + 1
    h.h.append("step", {"index": h.index, "name": "prompt", "turn": turn,
                        "nonce": nonce_for(session, turn),
                        "args": {"op": "prompt", "session": session, "during": "set-mode",
                                 "pick": 1}})
    h.model(session, system=appended(P), user=nonce_for(session, turn))
    if answer is not None:
        set_mode_sent(h, session, 90 + h.index)
    if after is not None:
        h.model(session, system=after)
    if answer is not None and "control" in answer:  # sent again once the turn had ended
        set_mode_sent(h, session, 190 + h.index)
    h.turns[session] = turn
    record: dict[str, Any] = {"step": h.index, "what": "during", "during": "set-mode",
                              "held": True, "pending": pending,
                              "turn": {"outcome": "ok", "stopReason": "end_turn"}}
    if answer is not None:
        record["set_mode"] = {**answer, "modeId": "plan"}
    h.h.append("verdict", record)
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "ok",
                           "stopReason": "end_turn"})
    h.index += 1


def set_mode_sent(h: H, session: str, rid: int) -> None:
    h.h.append("acp", {"dir": "send", "msg": {
        "jsonrpc": "2.0", "id": rid, "method": "session/set_mode",
        "params": {"sessionId": h.sids[session], "modeId": "plan"}}})


REFUSED = {"outcome": "error", "code": -32603}


def test_a_mode_switch_during_a_turn_counts_from_the_moment_it_is_sent() -> None:
    h = H()
    h.new("A", sp("append", P))
    # The turn's second model request, made after the switch went out, is in the new mode;
    # so is the next turn's.
    held_switch(h, "A", {"outcome": "ok"}, after=PLAN)
    h.prompt("A", system=PLAN)
    assert h.findings() == []


def test_a_switch_refused_during_a_turn_and_taken_after_it_is_a_should_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {**REFUSED, "control": {"outcome": "ok"}})
    h.prompt("A", system=PLAN)  # switched by the control: the plan mode's defaults
    found = h.findings(strict=True)
    assert ids(found) == {"set-mode.refused-mid-turn"}
    f = only(found, "set-mode.refused-mid-turn")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-SETMODE-ANYTIME-SHOULD")
    assert "refused (error -32603) while the turn ran, and accepted once it had ended" \
        in f.message


def test_a_switch_refused_during_a_turn_and_after_it_is_not_judged_and_changes_nothing(
        ) -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {**REFUSED, "control": REFUSED})
    h.prompt("A", system=PLAN)  # the defaults replaced with no switch: judged as ever
    assert ids(h.findings(strict=True)) == {"append.replaced-default"}


def test_a_control_never_answered_is_a_must_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {**REFUSED, "control": {"outcome": "timeout"}})
    f = only(h.findings(), "set-mode.unanswered")
    assert "sent again once the turn had ended" in f.message


def test_a_mode_switch_never_answered_is_a_must_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {"outcome": "timeout"})
    f = only(h.findings(), "set-mode.unanswered")
    assert (f.severity, f.rule) == ("MUST", "SES-AGENT-BASELINE-MUST")
    assert "'plan'" in f.message


def test_a_switch_refused_after_the_turn_ended_or_never_sent_is_not_judged() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {**REFUSED, "control": {"outcome": "ok"}}, pending=False)
    held_switch(h, "A", None)  # the session offered no other mode
    assert h.findings(strict=True) == []


def test_a_turn_a_switch_went_out_during_is_owed_to_the_conversation() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_switch(h, "A", {"outcome": "ok"})
    t = Tracker()
    for ev in h.h.snapshot():
        t.apply(ev, t.plan(ev))
    assert t.sessions["A"].conversation == [nonce_for("A", 1)]
    assert t.sessions["A"].mode_switched


def held_second_prompt(h: H, session: str, turn_end: dict[str, Any],
                       second: dict[str, Any] | None, *,
                       second_system: list[str] | None = None) -> None:
    """A turn of ``session`` with a second ``session/prompt`` of it sent while its first
    model request was held (``second``: the ``second`` record of the ``during`` verdict;
    ``None``: never sent). ``second_system``: the system text of the second turn's model
    request, when it made one. ``turn_end``: how the first turn ended (its reply)."""
    turn = h.turns.get(session, 0) + 1
    h.h.append("step", {"index": h.index, "name": "prompt", "turn": turn,
                        "nonce": nonce_for(session, turn), "second_turn": turn + 1,
                        "second_nonce": nonce_for(session, turn + 1),
                        "args": {"op": "prompt", "session": session, "during": "prompt"}})
    h.model(session, system=appended(P), user=nonce_for(session, turn))
    h.turns[session] = turn
    if second_system is not None:
        h.model(session, system=second_system, user=nonce_for(session, turn + 1))
        h.turns[session] = turn + 1
    record: dict[str, Any] = {"step": h.index, "what": "during", "during": "prompt",
                              "held": True, "pending": True, "turn": turn_end}
    if second is not None:
        record["second"] = second
    h.h.append("verdict", record)
    reply = {"step": h.index, "what": "reply", **turn_end}
    h.h.append("verdict", reply)
    h.index += 1


ENDED = {"outcome": "ok", "stopReason": "end_turn"}


def test_a_second_prompt_never_answered_is_a_must_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_second_prompt(h, "A", ENDED, {"outcome": "timeout", "answered": False,
                                       "overlapped": False})
    f = only(h.findings(), "second-prompt.unanswered")
    assert (f.severity, f.rule) == ("MUST", "SES-AGENT-BASELINE-MUST")


def test_what_the_agent_did_with_a_second_prompt_is_info() -> None:
    cases = [
        (ENDED, {"outcome": "error", "code": -32000, "answered": True, "overlapped": True},
         "refused (error -32000) while the first turn ran"),
        ({"outcome": "ok", "stopReason": "cancelled"},
         {**ENDED, "answered": True, "overlapped": False},
         "the first turn stopped (cancelled) for it"),
        # qwen-code 0.24.4: the first turn aborted, answered -32603
        ({"outcome": "error", "code": -32603}, {**ENDED, "answered": True, "overlapped": False},
         "the first turn ended with an error (-32603) when it came"),
        (ENDED, {**ENDED, "answered": True, "overlapped": True},
         "run beside the first turn"),
        (ENDED, {**ENDED, "answered": True, "overlapped": False},
         "queued: it ended after the first turn"),
        # v2: answered (inserted), its turn's end never seen: not unanswered
        (ENDED, {"outcome": "timeout", "answered": True, "overlapped": False},
         "queued: it ended after the first turn"),
    ]
    for first, second, how in cases:
        h = H()
        h.new("A", sp("append", P))
        held_second_prompt(h, "A", first, second)
        found = h.findings(strict=True)
        assert [f.oracle for f in found] == ["second-prompt.handling"], found
        assert found[0].severity == "info" and how in found[0].message, found[0].message
        assert found[0].rule == "ACPFUZZ-SECOND-PROMPT-MAY"


def test_the_second_turns_model_request_is_judged_as_any_turns() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_second_prompt(h, "A", ENDED, {**ENDED, "answered": True, "overlapped": False},
                       second_system=[DEFAULTS])
    assert "prompt.lost" in ids(h.findings())


def test_a_first_turn_failed_for_a_second_prompt_is_not_a_failed_turn() -> None:
    h = H()
    h.new("B")
    h.prompt("B", system=[DEFAULTS])  # the agent can run turns
    h.new("A", sp("append", P))
    held_second_prompt(h, "A", {"outcome": "error", "error": {"code": -32603}},
                       {**ENDED, "answered": True, "overlapped": False})
    assert "session.turn-failed" not in ids(h.findings())


def held_fork(h: H, session: str, new: str, fork: dict[str, Any] | None) -> None:
    """A turn of ``session`` with a ``session/fork`` of it, whose copy is ``new``, written
    while its first model request was held (``fork``: the ``fork`` record of the ``during``
    verdict, its ``new`` and, when ``ok``, its ``sessionId`` filled in; ``None``: never
    sent)."""
    turn = h.turns.get(session, 0) + 1
    h.h.append("step", {"index": h.index, "name": "prompt", "turn": turn,
                        "nonce": nonce_for(session, turn),
                        "args": {"op": "prompt", "session": session, "during": "fork",
                                 "new": new}})
    h.model(session, system=appended(P), user=nonce_for(session, turn))
    h.turns[session] = turn
    record: dict[str, Any] = {"step": h.index, "what": "during", "during": "fork",
                              "held": True, "pending": True, "turn": ENDED}
    if fork is not None:
        record["fork"] = {**fork, "new": new}
        if fork.get("outcome") == "ok":
            h.ids += 1
            h.sids[new] = record["fork"]["sessionId"] = f"sess-{h.ids}"
    h.h.append("verdict", record)
    h.h.append("verdict", {"step": h.index, "what": "reply", **ENDED})
    h.index += 1


def test_a_fork_never_answered_is_a_must_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_fork(h, "A", "B", {"outcome": "timeout"})
    f = only(h.findings(), "fork.unanswered")
    assert (f.severity, f.rule) == ("MUST", "SES-AGENT-BASELINE-MUST")
    assert "session/fork sent while the model was thinking (as B) was never answered" \
        in f.message


def test_a_fork_refused_or_never_sent_during_a_turn_is_not_judged_and_makes_no_session() -> None:
    for fork in ({"outcome": "error", "code": -32603}, None):
        h = H()
        h.new("A", sp("append", P))
        held_fork(h, "A", "B", fork)
        assert h.findings(strict=True) == []
        t = Tracker()
        for ev in h.h.events:
            t.apply(ev, t.plan(ev))
        assert "B" not in t.sessions and not t.life.exists("B")


def test_a_fork_made_during_a_turn_is_a_session_that_inherits_its_sources_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    held_fork(h, "A", "B", {"outcome": "ok"})
    h.prompt("B", system=appended(P))  # the source's prompt, inherited: no leak
    found = h.findings()
    assert "prompt.leak" not in ids(found) and "fork.unanswered" not in ids(found)
    assert only(found, "lifecycle.omitted-fallback").evidence["choice"] == "kept"
    t = Tracker()
    for ev in h.h.events:
        t.apply(ev, t.plan(ev))
    assert t.life.exists("B") and t.life.sessions["B"].source == "A"
    assert t.sessions["B"].conversation == []  # a fork's own turns only are owed


def test_a_fork_made_during_a_turn_is_judged_by_the_prompt_oracles() -> None:
    h = H()
    h.new("C", sp("append", R))
    h.new("A", sp("append", P))
    held_fork(h, "A", "B", {"outcome": "ok"})
    h.prompt("B", system=appended(R))  # another session's prompt in the copy's turn
    f = only(h.findings(), "prompt.leak")
    assert f.evidence["foreign_session"] == "C"


def test_a_session_new_its_cancel_request_left_unanswered_is_a_must_finding() -> None:
    h = H()
    h.step("new", "A", outcome="timeout", cancel_request=True)
    found = h.findings()
    f = only(found, "cancel-request.new-unanswered")
    assert (f.severity, f.rule) == ("MUST", "CANCELREQ-AGENT-ANSWER-MUST")
    assert "agent.hang" not in ids(found)  # the same silence, judged once


def test_a_cancelled_session_new_answered_either_way_and_leaving_nothing_is_clean() -> None:
    h = H()
    h.step("new", "A", outcome="error", error={"code": -32800}, cancel_request=True)
    h.list_probe([])
    h.step("new", "B", cancel_request=True)  # a result: a session as any
    h.prompt("B", system=[DEFAULTS])
    assert h.findings(strict=True) == []


def test_a_cancelled_session_new_that_left_a_session_is_a_should_finding() -> None:
    h = H()
    h.step("new", "A", outcome="error", error={"code": -32800}, cancel_request=True)
    h.list_probe(["sess-left"])
    found = h.findings(strict=True)
    assert ids(found) == {"cancel-request.session-left"}  # not reject.side-effect's MUST
    f = only(found, "cancel-request.session-left")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD")
    assert f.evidence["unexpected"] == ["sess-left"]


@pytest.mark.parametrize("op", ["load", "resume", "fork"])
def test_a_load_resume_or_fork_its_cancel_request_left_unanswered_is_a_must_finding(
        op: str) -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step(op, "A", outcome="timeout", cancel_request=True, **({"new": "B"} if op == "fork"
                                                               else {}))
    found = h.findings()
    f = only(found, "cancel-request.lifecycle-unanswered")
    assert (f.severity, f.rule) == ("MUST", "CANCELREQ-AGENT-ANSWER-MUST")
    assert f"session/{op}" in f.message
    assert ids(found) == {"cancel-request.lifecycle-unanswered"}  # not also agent.hang


@pytest.mark.parametrize("op", ["load", "resume"])
def test_a_cancelled_reattach_refused_changes_nothing_and_owes_nothing(op: str) -> None:
    """Answered -32800: not a refused reattach of an advertised op (session.reattach-failed),
    nor a refused prompt (payload.valid-rejected); the changed prompt it carried is not in
    force, the session's own is."""
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P), user=_turn_text("A", 1))
    h.step(op, "A", systemPrompt=sp("append", P), outcome="error",
           error={"code": -32800, "message": "Request cancelled"}, cancel_request=True)
    h.step(op, "A", systemPrompt=sp("append", Q), outcome="error",
           error={"code": -32800, "message": "Request cancelled"}, cancel_request=True)
    h.prompt("A", system=appended(P), user=_turn_text("A", 2))
    assert h.findings(strict=True) == []
    # Judged and held (a pass), under the cancel's rule, not reject.side-effect's.
    judge = Evaluator(baseline=BASE, strict=True)
    judge.feed(h.h.snapshot())
    judged = {oracle for oracle, _ in judge.judged()}
    assert "cancel-request.session-left" in judged and "reject.side-effect" not in judged


@pytest.mark.parametrize("op", ["load", "resume"])
def test_a_cancelled_reattach_refused_whose_prompt_still_reaches_the_model_is_a_should(
        op: str) -> None:
    """Answered -32800 after its $/cancel_request, yet the prompt it carried reaches the
    model: the cancel left it in force. The refusal was the cancel's, not the prompt's, so
    this is ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD, not reject.side-effect's MUST (as for a
    cancelled session/new that left a session)."""
    h = H()
    h.new("A", sp("append", P))
    first = _turn_text("A", 1)
    h.prompt("A", system=appended(P), user=first)
    h.step(op, "A", systemPrompt=sp("append", P, Q), outcome="error",
           error={"code": -32800, "message": "Request cancelled"}, cancel_request=True)
    h.prompt("A", system=appended(P, Q), history=[first], user=_turn_text("A", 2))
    found = h.findings(strict=True)
    assert "reject.side-effect" not in ids(found)
    f = only(found, "cancel-request.session-left")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD")
    assert "cancelled by its $/cancel_request" in f.message
    # Refused without a cancel, the same text reaching the model is the MUST.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P), user=first)
    h.step(op, "A", systemPrompt=sp("append", P, Q), outcome="error",
           error={"code": -32602, "message": "no"})
    h.prompt("A", system=appended(P, Q), history=[first], user=_turn_text("A", 2))
    assert only(h.findings(strict=True), "reject.side-effect").severity == "MUST"


@pytest.mark.parametrize("shown, found", [(Q, set()), (P, {"prompt.change-deferred"})])
def test_a_cancelled_reattach_answered_with_a_result_is_judged_as_any(
        shown: str, found: set[str]) -> None:
    """Accepted despite its $/cancel_request: the changed prompt it carried is in force."""
    h = H()
    h.new("A", sp("append", P))
    first = _turn_text("A", 1)
    h.prompt("A", system=appended(P), user=first)
    h.step("load", "A", systemPrompt=sp("append", Q), cancel_request=True)
    h.prompt("A", system=appended(shown), history=[first], user=_turn_text("A", 2))
    assert ids(h.findings(strict=True)) == found


def test_a_cancelled_session_new_with_a_valid_prompt_refused_is_not_a_rejected_payload() -> None:
    h = H()
    h.new("A", sp("append", P), outcome="error", error={"code": -32800}, cancel_request=True)
    h.list_probe([])
    assert h.findings(strict=True) == []


def test_a_cancelled_fork_refused_that_left_its_copy_is_a_should_finding() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="B", outcome="error", error={"code": -32800},
           cancel_request=True)
    h.list_probe([h.sids["A"]])  # the source only: clean
    h.prompt("A", system=appended(P))
    assert h.findings(strict=True) == []
    h.step("fork", "A", new="C", outcome="error", error={"code": -32800},
           cancel_request=True)
    h.list_probe([h.sids["A"], "sess-copy"])
    found = h.findings(strict=True)
    assert ids(found) == {"cancel-request.session-left"}  # not reject.side-effect's MUST
    f = only(found, "cancel-request.session-left")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD")
    assert f.evidence["unexpected"] == ["sess-copy"] and f.session == "C"
    assert "session/fork" in f.message


def ending_turn(h: H, what: str, answer: dict[str, Any] | None, turn: dict[str, Any]) -> None:
    """A turn of A with a ``session/close`` or ``session/delete`` (``what``) written while its
    model request was held (``answer``: the request's record in the ``during`` verdict;
    ``None``: never sent, the turn did not ask the model). The step's answer is the close's
    or delete's when it was sent, else the turn's."""
    step = {"index": h.index, "name": "prompt", "turn": 1, "nonce": nonce_for("A", 1),
            "args": {"op": "prompt", "session": "A", "during": what}}
    h.h.append("step", step)
    record: dict[str, Any] = {"step": h.index, "what": "during", "during": what,
                              "held": answer is not None, "pending": answer is not None,
                              "turn": turn}
    if answer is not None:
        h.model("A", system=appended(P), user=nonce_for("A", 1))
        record[what] = answer
    h.h.append("verdict", record)
    h.h.append("verdict", {"step": h.index, "what": "reply",
                           **(answer if answer is not None else turn)})
    h.index += 1


@pytest.mark.parametrize("what", ["close", "delete"])
@pytest.mark.parametrize("answer", [None, {"outcome": "error", "code": -32603}])
def test_a_close_or_delete_during_a_turn_never_sent_or_refused_leaves_the_session(
        what: str, answer: dict[str, Any] | None) -> None:
    h = H()
    h.new("A", sp("append", P))
    ending_turn(h, what, answer, {"outcome": "ok", "stopReason": "end_turn"})
    t = Tracker()
    for ev in h.h.snapshot():
        t.apply(ev, t.plan(ev))
    assert t.life.is_open("A") and "A" in t.sessions
    assert not {f.oracle for f in h.findings(strict=True)} & {"delete.turn-unanswered",
                                                               "delete.handling"}


def test_a_delete_accepted_during_a_turn_ends_the_session_and_the_turn_is_judged() -> None:
    h = H()
    h.new("A", sp("append", P))
    ending_turn(h, "delete", {"outcome": "ok"}, {"outcome": "timeout"})
    t = Tracker()
    for ev in h.h.snapshot():
        t.apply(ev, t.plan(ev))
    assert not t.life.exists("A") and t.life.deleted("A") and "A" not in t.sessions
    f = only(h.findings(), "delete.turn-unanswered")
    assert f.severity == "MUST" and f.rule == "SES-AGENT-BASELINE-MUST"
    h2 = H()
    h2.new("A", sp("append", P))
    ending_turn(h2, "delete", {"outcome": "ok"}, {"outcome": "ok", "stopReason": "cancelled"})
    info = only(h2.findings(), "delete.handling")
    assert info.severity == "info" and "stopped (cancelled)" in info.message
    assert "delete.turn-unanswered" not in {f.oracle for f in h2.findings()}
