"""Pure tests of the gateway's request splitting, API detection and reply payloads."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from acp_fuzz.core.replies import (
    build_reply,
    extract_reply_text,
    minimal_value,
    structured_schema,
)
from acp_fuzz.core.slots import user_turn_is_tool_result
from acp_fuzz.engine.gateway import detect_api, split_request
from acp_fuzz.engine.gateway.redact import REDACTED, redact_headers, redact_path
from acp_fuzz.engine.gateway.server import is_side_request


def slots(api: str, body: Any) -> list[tuple[str, str, str]]:
    return [(s.slot, s.path, s.text) for s in split_request(api, body)]


# -- detect_api --------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "api"), [
    ("POST", "/v1/chat/completions", "openai.chat"),
    ("POST", "/openai/v1/chat/completions?x=1", "openai.chat"),
    ("POST", "/v1/responses", "openai.responses"),
    ("POST", "/v1/messages?beta=true", "anthropic.messages"),
    ("POST", "/v1/messages/count_tokens?beta=true", "anthropic.count_tokens"),
    ("POST", "/v1beta/models/gemini-x:generateContent", "gemini"),
    ("POST", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", "gemini"),
    ("POST", "/v1beta/models/gemini-x:countTokens", "gemini"),
    ("GET", "/v1/models", "models"),
    ("GET", "/v1beta/models", "models"),
    ("GET", "/v1/chat/completions", "unknown"),
    ("POST", "/v1/models", "unknown"),
    ("HEAD", "/", "unknown"),
    ("POST", "/v1/embeddings", "unknown"),
    ("POST", "/v1beta/models/gemini-x:embedContent", "unknown"),
])
def test_detect_api(method: str, path: str, api: str) -> None:
    assert detect_api(method, path) == api


# -- split_request -----------------------------------------------------------------------------


def test_anthropic_system_blocks_system_message_and_last_user() -> None:
    body = {
        "model": "claude",
        "system": [{"type": "text", "text": "billing"},
                   {"type": "text", "text": "SYS", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "system", "content": "# Environment"},
            {"role": "assistant", "content": [{"type": "text", "text": "answer"},
                                              {"type": "tool_use", "id": "t1", "name": "Bash",
                                               "input": {"command": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": [{"type": "text", "text": "file.txt"}]},
                {"type": "text", "text": "newest"}]},
        ],
        "tools": [{"name": "Bash", "description": "Run a command",
                   "input_schema": {"type": "object"}}],
    }
    assert slots("anthropic.messages", body) == [
        ("system", "system[0].text", "billing"),
        ("system", "system[1].text", "SYS"),
        ("history", "messages[0].content[0].text", "first"),
        ("system", "messages[1].content", "# Environment"),
        ("history", "messages[2].content[0].text", "answer"),
        ("history", "messages[2].content[1].input.command", "ls"),
        ("user", "messages[3].content[0].content[0].text", "file.txt"),
        ("user", "messages[3].content[1].text", "newest"),
        ("other", "tools[0].description", "Run a command"),
    ]


def test_anthropic_system_as_string() -> None:
    body = {"system": "SYS", "messages": [{"role": "user", "content": "hi"}]}
    assert slots("anthropic.messages", body) == [
        ("system", "system", "SYS"), ("user", "messages[0].content", "hi")]
    assert slots("anthropic.count_tokens", body) == slots("anthropic.messages", body)


def test_openai_chat_roles_and_part_types() -> None:
    body = {"messages": [
        {"role": "system", "content": "S1"},
        {"role": "developer", "content": [{"type": "text", "text": "S2"}]},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "result"},
        {"role": "user", "content": [{"type": "input_text", "text": "new"},
                                     {"type": "image_url", "image_url": {"url": "data:x"}}]},
    ]}
    assert slots("openai.chat", body) == [
        ("system", "messages[0].content", "S1"),
        ("system", "messages[1].content[0].text", "S2"),
        ("history", "messages[2].content", "old"),
        ("history", "messages[3].tool_calls[0].function.arguments", "{}"),
        ("history", "messages[4].content", "result"),
        ("user", "messages[5].content[0].text", "new"),
    ]


def test_openai_responses_items() -> None:
    body = {
        "instructions": "INS",
        "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "DEV"}]},
            {"type": "message", "role": "system", "content": ""},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "env"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "prev"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}],
             "encrypted_content": "zzz"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c", "output": "out"},
            {"role": "user", "content": [{"type": "input_text", "text": "now"}]},
        ],
        "prompt_cache_key": "abc",
    }
    assert slots("openai.responses", body) == [
        ("system", "instructions", "INS"),
        ("system", "input[0].content[0].text", "DEV"),
        ("system", "input[1].content", ""),
        ("history", "input[2].content[0].text", "env"),
        ("history", "input[3].content[0].text", "prev"),
        ("history", "input[4].summary[0].text", "think"),
        ("history", "input[5].arguments", "{\"a\":1}"),
        ("history", "input[6].output", "out"),
        ("user", "input[7].content[0].text", "now"),
        ("other", "prompt_cache_key", "abc"),
    ]


def test_item_level_extras_are_other() -> None:
    # codex's title request: tools ride on a developer item; claude puts config on a message.
    body = {"input": [
        {"type": "additional_tools", "role": "developer",
         "tools": [{"type": "function", "name": "f", "description": "Tool doc"}]},
        {"role": "user", "content": "p"}]}
    assert slots("openai.responses", body) == [
        ("other", "input[0].tools[0].description", "Tool doc"), ("user", "input[1].content", "p")]
    claude = {"messages": [{"role": "system", "content": "env",
                            "output_config": {"effort": "medium"}},
                           {"role": "user", "content": "p"}]}
    assert slots("anthropic.messages", claude) == [
        ("system", "messages[0].content", "env"),
        ("other", "messages[0].output_config.effort", "medium"),
        ("user", "messages[1].content", "p")]


def test_openai_responses_string_input() -> None:
    assert slots("openai.responses", {"input": "hello"}) == [("user", "input", "hello")]


def test_gemini_system_instruction_both_spellings() -> None:
    body = {
        "systemInstruction": {"role": "user", "parts": [{"text": "SYS"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "ctx"}]},
            {"role": "model", "parts": [{"text": "reply"}, {"functionCall": {
                "name": "ls", "args": {"path": "/tmp"}}}]},
            {"role": "user", "parts": [{"text": "now"},
                                       {"inlineData": {"mimeType": "image/png", "data": "AA"}}]},
        ],
    }
    assert slots("gemini", body) == [
        ("system", "systemInstruction.parts[0].text", "SYS"),
        ("history", "contents[0].parts[0].text", "ctx"),
        ("history", "contents[1].parts[0].text", "reply"),
        ("history", "contents[1].parts[1].functionCall.args.path", "/tmp"),
        ("user", "contents[2].parts[0].text", "now"),
    ]
    snake = {"system_instruction": {"parts": [{"text": "S"}]}, "contents": []}
    assert slots("gemini", snake) == [("system", "system_instruction.parts[0].text", "S")]


@pytest.mark.parametrize(("api", "body"), [
    ("anthropic.messages", {"system": 5, "messages": "nope"}),
    ("anthropic.messages", {"system": [1, None, {"text": 3}], "messages": [None, 1, []]}),
    ("openai.chat", {"messages": {"role": "user"}}),
    ("openai.chat", {"messages": [{"role": "user", "content": 7}]}),
    ("openai.responses", {"instructions": None, "input": 3}),
    ("gemini", {"systemInstruction": 3, "contents": [{"parts": 5}, "x"]}),
    ("gemini", []),
    ("unknown", "text body"),
])
def test_odd_shapes_give_no_conversation_segments(api: str, body: Any) -> None:
    assert [s for s in split_request(api, body) if s.slot != "other"] == []


def test_weird_keys_get_quoted_locators() -> None:
    body = {"messages": [], "meta data": {"a-b": "x"}}
    assert slots("openai.chat", body) == [("other", '["meta data"]["a-b"]', "x")]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["role", "content", "text", "system", "messages",
                                       "input", "instructions", "parts", "contents",
                                       "systemInstruction", "type", "x"]) | st.text(),
                      children, max_size=5),
    max_leaves=30,
)
_apis = st.sampled_from(["openai.chat", "openai.responses", "anthropic.messages",
                         "anthropic.count_tokens", "gemini", "models", "unknown"])


@settings(max_examples=300, deadline=None)
@given(api=_apis, body=_json)
def test_split_request_never_raises_and_keeps_only_strings(api: str, body: Any) -> None:
    segments = split_request(api, body)
    for seg in segments:
        assert seg.slot in ("system", "user", "history", "other")
        assert isinstance(seg.text, str)
        assert isinstance(seg.path, str) and seg.path
    # The helpers the gateway runs on every request are total too.
    user_turn_is_tool_result(api, body)
    structured_schema(api, body)
    is_side_request(api, {}, body)


_schema_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["type", "properties", "required", "items", "minItems",
                                       "$ref", "anyOf", "allOf", "enum", "minimum",
                                       "exclusiveMaximum", "minLength", "prefixItems"]),
                      children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(api=_apis, body=_json, schema=_schema_json, stream=st.booleans())
# Found on a fresh machine: an allOf branch whose $ref is not a string, or points at one.
@example(api="openai.chat", body={}, schema={"allOf": [{"$ref": None}]}, stream=False)
@example(api="openai.chat", body={}, schema={"allOf": [{"$ref": "#/x"}], "x": 1}, stream=False)
def test_build_reply_never_raises(api: str, body: Any, schema: Any, stream: bool) -> None:
    minimal_value(schema)
    structured = {"model": "m", "stream": stream, "body": body,
                  "output_config": {"format": {"type": "json_schema", "schema": schema}},
                  "text": {"format": {"type": "json_schema", "schema": schema}}}
    for payload in (body, structured):
        reply = build_reply(api, "POST", "/v1beta/models/g:streamGenerateContent?alt=sse",
                            payload, b"raw")
        assert reply.status in (200, 404)
        assert isinstance(reply.body, bytes) and reply.body


def test_minimal_value_is_bounded_on_hostile_schemas() -> None:
    recursive = {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}},
                 "required": ["a", "b"]}
    value = minimal_value(recursive)
    assert isinstance(value, dict) and set(value) == {"a", "b"}
    assert len(minimal_value({"type": "array", "items": {}, "minItems": 10**9})) == 1000
    assert minimal_value({"type": "integer", "minimum": float("inf")}) == 1


# -- tool-result turns -------------------------------------------------------------------------


def test_user_turn_is_tool_result() -> None:
    tool = {"messages": [{"role": "user", "content": "p"}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}
    prose = {"messages": [{"role": "user", "content": "p"}]}
    assert user_turn_is_tool_result("anthropic.messages", tool)
    assert not user_turn_is_tool_result("anthropic.messages", prose)
    gem = {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}]}
    assert user_turn_is_tool_result("gemini", gem)
    assert not user_turn_is_tool_result("openai.chat", tool)


# -- structured output -------------------------------------------------------------------------


SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"],
     "additionalProperties": False},
    {"type": "object", "properties": {
        "complexity_reasoning": {"type": "string"},
        "complexity_score": {"type": "integer", "minimum": 1, "maximum": 100}},
     "required": ["complexity_reasoning", "complexity_score"]},
    {"type": "object", "required": ["kind", "n", "x", "flag", "tags", "none", "pair"],
     "properties": {
         "kind": {"enum": ["b", "a"]},
         "n": {"type": "integer", "exclusiveMinimum": 4},
         "x": {"type": "number", "maximum": -3},
         "flag": {"type": "boolean"},
         "tags": {"type": "array", "items": {"type": "string", "minLength": 5}, "minItems": 2},
         "none": {"type": "null"},
         "pair": {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer"}]}}},
    {"$defs": {"T": {"type": "object", "properties": {"v": {"const": 3}}, "required": ["v"]}},
     "type": "object", "properties": {"t": {"$ref": "#/$defs/T"}}, "required": ["t"]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
               {"properties": {"b": {"type": ["null", "integer"]}}, "required": ["b"]}]},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "integer"},
     "minItems": 2},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_minimal_value_is_schema_valid(schema: dict[str, Any]) -> None:
    jsonschema.validate(minimal_value(schema), schema)


def test_minimal_value_specific_choices() -> None:
    assert minimal_value(SCHEMAS[0]) == {"title": "ok"}
    assert minimal_value(SCHEMAS[1]) == {"complexity_reasoning": "ok", "complexity_score": 1}
    value = minimal_value(SCHEMAS[2])
    assert value["kind"] == "b" and value["n"] == 5 and value["flag"] is False
    assert value["tags"] == ["okoko", "okoko"]
    # Gemini's OpenAPI-style schemas use upper-case types.
    assert minimal_value({"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}},
                          "required": ["n"]}) == {"n": 1}


def test_structured_schema_signals() -> None:
    schema = {"type": "object"}
    assert structured_schema("anthropic.messages", {"output_config": {
        "format": {"type": "json_schema", "schema": schema}}}) == schema
    assert structured_schema("openai.responses", {"text": {
        "format": {"type": "json_schema", "name": "x", "schema": schema}}}) == schema
    assert structured_schema("openai.chat", {"response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}) == schema
    assert structured_schema("gemini", {"generationConfig": {
        "responseMimeType": "application/json", "responseJsonSchema": schema}}) == schema
    assert structured_schema("gemini", {"generationConfig": {
        "responseMimeType": "application/json", "responseSchema": {"type": "STRING"}}}) == {
        "type": "STRING"}
    assert structured_schema("openai.responses", {"text": {"format": {"type": "text"}}}) is None
    assert structured_schema("anthropic.messages", {"output_config": {"effort": "high"}}) is None
    assert structured_schema("gemini", {"generationConfig": {"temperature": 0}}) is None


def test_side_request_builtin() -> None:
    suggestion = {"messages": [{"role": "user", "content": "x"},
                               {"role": "user", "content": "[SUGGESTION MODE: next]"}]}
    assert is_side_request("anthropic.messages", {}, suggestion)
    assert not is_side_request("anthropic.messages", {}, {"messages": [
        {"role": "user", "content": "please [SUGGESTION MODE: x]"}]})
    assert is_side_request("openai.chat", {}, {"response_format": {"type": "json_object"}})
    # qwen-code's prompt suggestion: a Chat Completions copy of the turn, one text part last.
    assert is_side_request("openai.chat", {}, {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "[SUGGESTION MODE: next]"}]}]})
    assert not is_side_request("gemini", {}, suggestion)


# -- reply payloads ----------------------------------------------------------------------------


def _sse_data(body: bytes) -> list[Any]:
    return [json.loads(line[5:]) if line[5:].strip() != "[DONE]" else "[DONE]"
            for line in body.decode().splitlines() if line.startswith("data:")]


def test_responses_stream_sequence_and_text() -> None:
    reply = build_reply("openai.responses", "POST", "/v1/responses",
                        {"model": "m", "stream": True}, b"{}", "hello")
    events = _sse_data(reply.body)
    assert [e["sequence_number"] for e in events] == list(range(9))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hello"
    assert reply.content_type == "text/event-stream"
    assert extract_reply_text("openai.responses", reply.content_type, reply.body) == "hello"


def test_chat_stream_usage_chunk_only_when_asked() -> None:
    with_usage = build_reply("openai.chat", "POST", "/v1/chat/completions",
                             {"stream": True, "stream_options": {"include_usage": True}}, b"a")
    without = build_reply("openai.chat", "POST", "/v1/chat/completions", {"stream": True}, b"a")
    assert _sse_data(with_usage.body)[-1] == "[DONE]"
    assert _sse_data(with_usage.body)[-2]["usage"]["total_tokens"] == 11
    assert all("usage" not in e for e in _sse_data(without.body) if e != "[DONE]")


def test_gemini_reply_forms() -> None:
    path = "/v1beta/models/g:streamGenerateContent"
    sse = build_reply("gemini", "POST", path + "?alt=sse", {}, b"")
    array = build_reply("gemini", "POST", path, {}, b"")
    single = build_reply("gemini", "POST", "/v1beta/models/g:generateContent", {}, b"")
    count = build_reply("gemini", "POST", "/v1beta/models/g:countTokens", {}, b"")
    assert sse.body.endswith(b"\r\n\r\n") and sse.body.startswith(b"data: ")
    assert json.loads(array.body)[0]["modelVersion"] == "g"
    assert json.loads(single.body)["candidates"][0]["content"]["parts"][0]["text"] == "ok"
    assert json.loads(count.body) == {"totalTokens": 10}
    assert extract_reply_text("gemini", sse.content_type, sse.body) == "ok"


def test_non_generating_endpoints() -> None:
    assert json.loads(build_reply("anthropic.count_tokens", "POST", "/v1/messages/count_tokens",
                                  {}, b"").body) == {"input_tokens": 10}
    missing = build_reply("unknown", "POST", "/nope", {}, b"")
    assert missing.status == 404
    assert json.loads(missing.body)["error"]["type"] == "not_found"
    assert json.loads(build_reply("models", "GET", "/v1/models", None, b"").body)["data"]
    assert json.loads(build_reply("models", "GET", "/v1beta/models", None, b"").body)["models"]


def test_reply_ids_follow_the_request() -> None:
    a1 = build_reply("anthropic.messages", "POST", "/v1/messages", {"x": 1}, b'{"x":1}')
    a2 = build_reply("anthropic.messages", "POST", "/v1/messages", {"x": 1}, b'{"x":1}')
    b = build_reply("anthropic.messages", "POST", "/v1/messages", {"x": 2}, b'{"x":2}')
    assert a1 == a2
    assert json.loads(a1.body)["id"] != json.loads(b.body)["id"]


# -- redaction ---------------------------------------------------------------------------------


def test_redact_headers_and_path() -> None:
    headers = redact_headers([("Authorization", "Bearer s"), ("X-Goog-Api-Key", "g"),
                              ("X-Session-Token", "t"), ("Content-Type", "a/b"),
                              ("X-Dup", "1"), ("x-dup", "2")])
    assert headers == {"authorization": REDACTED, "x-goog-api-key": REDACTED,
                       "x-session-token": REDACTED, "content-type": "a/b", "x-dup": "1, 2"}
    assert redact_path("/m:generateContent?alt=sse&key=SECRET") == (
        "/m:generateContent?alt=sse&key=<redacted>")
    assert redact_path("/v1/messages?beta=true") == "/v1/messages?beta=true"
