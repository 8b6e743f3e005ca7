"""Unit tests of ``acp_fuzz.core.oracles.evaluate`` over hand-built histories (no processes).

The builder below appends events shaped exactly like the runner's
(``acp_fuzz/engine/campaign/runner.py``): a ``step`` event with the classification computed by
:func:`acp_fuzz.core.payloads.classify`, the ``verdict`` of its reply (with ``sessionId`` for a
successful new/fork), and ``model`` events as the gateway records them. Each oracle is shown
firing, and not firing where a correct agent has a choice (deferral, omitted prompt) or the
evidence is too weak (short texts, no baseline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.findings import CATALOG, Finding
from acp_fuzz.core.history import History, ModelExchange, Segment
from acp_fuzz.core.oracles import Baseline, Evaluator, evaluate, learn_baseline
from acp_fuzz.core.payloads import OMIT, Capabilities, classify
from acp_fuzz.core.steps import nonce_for

ALL_CAPS = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                        close=True, list=True)
DEFAULTS = (
    "You are the acp-fuzz reference agent, a careful coding assistant.\n"
    "Answer the user's request directly and concisely.\n"
    "Prefer small, reviewable changes and explain any risk you notice."
)
BASE = learn_baseline([DEFAULTS + "\nWorking directory: /w/one",
                       DEFAULTS + "\nWorking directory: /w/two"])
P = "You review code. Focus on security vulnerabilities."
Q = "Answer only in French, whatever the question."
R = "Cite file paths and line numbers in every answer."


def sp(mode: str, *texts: str) -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": t} for t in texts]}


class H:
    """A history built the way the runner records one."""

    def __init__(self, caps: Capabilities = ALL_CAPS) -> None:
        self.h = History()
        self.caps = caps
        self.index = 0
        self.turns: dict[str, int] = {}
        self.ids = 0
        self.sids: dict[str, str] = {}
        self.h.append("verdict", {"step": -1, "what": "initialize", "outcome": "ok",
                                  "capabilities": caps.to_wire()})

    def step(self, op: str, session: str | None = None, *, outcome: str = "ok",
             error: Any = None, stop_reason: str | None = None, **args: Any) -> int:
        """Append a step and its reply verdict; return the step index."""
        step: dict[str, Any] = {"op": op, **args}
        if session is not None:
            step["session"] = session
        data: dict[str, Any] = {"index": self.index, "name": op, "args": step}
        if op in ("new", "load", "resume", "fork"):
            c = classify(step.get("systemPrompt", OMIT), self.caps)
            data["class"] = {"kind": c.kind, "reason": c.reason, "severity": c.severity,
                             "rule": c.rule}
        if op == "prompt":
            assert session is not None
            turn = self.turns.get(session, 0) + 1
            data["turn"] = turn
            data["nonce"] = nonce_for(session, turn)
        self.h.append("step", data)
        verdict: dict[str, Any] = {"step": self.index, "what": "reply", "outcome": outcome}
        if error is not None:
            verdict["error"] = error
        if stop_reason is not None:
            verdict["stopReason"] = stop_reason
        if op in ("new", "fork") and outcome == "ok":
            self.ids += 1
            handle = step.get("new", session)
            self.sids[handle] = f"sess-{self.ids}"
            verdict["sessionId"] = self.sids[handle]
        self.h.append("verdict", verdict)
        self.index += 1
        return self.index - 1

    def new(self, session: str, prompt: Any = OMIT, **kw: Any) -> int:
        args = {} if prompt is OMIT else {"systemPrompt": prompt}
        return self.step("new", session, **args, **kw)

    def model(self, session: str | None, *, system: list[str] = (),  # type: ignore[assignment]
              user: str = "hi", history: list[str] = (),  # type: ignore[assignment]
              side: bool = False, body: Any = None, tied: bool = False) -> None:
        """One model request tied to ``session``'s current turn (the step just executed);
        ``side``: a side request, of no session unless ``tied``."""
        segs = [Segment("system", f"messages[{i}].content", t) for i, t in enumerate(system)]
        segs += [Segment("history", f"messages[{len(segs) + i}].content", t)
                 for i, t in enumerate(history)]
        segs.append(Segment("user", f"messages[{len(segs)}].content", user))
        turn = None
        if session is not None and not side:
            turn = self.turns.get(session, 0) + 1
        x = ModelExchange(api="openai.chat", method="POST", path="/v1/chat/completions",
                          headers={}, body=body, segments=tuple(segs),
                          session=None if side and not tied else session,
                          turn=turn, side=side, status=200, reply_text="ok")
        self.h.append("model", x.to_wire())

    def prompt(self, session: str, **model: Any) -> int:
        """A prompt step whose single model request is described by ``model``."""
        turn = self.turns.get(session, 0) + 1
        # The runner appends the step first, the gateway records the request while the reply is
        # pending, and the verdict comes last.
        self.h.append("step", {"index": self.index, "name": "prompt",
                               "args": {"op": "prompt", "session": session}, "turn": turn,
                               "nonce": nonce_for(session, turn)})
        self.model(session, **model)
        self.turns[session] = turn
        self.h.append("verdict", {"step": self.index, "what": "reply", "outcome": "ok"})
        self.index += 1
        return self.index - 1

    def list_probe(self, listed: list[str]) -> None:
        self.h.append("verdict", {"step": self.index - 1, "what": "probe-list",
                                  "outcome": "ok", "sessions": listed})

    def findings(self, *, baseline: Baseline | None = BASE, strict: bool = False
                 ) -> list[Finding]:
        return evaluate(self.h.snapshot(), baseline=baseline, strict=strict)


def ids(findings: list[Finding]) -> set[str]:
    return {f.oracle for f in findings}


def only(findings: list[Finding], oracle: str) -> Finding:
    hits = [f for f in findings if f.oracle == oracle]
    assert len(hits) == 1, findings
    return hits[0]


def appended(*texts: str) -> list[str]:
    """A correct append system slot: the defaults, then the client text."""
    return [DEFAULTS + "\nWorking directory: /w/x\n\n" + "\n\n".join(texts)]


# -- a correct session -----------------------------------------------------------------------


def test_correct_append_and_override_give_nothing() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.new("B", sp("override", Q))
    h.prompt("B", system=[Q])
    h.new("C")
    h.prompt("C", system=appended())
    assert h.findings() == []
    assert h.findings(strict=True) == []


def test_catalog_ids_are_the_documented_ones() -> None:
    assert set(CATALOG) == {
        "prompt.leak", "prompt.lost", "prompt.altered", "prompt.duplicated",
        "prompt.misplaced", "override.not-applied", "append.replaced-default",
        "payload.invalid-accepted", "payload.valid-rejected", "reject.side-effect",
        "agent.crash", "agent.hang", "protocol.malformed", "prompt.change-deferred",
        "lifecycle.omitted-fallback", "payload.probe", "cancel.error",
        "prompt.change-ignored", "lifecycle.omitted-inconsistent", "defaults.too-small",
        "session.history-lost", "session.reattach-failed", "session.turn-failed",
        "turn.silent-failure", "cancel.turn-kept", "close.turn-kept", "close.turn-unanswered",
        "cancel-request.unanswered", "set-mode.unanswered", "set-mode.refused-mid-turn",
        "second-prompt.unanswered", "second-prompt.handling", "fork.unanswered",
        "set-config.unanswered", "delete.turn-unanswered", "delete.handling",
        "cancel-request.new-unanswered", "cancel-request.session-left",
        "cancel-request.lifecycle-unanswered",
        "session.history-destroyed", "session.listed-other-id",
        "session.deleted-usable", "prompt.replayed-as-user", "capability.drift",
        "capability.refused", "scope.tools-changed", "scope.config-changed",
        "mcp.tool-missing", "mcp.tool-leak",
    }


def test_every_oracle_is_in_the_user_docs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "oracles.md").read_text()
    missing = [oid for oid in CATALOG if f"`{oid}`" not in doc]
    assert missing == [], f"docs/oracles.md does not document {missing}"


# -- cancel.error ----------------------------------------------------------------------------


def test_cancel_answered_with_an_error_is_a_must_finding() -> None:
    h = H()
    h.new("A")
    h.step("cancel", "A", outcome="error", error={"code": -32603, "message": "boom"})
    (f,) = [f for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"]
    assert (f.severity, f.rule, f.session) == ("MUST", "CANCEL-AGENT-STOPREASON-MUST", "A")


def v2(h: H) -> H:
    """``h`` as a run whose agent answered protocol version 2 (its initialize verdict)."""
    h.h.snapshot()[0].data["protocol"] = {"offered": 2, "answered": 2}
    return h


def test_a_v2_cancel_whose_turn_ends_with_stop_reason_error_is_a_must_finding() -> None:
    h = v2(H())
    h.new("A")
    h.step("cancel", "A", stop_reason="error")
    h.step("cancel", "A", stop_reason="cancelled")
    (f,) = [f for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"]
    assert (f.severity, f.step, f.rule) == ("MUST", 1, "CANCEL-AGENT-STOPREASON-MUST")
    assert "stop reason error" in f.message


def test_a_v2_load_is_named_as_the_resume_it_was_in_messages() -> None:
    h = v2(H())
    h.new("A", sp("append", "Answer like a ship's captain, always."))
    h.step("load", "A", outcome="timeout")
    (f,) = [f for f in evaluate(h.h.snapshot()) if f.oracle == "agent.hang"]
    assert f.message == "no answer to resume (replayFrom start) within the timeout"


def test_a_v2_prompt_answer_needs_a_message_id_not_a_stop_reason() -> None:
    def answered(result: dict[str, Any], version: int) -> list[str]:
        h = H()
        if version == 2:
            v2(h)
        h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 5,
                                                  "method": "session/prompt", "params": {}}})
        h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 5,
                                                  "result": result}})
        return [f.message for f in evaluate(h.h.snapshot()) if f.oracle == "protocol.malformed"]

    assert answered({"messageId": "m1"}, 2) == []
    assert answered({"stopReason": "end_turn"}, 1) == []
    assert "'messageId' is a required property" in answered({"stopReason": "end_turn"}, 2)[0]
    assert "'stopReason' is a required property" in answered({"messageId": "m1"}, 1)[0]


def test_cancel_on_a_session_the_agent_no_longer_has_open_is_not_judged() -> None:
    # claude-agent-acp: after a restart (no load) or a close, the prompt is about an unknown
    # session; "Resource not found" is the right answer, not a cancellation bug.
    h = H()
    h.new("A")
    h.step("restart")
    h.step("cancel", "A", outcome="error", error={"code": -32002, "message": "Resource not found"})
    h.new("B")
    h.step("close", "B")
    h.step("cancel", "B", outcome="error", error={"code": -32002, "message": "Resource not found"})
    assert [f for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"] == []
    # Loaded again in the new process: judged again.
    h.step("load", "A")
    h.step("cancel", "A", outcome="error", error={"code": -32603, "message": "boom"})
    assert [f.session for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"] == ["A"]


def test_a_cancelled_turn_after_a_refused_reattach_is_the_refusals_to_judge() -> None:
    # --bug refused-reattach-unloads once shrank to "new A; resume A (invalid); cancel A" as
    # a cancel.error: the prompt failed because the refusal unloaded A, before the cancel
    # written behind it could reach it. After A's next completed turn, judged again.
    h = H()
    h.new("A")
    h.step("resume", "A", outcome="error", error={"code": -32602, "message": "bad prompt"})
    h.step("cancel", "A", outcome="error", error={"code": -32002, "message": "Resource not found"})
    assert [f for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"] == []
    h.step("prompt", "A")
    h.step("cancel", "A", outcome="error", error={"code": -32603, "message": "boom"})
    assert [f.step for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"] == [4]


def test_cancel_answered_with_a_stop_reason_is_fine() -> None:
    h = H()
    h.new("A")
    h.step("cancel", "A")
    assert [f for f in evaluate(h.h.snapshot()) if f.oracle == "cancel.error"] == []


# -- prompt.leak -----------------------------------------------------------------------------


def test_leak_fires_on_another_sessions_text() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    step = h.prompt("A", system=appended(Q))
    f = only(h.findings(), "prompt.leak")
    assert (f.severity, f.session, f.step) == ("MUST", "A", step)
    assert f.evidence["foreign_session"] == "B"
    assert f.evidence["slot"] == "system"
    assert Q in f.evidence["excerpt"]
    # A's own text is missing too.
    assert "prompt.lost" in ids(h.findings())


def test_leak_into_a_session_without_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B")
    h.prompt("B", system=appended(P))
    assert only(h.findings(), "prompt.leak").evidence["foreign_session"] == "A"


def test_a_deleted_sessions_prompt_in_a_later_session_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("delete", "A")
    h.new("B")
    h.prompt("B", system=appended(P))
    f = only(h.findings(), "prompt.leak")
    assert (f.severity, f.session, f.evidence["foreign_session"]) == ("MUST", "B", "A")
    # Deleting is no finding by itself, and the correct agent's B runs on the defaults.
    h2 = H()
    h2.new("A", sp("append", P))
    h2.step("delete", "A")
    h2.new("B")
    h2.prompt("B", system=appended())
    assert h2.findings() == []


@pytest.mark.parametrize("op", ["set_mode", "set_config_option"])
def test_a_prompt_lost_after_a_mode_or_model_switch_is_lost(op: str) -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step(op, "A", pick=0)
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-APPLY-NEW-MUST")
    assert any(f"session/{op} A" in line for line in f.evidence["steps"])
    kept = H()
    kept.new("A", sp("append", P))
    kept.step(op, "A", pick=0)
    kept.prompt("A", system=appended(P))
    assert kept.findings() == []


def test_a_prompt_lost_after_a_retitle_is_lost_and_a_kept_one_is_fine() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("set_title", "A", title="Renamed")
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-APPLY-NEW-MUST")
    assert any("session/set_title A" in line for line in f.evidence["steps"])
    kept = H()
    kept.new("A", sp("append", P))
    kept.step("set_title", "A", title="Renamed")
    kept.prompt("A", system=appended(P))
    assert kept.findings() == []
    # A retitle is not a mode switch: an append that replaced the defaults is still judged.
    replaced = H()
    replaced.new("A", sp("append", P))
    replaced.step("set_title", "A", title="Renamed")
    replaced.prompt("A", system=[P])
    assert "append.replaced-default" in ids(replaced.findings())


def test_title_is_read_from_session_capabilities() -> None:
    init = {"agentCapabilities": {"sessionCapabilities": {"title": {}}}}
    assert Capabilities.from_initialize(init).title
    assert not Capabilities.from_initialize(
        {"agentCapabilities": {"sessionCapabilities": {"title": None}}}).title


def test_a_mode_may_change_the_defaults_but_not_the_prompt() -> None:
    # A plan mode's instructions replace the defaults: judged against the defaults learned in
    # the default mode, append would look like it replaced them. After a switch it is not
    # judged; the prompt itself still is.
    plan = ["Plan mode. Write a numbered plan and change nothing at all.\n\n" + P]
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("set_mode", "A", pick=2)
    h.prompt("A", system=plan)
    assert h.findings() == []
    h2 = H()
    h2.new("A", sp("append", P))
    h2.prompt("A", system=plan)
    assert "append.replaced-default" in ids(h2.findings())  # the same request, no switch


def test_delete_is_read_from_session_capabilities() -> None:
    init = {"agentCapabilities": {"sessionCapabilities": {"delete": {}, "close": None}}}
    caps = Capabilities.from_initialize(init)
    assert caps.delete and not caps.close
    assert not Capabilities.from_initialize({"agentCapabilities": {
        "sessionCapabilities": {"delete": True}}}).delete  # a boolean is not an object marker


def test_short_common_text_is_not_a_leak() -> None:
    short = "Be brief."  # shorter than MIN_SIGNIFICANT: may occur anywhere by chance
    h = H()
    h.new("A", sp("append", short))
    h.new("B", sp("append", short, Q))
    h.prompt("A", system=appended(short))
    h.prompt("B", system=appended(short, Q))
    assert h.findings() == []


def test_fork_inherits_source_text_without_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="C")  # prompt omitted: kept (the source's) or default
    h.prompt("C", system=appended(P))
    found = h.findings()
    assert "prompt.leak" not in ids(found)
    assert only(found, "lifecycle.omitted-fallback").evidence["choice"] == "kept"


def test_fork_with_a_different_prompt_may_not_carry_source_text_to_source() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="C", systemPrompt=sp("append", R))
    h.prompt("C", system=appended(R))
    h.prompt("A", system=appended(P, R))
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"]) == ("A", "C")


def test_a_side_request_owes_no_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.model("A", system=["Generate a title."], side=True, tied=True)
    h.model(None, system=["Generate a title. " + P], side=True)
    assert h.findings() == []


def test_a_side_request_of_no_session_with_two_sessions_texts_is_a_leak() -> None:
    """Every request is judged for leaks (#21): a title made from two sessions' prompts
    leaks one into the other's, tied to a turn or not."""
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.model(None, system=["Generate a title. " + Q + P], side=True)
    f = only(h.findings(), "prompt.leak")
    assert f.severity == "MUST" and {f.session, f.evidence["foreign_session"]} == {"A", "B"}
    assert "tied to no session" in f.message


def test_a_side_request_of_one_session_holding_anothers_text_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.model("A", system=["Generate a title. " + Q], side=True, tied=True)
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"]) == ("A", "B")
    assert "side request" in f.message


def test_a_fork_and_its_source_in_one_untied_request_are_no_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="B", systemPrompt=sp("append", Q))
    h.model(None, system=["Summarise. " + P + Q], side=True)
    assert "prompt.leak" not in ids(h.findings())


# -- prompt.lost / prompt.altered ------------------------------------------------------------


def test_lost_fires_when_the_prompt_is_missing() -> None:
    h = H()
    h.new("A", sp("append", P))
    step = h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule, f.step) == ("MUST", "SP-AGENT-APPLY-NEW-MUST", step)
    assert f.evidence["expected"] == P
    assert DEFAULTS.splitlines()[0] in f.evidence["system_slot"]


def test_whitespace_only_blocks_do_not_cause_lost() -> None:
    h = H()
    h.new("A", sp("append", " ", "\n\n", "\t \u00a0\u3000"))
    h.prompt("A", system=appended())
    h.new("B", sp("append", "", P, "  "))
    h.prompt("B", system=appended(P))
    assert h.findings() == []


def test_altered_fires_when_a_block_is_dropped() -> None:
    h = H()
    h.new("A", sp("append", P, Q))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.altered")
    assert f.severity == "MUST"
    assert f.evidence["missing"] == [Q]


def test_dropped_block_is_altered_when_only_short_blocks_arrive() -> None:
    # The only significant block is the dropped one; the short blocks before it did arrive,
    # so a block was dropped: altered, not lost (found by the planted drop-last-block bug).
    h = H()
    h.new("A", sp("override", "", "[]", "\u00e9\u00e8", P))
    h.prompt("A", system=["\n\n[]\n\n\u00e9\u00e8"])
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.evidence["missing"]) == ("MUST", [P])
    assert "'[]'" in f.message and "prompt.lost" not in ids(h.findings())


def test_short_blocks_that_the_defaults_hold_do_not_make_lost_altered() -> None:
    h = H()
    h.new("A", sp("append", "concisely", P))  # "concisely" is in the default instructions
    h.prompt("A", system=appended())
    assert ids(h.findings()) == {"prompt.lost"}


def test_short_blocks_of_another_prompt_do_not_make_lost_altered() -> None:
    h = H()
    h.new("A", sp("append", "[]", P))
    h.new("B", sp("append", "[]", Q))
    h.prompt("A", system=appended("[]"))  # "[]" may be B's as well as A's
    assert ids(h.findings()) == {"prompt.lost"}


def test_altered_fires_on_truncation() -> None:
    long = ("lorem ipsum dolor sit amet " * 3000) + " [acp-fuzz canary A1]"
    h = H()
    h.new("A", sp("append", long))
    h.prompt("A", system=appended(long[:65536]))
    assert only(h.findings(), "prompt.altered").severity == "MUST"


def test_long_prompt_missing_entirely_is_lost_not_altered() -> None:
    long = ("lorem ipsum dolor sit amet " * 3000) + " [acp-fuzz canary A1]"
    h = H()
    h.new("A", sp("append", long))
    h.prompt("A", system=appended())
    assert ids(h.findings()) == {"prompt.lost"}


def test_a_shared_short_prefix_is_not_truncation() -> None:
    # Two prompts that start alike (same prose, different canary): the other one arriving is
    # not a truncated copy of this one.
    prose = "You are a code review specialist. Focus on security vulnerabilities."
    h = H()
    h.new("A", sp("append", prose + " [acp-fuzz canary A1]"))
    h.prompt("A", system=appended(prose + " [acp-fuzz canary B2]"))
    assert ids(h.findings()) == {"prompt.lost"}


def test_altered_is_should_when_only_whitespace_or_invisibles_differ() -> None:
    h = H()
    h.new("A", sp("append", "Answer   in\u200b French, always and everywhere."))
    h.prompt("A", system=appended("Answer in French, always and everywhere."))
    f = only(h.findings(), "prompt.altered")
    assert f.severity == "SHOULD"


# -- prompt.duplicated / prompt.misplaced ----------------------------------------------------


def test_duplicated_fires_on_a_repeated_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A", systemPrompt=sp("append", P))
    step = h.prompt("A", system=appended(P, P))
    f = only(h.findings(), "prompt.duplicated")
    assert (f.severity, f.step, f.evidence["count"]) == ("SHOULD", step, 2)


def test_a_prompt_that_repeats_itself_is_not_duplicated() -> None:
    h = H()
    h.new("A", sp("append", P, P))
    h.prompt("A", system=appended(P, P))
    assert h.findings() == []


def test_misplaced_fires_when_the_prompt_is_in_the_user_turn() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(), user=f"[System]\n{P}\n\nReply with ok.")
    f = only(h.findings(), "prompt.misplaced")
    assert (f.severity, f.evidence["slot"]) == ("SHOULD", "user")
    assert "prompt.lost" not in ids(h.findings())


def test_misplaced_in_history_content() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(), history=[P])
    assert only(h.findings(), "prompt.misplaced").evidence["slot"] == "history"


# -- override.not-applied / append.replaced-default --------------------------------------------


def test_override_not_applied_needs_the_defaults_present() -> None:
    h = H()
    h.new("A", sp("override", P))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "override.not-applied")
    assert f.severity == "MUST"
    assert f.evidence["share"] == 1.0


def test_append_replaced_default() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[P])
    f = only(h.findings(), "append.replaced-default")
    assert (f.severity, f.evidence["share"]) == ("MUST", 0.0)


@pytest.mark.parametrize("mode, system", [("override", appended(P)), ("append", [P])])
def test_default_checks_are_off_without_a_baseline(mode: str, system: list[str]) -> None:
    h = H()
    h.new("A", sp(mode, P))
    h.prompt("A", system=system)
    assert h.findings(baseline=None) == []
    assert h.findings(baseline=Baseline()) == []


def test_partial_defaults_under_override_give_no_verdict() -> None:
    # Between DEFAULT_ABSENT and DEFAULT_PRESENT nothing is reported (one of three lines).
    h = H()
    h.new("A", sp("override", P))
    h.prompt("A", system=[DEFAULTS.splitlines()[0] + "\n" + P])
    assert h.findings() == []


# -- payloads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("payload, reason, severity", [
    ({"mode": "prepend", "content": [{"type": "text", "text": P}]}, "mode-unknown", "MUST"),
    ({"mode": "append", "content": []}, "content-empty", "info"),
    ("a draft-era string prompt", "draft-string", "SHOULD"),
    ({"mode": "append", "content": [{"type": "image", "data": "x", "mimeType": "image/png"}]},
     "block-not-text", "MUST"),
])
def test_invalid_accepted_takes_the_severity_of_its_reason(payload: Any, reason: str,
                                                           severity: str) -> None:
    h = H()
    h.new("A", payload)
    f = only(h.findings(), "payload.invalid-accepted")
    assert (f.severity, f.evidence["reason"]) == (severity, reason)


def test_invalid_rejected_is_fine_and_leaves_no_session() -> None:
    h = H()
    h.new("A", {"mode": "prepend", "content": [{"type": "text", "text": P}]}, outcome="error",
          error={"code": -32602, "message": "Invalid params"})
    h.list_probe([])
    assert h.findings() == []


def test_override_not_advertised_is_invalid() -> None:
    caps = Capabilities(system_prompt=True, load=True, list=True)
    h = H(caps)
    h.new("A", sp("override", P))
    f = only(h.findings(), "payload.invalid-accepted")
    assert f.evidence["reason"] == "override-not-advertised"


def test_valid_rejected_on_new() -> None:
    h = H()
    h.new("A", sp("append", P), outcome="error", error={"code": -32603, "message": "boom"})
    f = only(h.findings(), "payload.valid-rejected")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-APPEND-MUST")


def test_valid_rejected_on_load_only_for_invalid_params() -> None:
    h = H()
    h.new("A", sp("override", P))
    # A session error on load is about the session, not the prompt.
    h.step("load", "A", systemPrompt=sp("override", P), outcome="error",
           error={"code": -32002, "message": "not found"})
    assert h.findings() == []
    # The session's own prompt, re-sent (SP-CLIENT-RESEND-SHOULD) and refused as invalid
    # params: the harness's SHOULD. Not MUST: no text says a load must succeed, and the code
    # is the agent's word, so it names the finding, never its level (issue #31 §3).
    h.step("load", "A", systemPrompt=sp("override", P), outcome="error",
           error={"code": -32602, "message": "Invalid params"})
    f = only(h.findings(), "payload.valid-rejected")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-RESEND-ACCEPTED-SHOULD")


@pytest.mark.parametrize("code", [-32602, -32603, -32000])
def test_a_refused_resend_on_a_session_with_a_turn_is_a_should_whatever_the_code(
        code: int) -> None:
    """codex-acp's finding 1 once was MUST only because its code was -32602, and nothing with
    another code (issue #31 §3): the refusal of a re-sent prompt on a session with a
    conversation is SHOULD whichever finding names it."""
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 1))
    h.step("load", "A", systemPrompt=sp("append", P), outcome="error",
           error={"code": code, "message": "no"})
    found = [f for f in h.findings() if f.severity != "info"]
    assert [(f.oracle, f.severity) for f in found] in (
        [("payload.valid-rejected", "SHOULD")], [("session.reattach-failed", "SHOULD")])
    assert found[0].rule == ("ACPFUZZ-RESEND-ACCEPTED-SHOULD" if code == -32602
                             else "ACPFUZZ-REATTACH-ADVERTISED-SHOULD")


def test_a_reattach_refused_while_a_turn_ran_is_not_held_against_the_agent() -> None:
    # codex's adapter: a busy session rejects prompt changes. An error with no side effect is
    # right; the turn after it must still show the old prompt.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P])
    h.step("resume", "A", systemPrompt=sp("append", P), busy=True, outcome="error",
           error={"code": -32602, "message": "Invalid params: session is busy"})
    h.step("load", "A", busy=True, outcome="error", error={"code": -32000, "message": "busy"})
    assert [f for f in h.findings() if f.severity != "info"] == []
    h.prompt("A", system=[DEFAULTS])  # ... but the refusal must not have cost the prompt
    assert only(h.findings(), "prompt.lost").session == "A"


@pytest.mark.parametrize("busy", [True, False])
def test_an_honest_refusal_of_a_change_is_scored_one_way(busy: bool) -> None:
    """codex's adapter documents, in one sentence, that it refuses a changed prompt with
    -32602 on a busy session and on one without a saved rollout. Both are honest refusals
    (SP-AGENT-ERROR-NOSIDEEFFECT-MUST's way out) that leave the change unapplied: one score,
    SHOULD (SP-LIFECYCLE-CHANGE-SHOULD), for either reason (issue #31 §3). The busy one was
    exempt, the unstored one a SHOULD."""
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A", systemPrompt=sp("append", Q), busy=busy, outcome="error",
           error={"code": -32602, "message": "Invalid params: cannot change systemPrompt now"})
    f = only(h.findings(), "payload.valid-rejected")
    assert (f.severity, f.rule) == ("SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")


def test_the_turn_beside_a_busy_resume_may_run_on_either_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    turn = h.turns.get("A", 0) + 1
    h.h.append("step", {"index": h.index, "name": "resume", "turn": turn,
                        "nonce": nonce_for("A", turn), "args": {
                            "op": "resume", "session": "A", "busy": True,
                            "systemPrompt": sp("append", Q)}})
    h.model("A", system=[DEFAULTS, Q])  # the agent applied the change mid-turn: fine
    h.turns["A"] = turn
    h.h.append("verdict", {"step": h.index, "what": "reply", "outcome": "ok"})
    h.index += 1
    assert [f for f in h.findings() if f.severity != "info"] == []
    h.prompt("A", system=[DEFAULTS, Q])  # after it, the change holds
    assert [f for f in h.findings() if f.severity != "info"] == []


def test_changed_prompt_rejected_on_load_is_a_should() -> None:
    # codex-acp 2.6.0: "Changing systemPrompt requires a persisted session". An agent that
    # cannot apply a change may answer with an error (SP-AGENT-ERROR-NOSIDEEFFECT-MUST);
    # not applying it is what SP-LIFECYCLE-CHANGE-SHOULD is about.
    for changed in (sp("append", Q), sp("override", P)):
        h = H()
        h.new("A", sp("append", P))
        h.step("load", "A", systemPrompt=changed, outcome="error",
               error={"code": -32602, "message": "Invalid params: Changing systemPrompt"})
        f = only(h.findings(), "payload.valid-rejected")
        assert (f.severity, f.rule) == ("SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")


def test_probe_to_an_agent_without_the_capability_is_info() -> None:
    h = H(Capabilities(load=True))
    h.new("A", sp("append", P))
    f = only(h.findings(), "payload.probe")
    assert f.severity == "info"
    # Nothing is expected of that session's model requests.
    h.prompt("A", system=appended())
    assert {x.severity for x in h.findings()} == {"info"}


# -- reject.side-effect ------------------------------------------------------------------------


def test_side_effect_listed_after_rejected_new() -> None:
    h = H()
    h.new("A", sp("append", P))
    step = h.new("B", {"mode": "prepend", "content": [{"type": "text", "text": Q}]},
                 outcome="error", error={"code": -32602, "message": "bad mode"})
    h.list_probe(["sess-1", "sess-99"])
    f = only(h.findings(), "reject.side-effect")
    assert (f.severity, f.step) == ("MUST", step)
    assert f.evidence["unexpected"] == ["sess-99"]


def test_list_after_successful_steps_is_not_a_side_effect() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("list")
    h.list_probe(["sess-1", "sess-from-an-earlier-run"])
    assert h.findings() == []


def test_rejected_text_reaching_the_model_is_a_side_effect() -> None:
    h = H()
    h.new("A", sp("append", P))
    bad = h.step("resume", "A", systemPrompt={"mode": "_vendor", "content": [
        {"type": "text", "text": Q}]}, outcome="error", error={"code": -32602, "message": "x"})
    h.prompt("A", system=appended(P, Q))
    f = only(h.findings(), "reject.side-effect")
    assert f.step == bad
    assert "prompt.lost" not in ids(h.findings())


def test_a_refused_block_that_is_a_piece_of_accepted_text_proves_nothing() -> None:
    # Seen with a busy session that refuses a change: the refused override reused the start
    # of the session's own text, which the session's turns rightly carry.
    h = H()
    own = P + " [acp-fuzz canary B2]"
    h.new("A", sp("append", own))
    h.step("resume", "A", systemPrompt=sp("override", P, Q), busy=True, outcome="error",
           error={"code": -32000, "message": "Session is busy"})
    h.prompt("A", system=appended(own))
    assert [f for f in h.findings() if f.severity != "info"] == []
    # The refused payload's own text (Q) reaching the model is still a side effect.
    h.prompt("A", system=appended(own, Q))
    assert only(h.findings(), "reject.side-effect").step == 1


# -- deferral and omitted prompts --------------------------------------------------------------


def test_deferred_change_on_load_is_info_not_a_failure() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-deferred")
    assert f.severity == "info"
    assert f.rule == "SP-LIFECYCLE-DEFER-MAY"
    assert not [x for x in h.findings() if x.severity != "info"]
    # --strict promotes it to SHOULD.
    assert only(h.findings(strict=True), "prompt.change-deferred").severity == "SHOULD"


def test_applied_change_on_load_gives_nothing() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(Q))
    assert h.findings() == []


def test_change_on_a_cold_load_still_unapplied_is_change_ignored_not_lost() -> None:
    # The old prompt in use is a change kept back (SP-LIFECYCLE-CHANGE-SHOULD), never "lost";
    # the cold load in a new process was the rebuild (for an agent that cannot be made to
    # compact), so two turns on the old prompt after it are no longer a deferral.
    h = H()
    h.new("A", sp("append", P))
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    assert "prompt.change-ignored" not in ids(h.findings())  # one turn of slack
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-ignored")
    assert (f.severity, f.rule) == ("SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")
    assert f.evidence["rebuilt_by"] == "the cold load at step 3"
    assert f.evidence["turns_after"] == [4, 5]
    assert "cannot be made to compact" in f.message
    assert "prompt.lost" not in ids(h.findings())


def test_same_prompt_resent_after_restart_must_arrive() -> None:
    # The headline bug: accepted on a cold load, then the defaults only. MUST, because the
    # schema says an agent that cannot apply the prompt MUST answer with an error instead.
    h = H()
    h.new("A", sp("append", P))
    h.step("restart")
    step = h.step("resume", "A", systemPrompt=sp("append", P))
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")
    assert f.step == step + 1


@pytest.mark.parametrize("op", ["load", "resume"])
@pytest.mark.parametrize("choice, system", [("kept", appended(P)), ("default", appended())])
def test_omitted_prompt_on_reattach_accepts_kept_and_default(op: str, choice: str,
                                                             system: list[str]) -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step(op, "A")
    h.prompt("A", system=system)
    found = h.findings(strict=True)
    f = only(found, "lifecycle.omitted-fallback")
    assert (f.severity, f.evidence["choice"]) == ("info", choice)
    assert [x for x in found if x.severity != "info"] == []


def test_null_prompt_on_resume_is_like_omitted() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A", systemPrompt=None)
    h.prompt("A", system=appended())
    assert only(h.findings(), "lifecycle.omitted-fallback").evidence["choice"] == "default"


def test_omitted_choice_must_stay_consistent() -> None:
    # After the first turn chose "default", the stored prompt may not come back.
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A")
    h.prompt("A", system=appended())
    h.prompt("A", system=appended(P))
    assert "prompt.lost" not in ids(h.findings())
    # The defaults-only candidate does not fit: the session's own text is back. That is not
    # reported as lost (nothing is missing), but also not silently re-accepted as "kept".
    assert [f.oracle for f in h.findings() if f.severity != "info"] == []


# -- agent.crash / agent.hang / protocol.malformed ---------------------------------------------


def test_crash_and_hang() -> None:
    h = H()
    crash = h.new("A", sp("append", P), outcome="exited")
    f = only(h.findings(), "agent.crash")
    assert (f.severity, f.step) == ("MUST", crash)
    h2 = H()
    hang = h2.new("A", sp("append", P), outcome="timeout")
    f = only(h2.findings(), "agent.hang")
    assert (f.severity, f.step) == ("MUST", hang)


def test_restart_that_comes_back_is_not_a_crash() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("restart")
    assert h.findings() == []
    h.step("restart", outcome="exited")
    assert only(h.findings(), "agent.crash").message.startswith("the agent did not come back")


def _recv(h: H, msg: Any, **extra: Any) -> None:
    h.h.append("acp", {"dir": "recv", "msg": msg, **extra})


def test_malformed_bad_line_and_schema_breaks() -> None:
    h = H()
    _recv(h, None, raw="{not json", error="invalid JSON")
    f = only(h.findings(), "protocol.malformed")
    assert f.evidence["problem"] == "invalid JSON"

    h = H()
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 7, "method": "session/new",
                                               "params": {}}})
    _recv(h, {"jsonrpc": "2.0", "id": 7, "result": {"session": "x"}})
    assert "sessionId" in only(h.findings(), "protocol.malformed").message

    h = H()
    _recv(h, {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}})
    assert "protocol.malformed" in ids(h.findings())


def test_well_formed_messages_are_not_malformed() -> None:
    h = H()
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                               "params": {}}})
    _recv(h, {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "sess-1"}})
    _recv(h, {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "sess-1", "update": {"sessionUpdate": "agent_message_chunk",
                                          "content": {"type": "text", "text": "ok"}}}})
    _recv(h, {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "bad"}})
    assert h.findings() == []


def test_a_late_answer_is_not_a_bad_line() -> None:
    # qwen-code, seed 2, under load (2026-12-05): a MUST protocol.malformed "the agent wrote a
    # bad line (late)" for an answer that came after a bound of ours gave up on it. A late
    # answer is a JSON-RPC message; only an id answered twice or never sent is a bad one.
    h = H()
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 7, "method": "session/new",
                                               "params": {}}})
    _recv(h, {"jsonrpc": "2.0", "id": 7, "result": {"sessionId": "s-1"}}, error="late")
    assert h.findings() == []
    # Its shape is still judged.
    _recv(h, {"jsonrpc": "2.0", "id": 7, "result": {"session": "x"}}, error="late")
    assert "sessionId" in only(h.findings(), "protocol.malformed").message
    for marker in ("duplicate-id", "unknown-id"):
        h = H()
        _recv(h, {"jsonrpc": "2.0", "id": 9, "result": {}}, error=marker)
        assert only(h.findings(), "protocol.malformed").evidence["problem"] == marker


def test_missing_session_id_from_new_is_malformed() -> None:
    h = H()
    h.new("A", sp("append", P), outcome="error", error={"harness": "no sessionId in result"})
    f = only(h.findings(), "protocol.malformed")
    assert f.rule == "FR-WIRE-NDJSON-MUST"


# -- evaluation is deterministic and order-driven ----------------------------------------------


def test_findings_are_sorted_and_deduplicated() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.prompt("A", system=appended(Q))
    h.prompt("A", system=appended(Q))  # the same leak again, at a later step
    found = h.findings()
    assert found == sorted(found, key=lambda f: (f.step, f.oracle, f.session or ""))
    assert len({f.key() for f in found}) == len(found)
    assert evaluate(h.h.snapshot(), baseline=BASE) == found


# -- the conversation after a load or resume (session.history-lost) ------------------------------

def _turn_text(session: str, turn: int) -> str:
    return f"Reply with ok. This is turn {turn} of session {session}. [{nonce_for(session, turn)}]"


def _reloaded(op: str, *, history: list[str], body: Any = None) -> list[Finding]:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 1))
    h.step("restart")
    h.step(op, "A")
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 2), history=history, body=body)
    return [f for f in evaluate(h.h.snapshot(), baseline=BASE)
            if f.oracle == "session.history-lost"]


@pytest.mark.parametrize("op", ["load", "resume"])
def test_a_conversation_gone_after_a_load_or_resume_is_a_must(op: str) -> None:
    """Under acp-fuzz's own rule: the schema's load and resume texts speak of what the client
    is sent, not the model (issue #31 §3; they were cited before)."""
    (f,) = _reloaded(op, history=[])
    assert (f.severity, f.rule, f.session) == ("MUST", "ACPFUZZ-CONVERSATION-KEPT-MUST", "A")
    assert f.evidence["missing_turn_nonce"] == nonce_for("A", 1)
    # The turn before the reload carried it: the request after it holds it again.
    assert _reloaded(op, history=[_turn_text("A", 1), "ok"]) == []


def test_an_earlier_turn_gone_is_lost_too_and_a_failed_load_before_is_named() -> None:
    """gemini-cli 0.61.0: a refused load had already written an empty chat over the session's
    file, so a later load restored only the turn after it (docs/findings.md, finding 6)."""
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 1))
    h.step("load", "A", outcome="error", error=GONE)
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 2),
             history=[_turn_text("A", 1), "ok"])
    h.step("restart")
    h.step("load", "A")
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 3),
             history=[_turn_text("A", 2), "ok"])
    # Only turn 1, from before the refused load, is gone; turn 2, after it, is there: the
    # refusal destroyed it, and the finding says so (issue #31 §3).
    (f,) = [f for f in h.findings() if f.oracle.startswith("session.history")]
    assert (f.oracle, f.severity, f.rule) == ("session.history-destroyed", "MUST",
                                              "ACPFUZZ-CONVERSATION-KEPT-MUST")
    assert f.evidence["missing"] == [nonce_for("A", 1)]
    assert f.evidence["present"] == [nonce_for("A", 2)]
    assert f.evidence["failed_reattach"] == ["3: session/load A (systemPrompt omitted)"]
    assert "though not the last" in f.message
    assert "the refused 3: session/load A (systemPrompt omitted) destroyed it" in f.message


def test_a_loss_that_takes_the_turns_after_a_refusal_too_is_not_pinned_on_it() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 1))
    h.step("load", "A", outcome="error", error=GONE)
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 2),
             history=[_turn_text("A", 1), "ok"])
    h.step("restart")
    h.step("load", "A")
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 3), history=[])
    (f,) = [f for f in h.findings() if f.oracle.startswith("session.history")]
    assert f.oracle == "session.history-lost"
    assert f.evidence["failed_reattach"] == ["3: session/load A (systemPrompt omitted)"]


def test_a_forks_inherited_turns_are_not_owed_after_it_is_loaded() -> None:
    # SES-FORK-DEF leaves how much of the source's context a fork carries to the agent.
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", 1))
    h.step("fork", "A", new="B")
    h.prompt("B", system=[DEFAULTS, P], user=_turn_text("B", 1))
    h.step("restart")
    h.step("load", "B")
    h.prompt("B", system=[DEFAULTS, P], user=_turn_text("B", 2),
             history=[_turn_text("B", 1), "ok"])
    assert [f for f in h.findings() if f.oracle == "session.history-lost"] == []


def test_a_conversation_the_provider_holds_is_not_judged() -> None:
    """OpenAI's Responses API can chain on ``previous_response_id``: the earlier turns are
    then not in the request at all, and their absence proves nothing."""
    assert _reloaded("load", history=[], body={"previous_response_id": "resp_1"}) == []


# -- an advertised load or resume refused (session.reattach-failed) -----------------------------

GONE = {"code": -32603, "message": "Internal error",
        "data": {"details": "No previous sessions found for this project."}}


def _refused(op: str, *, turns: int = 1, restart: bool = True, caps: Capabilities = ALL_CAPS,
             before: list[str] = (), **load: Any) -> list[Finding]:  # type: ignore[assignment]
    h = H(caps)
    h.new("A", sp("append", P))
    for t in range(turns):
        h.prompt("A", system=[DEFAULTS, P], user=_turn_text("A", t + 1))
    for b in before:
        h.step(b, "A")
    if restart:
        h.step("restart")
    h.step(op, "A", outcome="error", error=GONE, **load)
    return [f for f in evaluate(h.h.snapshot(), baseline=BASE)
            if f.oracle == "session.reattach-failed"]


@pytest.mark.parametrize("op", ["load", "resume"])
@pytest.mark.parametrize("restart", [True, False])
def test_an_advertised_reattach_refused_for_a_session_with_a_turn_is_a_should(
        op: str, restart: bool) -> None:
    """gemini-cli 0.61.0: ``session/load`` of a session it created and prompted a second
    earlier fails with "No previous sessions found for this project." (docs/findings.md)."""
    (f,) = _refused(op, restart=restart)
    assert (f.severity, f.rule, f.session) == ("SHOULD", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
                                               "A")
    assert f.evidence["after_restart"] is restart
    assert f.evidence["completed_turns"] == 1
    assert "No previous sessions" in str(f.evidence["error"])
    # Re-sending the session's own prompt is nothing to refuse either.
    assert len(_refused(op, systemPrompt=sp("append", P))) == 1


def test_a_refused_reattach_is_not_judged_where_the_agent_may_refuse() -> None:
    assert _refused("load", turns=0) == []  # no conversation to persist yet
    assert _refused("load", caps=Capabilities(system_prompt=True, resume=True)) == []
    assert _refused("resume", caps=Capabilities(system_prompt=True, load=True)) == []
    assert _refused("resume", before=["close"]) == []  # closed: it may be gone
    # A changed prompt the agent cannot apply is refused rightly (payload.valid-rejected
    # judges that), as are vendor fields it does not know.
    assert _refused("load", systemPrompt=sp("append", Q)) == []
    assert _refused("load", extra={"_meta": {"x": 1}}) == []
    # Another directory, or extra roots: the schema lets an agent hold a load or resume to
    # the session's own cwd.
    assert _refused("load", cwd="moved") == []
    assert _refused("resume", roots=1) == []


def test_a_moved_or_rooted_reattach_refused_with_invalid_params_is_not_pinned_on_the_prompt(
        ) -> None:
    for where in ({"cwd": "moved"}, {"roots": 2}):
        h = H()
        h.new("A", sp("override", P))
        h.step("load", "A", systemPrompt=sp("override", P), outcome="error",
               error={"code": -32602, "message": "cwd does not match the session"}, **where)
        assert h.findings() == [], where


def test_a_prompt_lost_in_another_directory_is_lost() -> None:
    """The prompt belongs to the session wherever it runs: a load in a new directory that
    accepted the re-sent prompt and shows only the defaults lost it (MUST)."""
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", P), cwd="moved", roots=1)
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert f.severity == "MUST"
    assert any("in a new directory with 1 additional root(s)" in line
               for line in f.evidence["steps"])
    kept = H()
    kept.new("A", sp("append", P))
    kept.step("load", "A", systemPrompt=sp("append", P), cwd="moved")
    kept.prompt("A", system=appended(P))
    assert kept.findings() == []


# -- what was judged (the matrix's "tested") ----------------------------------------------------

def _judged(h: H) -> dict[tuple[str, str], int]:
    judge = Evaluator(baseline=BASE)
    judge.feed(h.h.snapshot())
    return judge.judged()


def test_a_correct_append_session_is_judged_on_what_it_exercised_only() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    judged = _judged(h)
    assert h.findings() == []
    assert judged[("prompt.lost", "SP-AGENT-APPLY-NEW-MUST")] == 1
    assert judged[("prompt.misplaced", "SP-AGENT-APPEND-PLACEMENT-SHOULD")] == 1
    assert judged[("append.replaced-default", "SP-AGENT-APPEND-ADDITIVE-DEF")] == 1
    assert judged[("payload.valid-rejected", "SP-AGENT-APPEND-MUST")] == 1
    assert judged[("agent.hang", "SES-AGENT-BASELINE-MUST")] == 2  # new, prompt
    # Nothing here could have shown these: one session, no override, no load, no rejection.
    for oracle in ("prompt.leak", "override.not-applied", "session.history-lost",
                   "session.reattach-failed", "reject.side-effect", "cancel.error",
                   "payload.invalid-accepted"):
        assert not any(o == oracle for o, _ in judged), oracle


def test_judged_follows_the_rule_of_the_case() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P))
    h.new("B", sp("override", Q))
    h.prompt("B", system=[Q])
    h.new("C", {"mode": "replace", "content": [{"type": "text", "text": R}]}, outcome="error",
          error={"code": -32602, "message": "bad mode"})
    h.prompt("A", system=appended(P))
    h.step("load", "A", systemPrompt=sp("append", R))  # a changed prompt
    judged = _judged(h)
    assert ("prompt.leak", "ACPFUZZ-SESSION-ISOLATION-MUST") in judged
    assert ("override.not-applied", "SP-AGENT-OVERRIDE-REPLACES-DEF") in judged
    assert ("payload.valid-rejected", "SP-AGENT-OVERRIDE-MUST") in judged
    assert ("payload.valid-rejected", "SP-LIFECYCLE-CHANGE-SHOULD") in judged
    assert ("payload.invalid-accepted", "SP-AGENT-UNKNOWN-MODE-MUST") in judged
    assert ("reject.side-effect", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST") in judged


@pytest.mark.parametrize("op", ["load", "resume"])
def test_a_reattach_with_a_conversation_is_judged_whether_it_holds_or_not(op: str) -> None:
    h = H()
    h.new("A", sp("append", P))
    h.prompt("A", system=appended(P), user=_turn_text("A", 1))
    h.step("restart")
    h.step(op, "A")
    h.prompt("A", system=appended(P), history=[_turn_text("A", 1)],
             user=_turn_text("A", 2))
    judged = _judged(h)
    assert ids(h.findings()) == {"lifecycle.omitted-fallback"}  # info: it kept the prompt
    assert judged[("session.history-lost", "ACPFUZZ-CONVERSATION-KEPT-MUST")] == 1
    assert judged[("session.reattach-failed", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD")] == 1
    # Refused: still one opportunity, now with its finding.
    h2 = H()
    h2.new("A", sp("append", P))
    h2.prompt("A", system=appended(P), user=_turn_text("A", 1))
    h2.step(op, "A", outcome="error", error=GONE)
    assert _judged(h2)[("session.reattach-failed", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD")] == 1
    assert "session.reattach-failed" in ids(h2.findings())


def test_a_refused_prompt_with_a_custom_root_field_is_not_a_valid_rejected() -> None:
    # The valid class "unknown-field" puts a field at the root of SystemPrompt, which the ACP
    # docs forbid (EXT-ROOT-FIELDS-MUSTNOT): the harness broke the protocol, not the agent.
    decorated = {**sp("append", P), "instructions": "Decoration text: answer only in haiku."}
    h = H()
    h.new("A", decorated, outcome="error", error={"code": -32602, "message": "unknown field"})
    h.new("B", sp("append", P), outcome="error", error={"code": -32602, "message": "no"})
    assert [f.session for f in evaluate(h.h.snapshot())
            if f.oracle == "payload.valid-rejected"] == ["B"]
