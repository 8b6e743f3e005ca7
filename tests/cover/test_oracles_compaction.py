"""The oracles around a compaction, on hand-built histories (issue #22 §1 and §2).

A compaction is the rebuild the RFD names (SP-LIFECYCLE-DEFER-MAY: an agent may defer a
changed prompt "until it next rebuilds its prompt (for example, after compaction)"). The oracles
learn of one from a ``compact`` step sent as the agent's command, from a side request that
the profile marks as a compaction's summary (``side_kind: "compaction"``), or from a
``compaction_update`` the agent reports completed. After it:

* the session's prompt must still be there: missing, it is ``prompt.lost`` (MUST), and the
  evidence names the compaction;
* a change deferred before it must now show: two turns on the old prompt after it are
  ``prompt.change-ignored`` (SHOULD), naming the compaction;
* an agent that can be made to compact is not judged at a cold load: the old prompt after
  one is ``prompt.change-deferred`` (info).
"""

from __future__ import annotations

from test_oracles import BASE, H, P, Q, appended, ids, only, sp

from acp_fuzz.core.history import ModelExchange, Segment
from acp_fuzz.core.oracles import IGNORED_AFTER, Evaluator, evaluate
from acp_fuzz.core.steps import advertises_compact, nonce_for


def not_info(h: H, *, strict: bool = False) -> list[str]:
    return sorted(f.oracle for f in h.findings(strict=strict) if f.severity != "info")


def advertise_compact(h: H, sid: str = "sess-1") -> None:
    h.h.append("acp", {"dir": "recv", "msg": {
        "jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": sid, "update": {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [{"name": "compact", "description": "Compact"}]}}}})


def summary_request(h: H, session: str, *, system: str, history: tuple[str, ...] = (),
                    side_kind: str | None = "compaction") -> None:
    """The summary request of a compaction: a side request tied to ``session``."""
    segs = [Segment("system", "messages[0].content", system)]
    segs += [Segment("history", f"messages[{i + 1}].content", t) for i, t in enumerate(history)]
    x = ModelExchange(api="openai.chat", method="POST", path="/v1/chat/completions",
                      headers={}, body=None, segments=tuple(segs), session=session, turn=1,
                      side=True, status=200, reply_text="summary")
    h.h.append("model", {**x.to_wire(), "side_kind": side_kind})


def compact(h: H, session: str, *, by: str = "command", summary: bool = True,
            outcome: str = "ok") -> int:
    """A ``compact`` step sent as the agent's command: its summary request (tied to the
    session by the nonces of its conversation, not marked side) and a success."""
    h.h.append("step", {"index": h.index, "name": "compact",
                        "args": {"op": "compact", "session": session, "by": by}})
    if summary:
        x = ModelExchange(api="openai.chat", method="POST", path="/v1/chat/completions",
                          headers={}, body=None,
                          segments=(Segment("system", "messages[0].content",
                                            "Summarise the conversation so far."),
                                    Segment("user", "messages[1].content",
                                            nonce_for(session, 1))),
                          session=session, turn=1, side=False, status=200, reply_text="s")
        h.h.append("model", x.to_wire())
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": outcome})
    h.index += 1
    return h.index - 1


def test_a_prompt_kept_through_a_compaction_gives_nothing() -> None:
    h = H()
    h.new("A", sp("append", P))
    advertise_compact(h)
    h.prompt("A", system=appended(P))
    compact(h, "A")
    h.prompt("A", system=appended(P))
    assert h.findings(strict=True) == []


def test_the_compaction_command_s_summary_request_is_not_judged_as_a_turn() -> None:
    # Its system slot is the summariser's, not the session's: judged, it would be "lost".
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    compact(h, "A")
    assert h.findings(strict=True) == []


def test_a_prompt_dropped_at_compaction_is_lost_must_naming_the_compaction() -> None:
    h = H()
    h.new("A", sp("override", P))
    h.prompt("A", system=[P])
    step = compact(h, "A")
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    # Its own rule, and so its own row in the matrix (docs/oracles.md, "Rules of acp-fuzz's
    # own"): the prompt owed as a MUST did not survive the compaction.
    assert (f.severity, f.rule) == ("MUST", "ACPFUZZ-COMPACTION-KEEPS-MUST")
    assert f.evidence["compaction"] == f"the compaction at step {step + 1} (its compaction command)"
    assert f"after the compaction at step {step + 1}" in f.message
    assert any("compaction of A" in line for line in f.evidence["steps"])


def test_a_loss_long_after_a_compaction_does_not_name_it() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    compact(h, "A")
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert "compaction" not in f.evidence


def test_a_change_deferred_until_compaction_and_applied_there_gives_nothing() -> None:
    # The reference agent's defer-until-compaction: correct under SP-LIFECYCLE-DEFER-MAY,
    # even across a restart (its change waits for the compaction, not for the new process).
    for restart in (False, True):
        h = H()
        h.new("A", sp("append", P))
        advertise_compact(h)
        h.prompt("A", system=appended(P))
        h.step("resume", "A", systemPrompt=sp("append", Q))
        h.prompt("A", system=appended(P))
        if restart:
            h.step("restart")
            h.step("load", "A", systemPrompt=sp("append", Q))
            h.prompt("A", system=appended(P))
            h.prompt("A", system=appended(P))
        compact(h, "A")
        h.prompt("A", system=appended(Q))
        assert h.findings(strict=True) == [], restart


def test_a_change_kept_back_through_a_compaction_is_change_ignored_naming_it() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    step = compact(h, "A")
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())  # one turn of slack
    assert "1 turn after the compaction" in only(h.findings(), "prompt.change-deferred").message
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-ignored")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-COMPACTION-APPLIES-SHOULD")
    assert f.evidence["rebuilt_by"] == f"the compaction at step {step + 1}"
    assert len(f.evidence["turns_after"]) == IGNORED_AFTER
    assert "cannot be made to compact" not in f.message
    assert "prompt.lost" not in ids(h.findings())


def test_an_agent_that_can_compact_is_not_judged_at_a_cold_load() -> None:
    h = H()
    h.new("A", sp("append", P))
    advertise_compact(h)
    h.prompt("A", system=appended(P))
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    found = h.findings()
    assert "prompt.change-ignored" not in ids(found)
    deferred = [f for f in found if f.oracle == "prompt.change-deferred"]
    assert len(deferred) == 2 and all("rebuilt_by" not in f.evidence for f in deferred)
    assert not_info(h) == []


def test_a_compact_command_in_a_v2_session_result_counts_as_advertised() -> None:
    # v2 codex-acp lists its commands only in the session/new result (availableCommands),
    # with no available_commands_update: the agent can still be made to compact.
    h = H()
    h.new("A", sp("append", P))
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 99, "result": {
        "sessionId": "sess-1",
        "availableCommands": [{"name": "compact", "description": "Compact"}]}}})
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())


def test_advertises_compact_reads_an_update_or_a_result_and_nothing_else() -> None:
    listed = {"availableCommands": [{"name": "/compact", "description": "Compact"}]}
    assert advertises_compact({"sessionUpdate": "available_commands_update", **listed})
    assert advertises_compact({"sessionId": "s", **listed})
    assert not advertises_compact({"sessionUpdate": "agent_message_chunk", **listed})
    assert not advertises_compact({"availableCommands": [{"name": "compactor"}]})
    assert not advertises_compact({"availableCommands": "compact"})
    assert not advertises_compact(None)


def test_a_forced_compaction_known_from_initialize_also_moves_the_judgement() -> None:
    # A profile that can force compaction (`[compaction] by`) says so in the initialize
    # verdict, before any compaction happened.
    h = H()
    h.h.snapshot()[0].data["compaction"] = ["usage"]  # the initialize verdict
    h.new("A", sp("append", P))
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())


def test_the_deferral_of_the_second_turn_is_judged_to_its_end() -> None:
    # #22 §2, as a new user saw it: an agent that applies a change from the second turn after
    # it (defer-then-apply), shrunk to `new A; restart; resume A (changed); prompt A`, was a
    # SHOULD. The turn after shows the change applied: nothing, not even the deferral.
    h = H()
    h.new("A", sp("append", P))
    h.step("restart")
    h.step("resume", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    assert not_info(h, strict=False) == []
    h.prompt("A", system=appended(Q))
    assert h.findings() == []


def test_a_summary_request_marks_the_compaction_and_is_judged_for_leaks() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", "Reply in haiku, always, every time."))
    summary_request(h, "A", system="Summarise.", history=(Q,))
    f = only(h.findings(), "prompt.leak")
    assert f.evidence["model_event"] >= 0 and f.session == "A"
    assert "side request" in f.message
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert only(h.findings(), "prompt.change-ignored").evidence["rebuilt_by"].startswith(
        "the compaction at step")


def test_an_ordinary_side_request_is_no_compaction() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    summary_request(h, "A", system="Write a title.", side_kind="side")
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())


def test_a_completed_compaction_update_marks_the_compaction() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    for status in ("in_progress", "completed"):
        h.h.append("acp", {"dir": "recv", "msg": {
            "jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": h.sids["A"], "update": {
                    "sessionUpdate": "compaction_update", "compactionId": "c1",
                    "status": status}}}})
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert "compaction" in only(h.findings(), "prompt.change-ignored").evidence["rebuilt_by"]


def test_the_turns_before_a_compaction_are_not_owed_on_a_later_load() -> None:
    # The summary replaced them (ACPFUZZ-CONVERSATION-KEPT-MUST is about the conversation as the
    # agent keeps it): only the turns after the compaction must be replayed.
    for replayed, lost in (((2,), False), ((), True)):
        h = H()
        h.new("A", sp("append", P))
        h.prompt("A", system=appended(P), user=nonce_for("A", 1))
        compact(h, "A")
        h.prompt("A", system=appended(P), user=nonce_for("A", 2))
        h.step("restart")
        h.step("load", "A")
        h.prompt("A", system=appended(P), user=nonce_for("A", 3),
                 history=[nonce_for("A", t) for t in replayed])
        assert ("session.history-lost" in ids(h.findings())) is lost, replayed


def test_a_refused_compaction_command_is_no_compaction() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    compact(h, "A", summary=False, outcome="error")
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())


def test_incremental_and_whole_judgement_agree_through_a_compaction() -> None:
    from acp_fuzz.core.oracles import Evaluator

    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    compact(h, "A")
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    events = h.h.snapshot()
    ev = Evaluator(baseline=BASE)
    for e in events:
        ev.feed([e])
    assert ev.findings() == evaluate(events, baseline=BASE)


def test_an_untied_summary_request_is_the_compaction_of_the_step_s_session() -> None:
    # codex-acp's summary carries no nonce: the gateway ties it to nothing.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    h.h.append("step", {"index": h.index, "name": "compact",
                        "args": {"op": "compact", "session": "A", "by": "usage"},
                        "turn": 2, "nonce": nonce_for("A", 2)})
    x = ModelExchange(api="openai.responses", method="POST", path="/v1/responses",
                      headers={}, body=None,
                      segments=(Segment("user", "input[0]", "CONTEXT CHECKPOINT COMPACTION"),),
                      session=None, turn=None, side=True, status=200, reply_text="s")
    h.h.append("model", {**x.to_wire(), "side_kind": "compaction"})
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "ok"})
    h.index += 1
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-ignored")
    assert f.evidence["rebuilt_by"] == "the compaction at step 4"


def judged(h: H) -> dict[tuple[str, str], int]:
    e = Evaluator(baseline=BASE)
    e.feed(h.h.snapshot())
    return e.judged()


def test_the_turns_after_a_compaction_are_judged_under_the_compaction_rules() -> None:
    # What `acp-fuzz matrix` counts as tested in the two compaction rows: the first turn after
    # a compaction under KEEPS, a deferred change's turns after it under APPLIES; the turn
    # before the compaction under the lifecycle rules, and nothing under the compaction's.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    before = judged(h)
    assert not any(rule.startswith("ACPFUZZ-COMPACTION") for _, rule in before)
    compact(h, "A")
    h.prompt("A", system=appended(Q))
    after = judged(h)
    assert after[("prompt.lost", "ACPFUZZ-COMPACTION-KEEPS-MUST")] == 1
    assert after[("prompt.change-ignored", "ACPFUZZ-COMPACTION-APPLIES-SHOULD")] == 1
    assert h.findings(strict=True) == []  # applied at the compaction: nothing failed
    # Once a turn showed the prompt, the compaction is behind the session: its rules rest.
    h.prompt("A", system=appended(Q))
    assert judged(h)[("prompt.lost", "ACPFUZZ-COMPACTION-KEEPS-MUST")] == 1


def test_a_cold_load_rebuild_keeps_the_lifecycle_rule() -> None:
    # An agent that cannot be made to compact: the cold load is the rebuild, and a change it
    # did not apply stays under SP-LIFECYCLE-CHANGE-SHOULD.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-ignored")
    assert f.rule == "SP-LIFECYCLE-CHANGE-SHOULD"
    assert f.evidence["rebuilt_by"].startswith("the cold load")
