"""Protocol version negotiation and the v2 capability placement (acp_fuzz.core.protocol)."""

from __future__ import annotations

import pytest

from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.protocol import (
    NegotiationError,
    agent_info,
    answered,
    initialize_params,
    negotiate,
    offer_for,
    parse_choice,
)
from acp_fuzz.core.steps import describe

INFO = {"name": "acp-fuzz", "version": "0"}
V1CAPS = {"fs": {"readTextFile": True}}


@pytest.mark.parametrize(("choice", "offer"), [("1", 1), ("2", 2), ("auto", 2)])
def test_offer_for_each_choice(choice: str, offer: int) -> None:
    assert offer_for(choice) == offer


@pytest.mark.parametrize("bad", ["3", "v2", "", "AUTO"])
def test_bad_choice_is_rejected_with_one_line(bad: str) -> None:
    with pytest.raises(ValueError, match="--protocol must be one of 1, 2, auto") as e:
        parse_choice(bad)
    assert "\n" not in str(e.value)


def test_initialize_params_per_version() -> None:
    v1 = initialize_params(1, choice="1", info=INFO, v1_capabilities=V1CAPS)
    assert v1 == {"protocolVersion": 1, "clientCapabilities": V1CAPS, "clientInfo": INFO}
    v2 = initialize_params(2, choice="2", info=INFO, v1_capabilities=V1CAPS)
    assert v2 == {"protocolVersion": 2, "info": INFO, "capabilities": {}}
    # auto may be answered in v1: both spellings travel.
    auto = initialize_params(2, choice="auto", info=INFO, v1_capabilities=V1CAPS)
    assert auto["protocolVersion"] == 2 and auto["info"] == INFO
    assert auto["clientInfo"] == INFO and auto["clientCapabilities"] == V1CAPS


@pytest.mark.parametrize(("choice", "version", "expected"), [
    ("1", 1, 1), ("2", 2, 2), ("auto", 2, 2), ("auto", 1, 1)])
def test_negotiate_accepts(choice: str, version: int, expected: int) -> None:
    assert negotiate(choice, {"protocolVersion": version}) == expected


@pytest.mark.parametrize(("choice", "answer", "why"), [
    ("1", {"protocolVersion": 2}, "offer of 1"),           # above the offer
    ("auto", {"protocolVersion": 3}, "offer of 2"),        # above the offer
    ("2", {"protocolVersion": 1}, "--protocol 1 or --protocol auto"),  # not what was asked
    ("auto", {"protocolVersion": 0}, "does not speak"),    # below anything supported
    ("auto", {"protocolVersion": "2"}, "no integer"),
    ("auto", {"protocolVersion": True}, "no integer"),
    ("auto", {}, "no integer"),
    ("auto", None, "no integer"),
])
def test_negotiate_refuses_with_one_line(choice: str, answer: object, why: str) -> None:
    with pytest.raises(NegotiationError, match=why) as e:
        negotiate(choice, answer)
    assert "\n" not in str(e.value)


def test_a_v1_offer_goes_on_in_v1_when_the_answer_has_no_version() -> None:
    # Nothing to choose between: the run goes on, and protocol.malformed reports the answer.
    assert negotiate("1", {}) == 1 and negotiate("1", {"protocolVersion": "1"}) == 1
    with pytest.raises(NegotiationError, match="no integer"):
        negotiate("2", {})


def test_answered_and_agent_info() -> None:
    assert answered(None) == 1 and answered({"protocolVersion": 7}) == 1
    assert answered({"protocolVersion": 2}) == 2 and answered({"protocolVersion": True}) == 1
    assert agent_info({"protocolVersion": 1, "agentInfo": {"name": "a"}}) == {"name": "a"}
    assert agent_info({"protocolVersion": 2, "info": {"name": "b"},
                       "agentInfo": {"name": "a"}}) == {"name": "b"}
    assert agent_info({"protocolVersion": 2, "info": "x"}) == {}


def test_v2_capabilities_are_read_from_capabilities_session() -> None:
    init = {"protocolVersion": 2, "capabilities": {"session": {
        "systemPrompt": {"mode": {"override": {}}}, "fork": {}, "delete": {}, "title": {}}}}
    caps = Capabilities.from_initialize(init)
    assert caps.system_prompt and caps.override and caps.fork and caps.delete and caps.title
    # Baseline in v2: list, resume (with replayFrom) and close; never load (SP-V2-NOLOAD-DEF).
    assert caps.list and caps.resume and caps.close and caps.replay
    assert not caps.load and not caps.additional_directories


def test_v2_placement_is_not_read_in_v1_nor_v1_in_v2() -> None:
    v2_caps = {"session": {"systemPrompt": {}}}
    v1_caps = {"loadSession": True, "sessionCapabilities": {"systemPrompt": {}}}
    assert not Capabilities.from_initialize(
        {"protocolVersion": 1, "capabilities": v2_caps}).system_prompt
    assert not Capabilities.from_initialize(
        {"protocolVersion": 2, "agentCapabilities": v1_caps}).system_prompt
    # No session object in v2: no session methods at all.
    assert Capabilities.from_initialize({"protocolVersion": 2, "capabilities": {}}) \
        == Capabilities()
    # An append-only v2 agent.
    caps = Capabilities.from_initialize(
        {"protocolVersion": 2, "capabilities": {"session": {"systemPrompt": {"mode": None}}}})
    assert caps.system_prompt and not caps.override


def test_a_v2_load_is_described_as_the_resume_it_sends() -> None:
    step = {"op": "load", "session": "A"}
    assert describe(step) == "session/load A (systemPrompt omitted)"
    assert describe(step, 2) == "session/resume A (replayFrom start) (systemPrompt omitted)"
    assert describe({"op": "resume", "session": "A"}, 2) == \
        "session/resume A (systemPrompt omitted)"


# -- a load or resume sent while a turn of the session runs (``busy``) ------------------------

def test_a_busy_reattach_needs_the_session_open_and_is_described() -> None:
    from acp_fuzz.core.lifecycle import Lifecycle, allowed
    from acp_fuzz.core.steps import validate_step

    busy = {"op": "resume", "session": "A", "busy": True}
    assert allowed([{"op": "new", "session": "A"}, busy])
    # Closed, or unloaded by a restart: no turn can run on it, so neither can a busy resume.
    assert not allowed([{"op": "new", "session": "A"}, {"op": "close", "session": "A"}, busy])
    assert not allowed([{"op": "new", "session": "A"}, {"op": "restart"}, busy])
    life = Lifecycle()
    life.apply({"op": "new", "session": "A"})
    assert life.allows({"op": "load", "session": "A", "busy": True})
    assert describe(busy).endswith("while a turn of it runs")
    with pytest.raises(ValueError, match="'busy' must be true or false"):
        validate_step({**busy, "busy": "yes"})


def test_the_minimizer_drops_busy_unless_needed_and_the_shape_names_it() -> None:
    from acp_fuzz.core.findings import Finding
    from acp_fuzz.core.minimize import Failure, minimize, shape_of

    sp = {"mode": "append", "content": [{"type": "text", "text": "Be terse, always. [c]"}]}
    steps = [{"op": "new", "session": "A", "systemPrompt": sp},
             {"op": "resume", "session": "A", "systemPrompt": sp, "busy": True},
             {"op": "prompt", "session": "A"}]
    lost = [Finding("prompt.lost", "MUST", "R", "x", step=2)]

    def needs_busy(trial: list) -> tuple[list, list]:
        return [], lost if any(s.get("busy") for s in trial) else []

    def any_resume(trial: list) -> tuple[list, list]:
        return [], lost if any(s["op"] == "resume" for s in trial) else []

    kept = minimize(Failure(steps, [], lost), needs_busy).steps
    assert any(s.get("busy") for s in kept)
    assert shape_of(kept)[1][0] == "busy-resume"
    plain = minimize(Failure(steps, [], lost), any_resume).steps
    assert not any(s.get("busy") for s in plain)
    assert shape_of(plain) != shape_of(kept)


def test_show_prints_how_a_v2_turn_and_the_turn_beside_a_busy_resume_ended() -> None:
    from acp_fuzz.core.cassette import Cassette, Header
    from acp_fuzz.core.history import History
    from acp_fuzz.timeline import render_timeline

    h = History()
    h.append("verdict", {"step": -1, "what": "initialize", "outcome": "ok",
                         "protocol": {"offered": 2, "answered": 2}})
    h.append("step", {"index": 0, "name": "resume", "args": {
        "op": "resume", "session": "A", "busy": True}})
    h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "method": "session/update",
                                            "params": {"sessionId": "s", "update": {
                                                "sessionUpdate": "state_update",
                                                "state": "idle", "stopReason": "end_turn"}}}})
    h.append("verdict", {"step": 0, "what": "busy-turn", "outcome": "ok",
                         "stopReason": "end_turn"})
    h.append("verdict", {"step": 0, "what": "reply", "outcome": "error",
                         "error": {"code": -32602, "message": "busy"}})
    init = {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}
    shown = "\n".join(render_timeline(Cassette(Header(target=[], initialize=init),
                                               h.snapshot())))
    assert "protocol: ACP v2" in shown and "agent:    a 1" in shown
    assert "while a turn of it runs" in shown
    assert "session/update state_update idle (end_turn)" in shown
    assert "-> the turn beside it: ok (end_turn)" in shown
