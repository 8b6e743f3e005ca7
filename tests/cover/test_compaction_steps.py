"""The ``compact`` step (issue #22 §1): what it is on the wire, when the lifecycle allows it,
when the strategies draw it, and the replies the fake model forces a compaction with."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from test_strategies_breadth import _examples

from acp_fuzz.core.lifecycle import Lifecycle, allowed
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.replies import Pressure, build_reply, context_length_error
from acp_fuzz.core.steps import COMPACT_BY, KEYS, OPS, describe, validate_step
from acp_fuzz.strategies import cover_keys, covering_examples, step_keys

FULL = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True, delete=True)


# -- the step ------------------------------------------------------------------------------

def test_compact_is_an_op_with_a_session_and_a_way() -> None:
    assert "compact" in OPS and KEYS["compact"] == {"session", "by"}
    assert COMPACT_BY == ("command", "usage", "overflow")
    for by in COMPACT_BY:
        step = {"op": "compact", "session": "A", "by": by}
        assert validate_step(dict(step)) == step
        assert validate_step(json.loads(json.dumps(step))) == step  # as a cassette has it


@pytest.mark.parametrize("step, match", [
    ({"op": "compact", "session": "A"}, "'by' must be one of command, usage, overflow"),
    ({"op": "compact", "session": "A", "by": "auto"}, "'by' must be one of"),
    ({"op": "compact", "session": "A", "by": 1}, "'by' must be one of"),
    ({"op": "compact", "session": "A", "by": "usage", "systemPrompt": None}, "systemPrompt"),
    ({"op": "compact", "session": "A", "by": "usage", "turn": 2}, "turn"),
])
def test_a_bad_compact_step_is_refused(step: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        validate_step(step)


def test_a_compact_step_says_how_it_compacts() -> None:
    for by in COMPACT_BY:
        text = describe({"op": "compact", "session": "B", "by": by})
        assert text.startswith("compact B (") and "\n" not in text
    assert "command" in describe({"op": "compact", "session": "A", "by": "command"})
    assert "limit" in describe({"op": "compact", "session": "A", "by": "usage"})
    assert "context-length error" in describe({"op": "compact", "session": "A",
                                               "by": "overflow"})


# -- the lifecycle -------------------------------------------------------------------------

NEW = {"op": "new", "session": "A"}
PROMPT = {"op": "prompt", "session": "A"}


def _compact(by: str = "usage", h: str = "A") -> dict[str, Any]:
    return {"op": "compact", "session": h, "by": by}


def test_a_compaction_needs_an_open_session_with_a_completed_turn() -> None:
    assert not allowed([_compact()])
    assert not allowed([NEW, _compact()])  # nothing to compact yet
    for by in COMPACT_BY:
        assert allowed([NEW, PROMPT, _compact(by), PROMPT])
    assert not allowed([NEW, PROMPT, {"op": "close", "session": "A"}, _compact()])
    assert not allowed([NEW, PROMPT, {"op": "restart"}, _compact()])  # not open here
    assert allowed([NEW, PROMPT, {"op": "restart"}, {"op": "load", "session": "A"},
                    _compact()])


def test_a_compaction_by_usage_is_a_turn_and_by_command_leaves_only_its_summary() -> None:
    # By usage or overflow a turn of ours runs: the conversation holds it, another may follow.
    assert allowed([NEW, PROMPT, _compact("usage"), _compact("overflow"), _compact("usage")])
    # By command the conversation is a summary of no turn of ours: a prompt comes first.
    assert not allowed([NEW, PROMPT, _compact("command"), _compact("command")])
    assert allowed([NEW, PROMPT, _compact("command"), PROMPT, _compact("command")])


def test_a_fork_takes_its_sources_conversation() -> None:
    fork = {"op": "fork", "session": "A", "new": "B"}
    assert allowed([NEW, PROMPT, fork, _compact(h="B")])
    assert not allowed([NEW, fork, _compact(h="B")])
    life = Lifecycle()
    for s in (NEW, PROMPT, fork):
        life.apply(s)
    assert life.talked("A") and life.talked("B") and not life.talked("C")


# -- the strategies ------------------------------------------------------------------------

def test_compactions_are_drawn_only_for_an_agent_that_can_be_made_to_compact() -> None:
    plain = [s for ex in _examples(FULL) for s in ex]
    assert plain and not any(s["op"] == "compact" for s in plain)
    assert FULL.compactions() == ()


@pytest.mark.parametrize("kinds", [("command",), ("usage", "overflow"),
                                   ("command", "usage", "overflow")])
def test_the_drawn_compactions_are_the_agents_each_after_a_turn_and_before_one(
        kinds: tuple[str, ...]) -> None:
    caps = replace(FULL, compact_command="command" in kinds, compact_usage="usage" in kinds,
                   compact_overflow="overflow" in kinds)
    assert caps.compactions() == kinds
    by: set[str] = set()
    for ex in _examples(caps):
        assert allowed(ex), ex
        for i, s in enumerate(ex):
            validate_step(dict(s))
            if s["op"] != "compact":
                continue
            by.add(s["by"])
            assert ex[i + 1] == {"op": "prompt", "session": s["session"]}, ex[i:i + 2]
    assert by == set(kinds)


#: What may follow a compaction in a pair example of the covering examples.
PAIR_SECOND = {"close", "cancel", "load", "resume", "fork", "delete", "restart", "list",
               "compact"}


def test_the_covering_examples_compact_each_way_once_and_after_a_changed_prompt() -> None:
    caps = replace(FULL, compact_command=True, compact_usage=True, compact_overflow=True)
    keys = cover_keys(caps)
    assert {"compact:command", "compact:usage", "compact:overflow",
            "compact:after-change"} <= set(keys)
    examples = covering_examples(caps, max_steps=12)
    compacts = [(ex, i) for ex in examples for i, s in enumerate(ex.steps)
                if s["op"] == "compact"]
    assert {ex.steps[i]["by"] for ex, i in compacts} == set(COMPACT_BY)
    for ex, i in compacts:
        steps = [validate_step(dict(s)) for s in ex.steps]
        assert allowed(steps), steps
        h = steps[i]["session"]
        assert steps[i - 1]["session"] == h or steps[i - 1].get("new") == h
        if steps[i + 1]["op"] in PAIR_SECOND:
            continue  # a pair of ops (issue #36): compact, then close, cancel, ...
        assert steps[i + 1] == {"op": "prompt", "session": h}
    # The rebuild after a change on a live reattach: two turns after it, where it must show.
    after = [(ex, i) for ex, i in compacts
             if "compact:after-change" in step_keys(ex.steps[i], caps, ex.steps[:i])]
    assert after
    for ex, i in after:
        h = ex.steps[i]["session"]
        assert ex.steps[i - 1]["op"] in ("load", "resume") and "systemPrompt" in ex.steps[i - 1]
        assert list(ex.steps[i + 1:i + 3]) == [{"op": "prompt", "session": h}] * 2


def test_no_compact_key_for_an_agent_that_cannot_be_made_to_compact() -> None:
    assert not any(k.startswith("compact:") or k == "op:compact" for k in cover_keys(FULL))
    assert not any(s["op"] == "compact" for ex in covering_examples(FULL) for s in ex.steps)


def test_without_a_prompt_to_change_a_compaction_is_still_covered_but_not_after_a_change(
        ) -> None:
    caps = Capabilities(system_prompt=True, compact_usage=True)  # no load or resume
    keys = cover_keys(caps)
    assert "compact:usage" in keys and "compact:after-change" not in keys


# -- the replies that force a compaction ----------------------------------------------------

def _body(reply: Any) -> Any:
    return json.loads(reply.body)


def _events(reply: Any) -> list[Any]:
    out = []
    for line in reply.body.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            out.append(json.loads(line[5:]))
    return out


USAGE = Pressure("usage", 190_000, 200_000)
OVER = Pressure("overflow", 200_001, 200_000)


def _reply(api: str, path: str, body: dict[str, Any], pressure: Pressure | None) -> Any:
    raw = json.dumps(body).encode()
    return build_reply(api, "POST", path, body, raw, "ok", pressure)


def test_usage_pressure_reports_the_tokens_in_every_usage_field_of_chat() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    u = _body(_reply("openai.chat", "/v1/chat/completions", body, USAGE))["usage"]
    assert u["prompt_tokens"] == 190_000 and u["total_tokens"] == 190_001
    assert _body(_reply("openai.chat", "/v1/chat/completions", body, None))["usage"][
        "prompt_tokens"] == 10
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    last = _events(_reply("openai.chat", "/v1/chat/completions", streamed, USAGE))[-1]
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == 190_000


def test_usage_pressure_in_responses_anthropic_and_gemini() -> None:
    body = {"model": "m", "input": "hi"}
    assert _body(_reply("openai.responses", "/v1/responses", body, USAGE))["usage"][
        "input_tokens"] == 190_000
    done = [e for e in _events(_reply("openai.responses", "/v1/responses",
                                      {**body, "stream": True}, USAGE))
            if e.get("type") == "response.completed"]
    assert done and done[0]["response"]["usage"]["input_tokens"] == 190_000
    assert done[0]["response"]["usage"]["total_tokens"] == 190_001
    msg = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert _body(_reply("anthropic.messages", "/v1/messages", msg, USAGE))["usage"][
        "input_tokens"] == 190_000
    ev = _events(_reply("anthropic.messages", "/v1/messages", {**msg, "stream": True}, USAGE))
    start = next(e for e in ev if e["type"] == "message_start")
    delta = next(e for e in ev if e["type"] == "message_delta")
    assert start["message"]["usage"]["input_tokens"] == delta["usage"]["input_tokens"] == 190_000
    g = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    assert _body(_reply("gemini", "/v1beta/models/g:generateContent", g, USAGE))[
        "usageMetadata"]["promptTokenCount"] == 190_000


def test_overflow_is_each_apis_context_length_error() -> None:
    chat = _reply("openai.chat", "/v1/chat/completions",
                  {"model": "m", "messages": [], "stream": True}, OVER)
    assert chat.status == 400 and chat.content_type.startswith("application/json")
    err = _body(chat)["error"]
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"
    assert err["param"] == "messages"
    assert err["message"].startswith("This model's maximum context length is 200000 tokens")
    assert "200001" in err["message"]
    resp = _body(_reply("openai.responses", "/v1/responses", {"model": "m"}, OVER))["error"]
    assert resp["code"] == "context_length_exceeded"
    ant = _reply("anthropic.messages", "/v1/messages", {"model": "m"}, OVER)
    assert ant.status == 400
    assert _body(ant)["type"] == "error"
    assert _body(ant)["error"] == {"type": "invalid_request_error",
                                   "message": "prompt is too long: 200001 tokens > 200000 "
                                              "maximum"}
    gem = _reply("gemini", "/v1beta/models/g:streamGenerateContent", {}, OVER)
    assert gem.status == 400
    assert _body(gem) == {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                    "The input token count (200001) exceeds the maximum "
                                    "number of tokens allowed (200000)."}}
    assert context_length_error("openai.chat", 5, 4).status == 400


def test_pressure_leaves_the_endpoints_that_generate_nothing_alone() -> None:
    assert build_reply("models", "GET", "/v1/models", None, b"", "ok", OVER).status == 200
    count = build_reply("anthropic.count_tokens", "POST", "/v1/messages/count_tokens", {}, b"{}",
                        "ok", OVER)
    assert count.status == 200


def test_the_gateway_arms_pressure_for_one_request_of_its_session() -> None:
    from acp_fuzz.core.history import History
    from acp_fuzz.engine.gateway import Gateway

    gw = Gateway(History(), token="t")  # not started: what is armed is read back directly
    gw.press("A", "overflow", tokens=5000, window=4999)
    assert gw._take_pressure("openai.chat", "/v1/chat/completions", ("B", 1), False) is None
    assert gw._take_pressure("openai.chat", "/v1/chat/completions", ("A", 1), True) is None
    assert gw._take_pressure("openai.chat", "/v1/chat/completions", ("A", 1), False) == \
        Pressure("overflow", 5000, 4999)
    assert gw._take_pressure("openai.chat", "/v1/chat/completions", ("A", 1), False) is None
    assert gw.release("A") is True and gw.release("A") is False
    with pytest.raises(ValueError, match="usage or overflow"):
        gw.press("A", "command", tokens=1, window=1)
