"""What an agent advertises holds (issue #33 §3): ``capability.drift`` when a restarted
process advertises other capabilities than the run's first, ``capability.refused`` when an
advertised method answers -32601. Hand-built histories (see test_oracles.H)."""

from __future__ import annotations

from typing import Any

from test_oracles import H, ids, only

from acp_fuzz.core.builtin.capabilities import advertised, changed_paths
from acp_fuzz.core.oracles import Evaluator
from acp_fuzz.core.payloads import Capabilities

CAPS = {"loadSession": True, "sessionCapabilities": {"fork": {}, "list": {},
                                                     "systemPrompt": {"mode": {"override": {}}}}}


def initialize(h: H, rid: int, caps: dict[str, Any], **extra: Any) -> None:
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid,
                                              "method": "initialize", "params": {}}})
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": rid, "result": {
        "protocolVersion": 1, "agentCapabilities": caps, **extra}}})


def restarted(h: H, caps: dict[str, Any], **extra: Any) -> None:
    h.step("restart")
    initialize(h, 1, caps, **extra)


def test_a_restarted_process_that_advertises_less_is_a_should() -> None:
    h = H()
    initialize(h, 1, CAPS)
    h.new("A")
    restarted(h, {**CAPS, "sessionCapabilities": {"list": {}, "systemPrompt": {}}})
    f = only(h.findings(), "capability.drift")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD")
    assert f.evidence["changed"] == ["capabilities.sessionCapabilities.fork",
                                     "capabilities.sessionCapabilities.systemPrompt.mode"]
    assert f.step == 1


def test_the_same_capabilities_again_and_other_meta_or_info_are_fine() -> None:
    h = H()
    initialize(h, 1, CAPS, agentInfo={"name": "x", "version": "1"})
    restarted(h, {**CAPS, "_meta": {"startedAt": "now"}}, agentInfo={"version": "2"})
    restarted(h, dict(CAPS))
    assert "capability.drift" not in ids(h.findings())
    e = Evaluator()
    e.feed(h.h.snapshot())
    assert e.judged()[("capability.drift", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD")] == 2


def test_an_advertised_method_answered_method_not_found_is_a_should() -> None:
    caps = Capabilities(system_prompt=True, fork=True, list=True)
    h = H(caps)
    h.new("A")
    h.step("fork", "A", new="B", outcome="error")
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 5,
                                              "method": "session/fork", "params": {}}})
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 5, "error": {
        "code": -32601, "message": "Method not found"}}})
    f = only(h.findings(), "capability.refused")
    assert (f.severity, f.session, f.evidence["method"]) == ("SHOULD", "A", "session/fork")
    # Another error, or a method the agent did not advertise, is not this oracle's.
    for method, code in (("session/fork", -32602), ("session/load", -32601)):
        h2 = H(caps)
        h2.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 6,
                                                   "method": method, "params": {}}})
        h2.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 6, "error": {
            "code": code, "message": "no"}}})
        assert "capability.refused" not in ids(h2.findings()), (method, code)


def test_what_is_compared() -> None:
    v2 = {"protocolVersion": 2, "capabilities": {"session": {"fork": {}, "_meta": {"x": 1}}}}
    assert advertised(v2) == {"protocolVersion": 2, "capabilities": {"session": {"fork": {}}}}
    assert changed_paths({"a": {"b": 1}}, {"a": {"b": 1, "c": {}}}) == ["a.c"]
    # null and omitted say the same (unsupported): no change.
    assert changed_paths({"a": {"b": 1}}, {"a": {"b": 1, "c": None}}) == []
    assert changed_paths({"a": 1}, {"a": 1}) == []
    assert changed_paths(1, 2) == ["(the whole answer)"]
