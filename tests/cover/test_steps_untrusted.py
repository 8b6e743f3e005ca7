"""A cassette's steps are never sent as written (issue #25 §1), pure.

``validate_step`` accepts only what the strategies draw, and ``lifecycle_request`` builds
every request from it: these tests pin both, and what ``show --full`` and ``report`` print.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_fuzz.core.steps import (
    INVALID_METHODS,
    KEYS,
    invalid_params,
    lifecycle_request,
    preview,
    validate_step,
    will_send,
)

SP = {"mode": "append", "content": [{"type": "text", "text": "Be brief."}]}
SERVER = {"name": "x", "command": "sh", "args": ["-c", "id"], "env": []}


@pytest.mark.parametrize("step", [
    {"op": "invalid", "method": "session/new", "params": {"cwd": "/", "mcpServers": [SERVER]}},
    {"op": "invalid", "method": "session/load", "params": {"mcpServers": [SERVER]}},
    {"op": "invalid", "method": "_vendor/exec"},
    {"op": "invalid", "method": 7},
    {"op": "new", "session": "A", "systemPrompt": SP,
     "_meta": {"claudeCode": {"options": {"mcpServers": {"x": SERVER}}}}},
    {"op": "new", "session": "A", "systemPrompt": SP,
     "_meta": {"claudeCode": {"options": {"systemPrompt": "x", "env": {"A": "1"}}}}},
    {"op": "new", "session": "A", "_meta": {"systemPrompt": {"append": "x", "x": 1}}},
    {"op": "new", "session": "A", "_meta": {"systemPrompt": 3}},
    {"op": "prompt", "session": "A", "_meta": {"systemPrompt": "x"}},
    {"op": "new", "session": "A", "extra": {"mcpServers": [SERVER]}},
    {"op": "new", "session": "A", "extra": {"additionalDirectories": ["/root", "/"]}},
    {"op": "new", "session": "A", "extra": {"systemPromptMode": "override"}},
    {"op": "new", "session": "A", "extra": {"sessionInstructions": 3}},
    {"op": "new", "session": "A", "systemPrompt": {**SP, "_meta": {"claudeCode": {}}}},
    {"op": "new", "session": "A", "systemPrompt": {"content": [{"_meta": {"text": 1}}]}},
    {"op": "new", "session": "A", "systemPrompt": {"x": float("inf")}},
    {"op": "new", "session": "A", "systemPrompt": b"bytes"},
    {"op": "new", "session": "A", "systemPrompt": {1: "x"}},
    {"op": "new", "session": "A", "systemPrompt": [[[[[[[[[["deep"]]]]]]]]]]},
    {"op": "new", "session": "../../etc"},
    {"op": "new", "session": "AB"},
    {"op": "fork", "session": "A", "new": "/tmp"},
    {"op": "new", "session": "A", "cwd": "/etc"},
    {"op": "new", "session": "A", "mcpServers": [SERVER]},
    {"op": "prompt", "session": "A", "params": {}},
    {"op": "set_mode", "session": "A", "pick": 10 ** 9},
    {"op": "set_title", "session": "A", "title": "x" * 5000},
    {"op": "invalid", "method": "session/prompt", "why": ["x"]},
    {"op": "compact", "session": "A"},
    {"op": "compact", "session": "A", "by": "summary"},
    {"op": "compact", "session": "A", "by": "command", "text": "/exec rm -rf"},
    {"op": "compact", "by": "usage"},
])
def test_anything_the_strategies_cannot_draw_is_refused_with_one_line(
        step: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as e:
        validate_step(step)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("step", [
    {"op": "new", "session": "A", "cwd": "shared", "systemPrompt": SP,
     "_meta": {"systemPrompt": "Vendor carrier text"}},
    {"op": "load", "session": "A", "systemPrompt": SP,
     "_meta": {"systemPrompt": {"append": "x"}}, "busy": True},
    {"op": "fork", "session": "A", "new": "B", "systemPrompt": SP, "roots": 2,
     "_meta": {"claudeCode": {"options": {"systemPrompt": "x"}}}},
    {"op": "resume", "session": "A", "systemPrompt": "draft", "cwd": "moved",
     "extra": {"systemPromptMode": "append", "sessionInstructions": "Old draft"}},
    {"op": "new", "session": "A", "systemPrompt": {
        **SP, "_meta": {"systemPrompt": "d", "acpfuzz.dev/note": "d"},
        "content": [{"type": "text", "text": "x", "_meta": {"text": "d"},
                     "annotations": {"priority": 0.5}}]}},
    {"op": "invalid", "method": "session/resume", "params": invalid_params("session/resume"),
     "why": "unknown session id"},
    {"op": "compact", "session": "A", "by": "command"},
    {"op": "compact", "session": "B", "by": "usage"},
    {"op": "compact", "session": "C", "by": "overflow"},
])
def test_what_the_strategies_draw_passes_unchanged(step: dict[str, Any]) -> None:
    assert validate_step(step) == step


def test_every_op_lists_its_keys() -> None:
    for op, keys in KEYS.items():
        assert "op" not in keys, op


@pytest.mark.parametrize("method", INVALID_METHODS)
def test_an_invalid_step_sends_the_params_acp_fuzz_builds(method: str) -> None:
    step = validate_step({"op": "invalid", "method": method})
    assert lifecycle_request(step) == (method, invalid_params(method))
    assert lifecycle_request(step)[1]["sessionId"] == "acp-fuzz-no-such-session"


def test_requests_never_carry_servers_and_v2_loads_replay_from_the_start() -> None:
    step = validate_step({"op": "load", "session": "A", "systemPrompt": SP, "roots": 1})
    method, params = lifecycle_request(step, protocol=2, session_id="s1", cwd="/w",
                                       roots=["/r"])
    assert method == "session/resume"
    assert params == {"sessionId": "s1", "cwd": "/w", "mcpServers": [],
                      "additionalDirectories": ["/r"], "replayFrom": {"type": "start"},
                      "systemPrompt": SP}
    assert lifecycle_request(step, protocol=1, session_id="s1", cwd="/w")[0] == "session/load"
    # A legacy dialect carries the prompt in its own _meta, and no old-draft field.
    new = validate_step({"op": "new", "session": "A", "systemPrompt": SP,
                         "extra": {"systemPromptMode": "append"}})
    assert lifecycle_request(new, dialect="claude-meta", cwd="/w")[1] == {
        "cwd": "/w", "mcpServers": [], "_meta": {"systemPrompt": {"append": "Be brief."}}}


def test_show_and_report_say_what_a_step_sends_or_why_it_is_refused() -> None:
    line = will_send({"op": "fork", "session": "A", "new": "B", "cwd": "moved", "roots": 1})
    assert line == ('sends session/fork {"sessionId": "<id of A>", "cwd": "<new cwd of B>", '
                    '"mcpServers": [], "additionalDirectories": ["<root 1>"]}')
    assert will_send({"op": "prompt", "session": "A"}) is None
    assert preview({"op": "close", "session": "A"}) is None
    refused = will_send({"op": "invalid", "method": "session/new", "params": {}})
    assert refused is not None and refused.startswith("refused on replay: step 'invalid'")
    assert will_send({"op": "new", "session": "A"}, dialect="no-such") == \
        'sends session/new {"cwd": "<cwd of A>", "mcpServers": []}'


@settings(max_examples=300, database=None, deadline=None)
@given(st.dictionaries(st.sampled_from(["op", "session", "new", "method", "params", "why",
                                        "systemPrompt", "_meta", "extra", "cwd", "roots",
                                        "busy", "pick", "option", "title", "x"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                                    | st.sampled_from(["new", "load", "A", "session/load"]),
                                    lambda c: st.lists(c, max_size=3)
                                    | st.dictionaries(st.text(max_size=5), c, max_size=3),
                                    max_leaves=8)))
def test_any_map_is_refused_with_a_value_error_or_builds_a_request(step: dict[str, Any]) -> None:
    """Nothing a cassette holds makes the validator or the request builder crash otherwise."""
    try:
        valid = validate_step(step)
    except ValueError:
        return
    if valid["op"] in ("new", "load", "resume", "fork", "invalid"):
        method, params = lifecycle_request(valid, session_id="s", cwd="/w")
        assert params.get("mcpServers", []) == []
        assert method in ("session/new", "session/load", "session/resume", "session/fork",
                          *INVALID_METHODS)
