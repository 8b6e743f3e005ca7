"""The fake model gateway as a real HTTP server, driven by the official SDKs and by urllib."""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from acp_fuzz.core.history import History, ModelExchange
from acp_fuzz.engine.gateway import Gateway, UpstreamRecorder
from acp_fuzz.engine.gateway.server import MAX_BODY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SECRET = "sk-test-SECRET-0xdeadbeef"
#: The gateways here take SECRET as their token; raw requests carry it like an SDK would.
AUTH = {"Authorization": f"Bearer {SECRET}"}
NONCE = "acpfuzz-0123456789ab"
TITLE_SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}},
                "required": ["title"], "additionalProperties": False}


@pytest.fixture
def history() -> History:
    return History()


@pytest.fixture
def gw(history: History) -> Iterator[Gateway]:
    with Gateway(history, token=SECRET) as gateway:
        gateway.register_nonce(NONCE, "A", 3)
        yield gateway


def only_exchange(history: History) -> ModelExchange:
    exchanges = history.model_exchanges()
    assert len(exchanges) == 1, [x.path for _, x in exchanges]
    return exchanges[0][1]


def assert_recorded(history: History, api: str, system: str, user: str) -> ModelExchange:
    ex = only_exchange(history)
    assert ex.api == api
    assert system in ex.texts("system")
    assert any(user in t for t in ex.texts("user"))
    assert all(user not in t for t in ex.texts("system") + ex.texts("history"))
    assert (ex.session, ex.turn, ex.side) == ("A", 3, False)
    assert ex.status == 200 and ex.reply_text == "ok"
    assert SECRET not in json.dumps(history.snapshot()[0].to_wire())
    return ex


def post(url: str, body: Any, headers: dict[str, str] | None = None,
         method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data if method == "POST" else None, method=method,
                                 headers={"content-type": "application/json", **AUTH,
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers.items()), err.read()


# -- OpenAI ------------------------------------------------------------------------------------


def test_openai_chat_plain(gw: Gateway, history: History) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    reply = client.chat.completions.create(model="fake-model", messages=[
        {"role": "system", "content": "SYSTEM-TEXT"},
        {"role": "user", "content": f"hello {NONCE}"}])
    assert reply.choices[0].message.content == "ok"
    ex = assert_recorded(history, "openai.chat", "SYSTEM-TEXT", f"hello {NONCE}")
    assert ex.headers["authorization"] == "<redacted>"
    assert ex.path == "/v1/chat/completions"


def test_openai_chat_streaming_with_usage(gw: Gateway, history: History) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    stream = client.chat.completions.create(
        model="fake-model", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "developer", "content": "SYSTEM-TEXT"},
                  {"role": "user", "content": [{"type": "text", "text": f"hi {NONCE}"}]}])
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 11
    assert_recorded(history, "openai.chat", "SYSTEM-TEXT", f"hi {NONCE}")


def test_openai_responses_streaming(gw: Gateway, history: History) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    with client.responses.stream(model="fake-model", instructions="SYSTEM-TEXT", input=[
        {"role": "developer", "content": "DEV-TEXT"},
        {"role": "user", "content": [{"type": "input_text", "text": f"go {NONCE}"}]},
    ]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "ok"
    ex = assert_recorded(history, "openai.responses", "SYSTEM-TEXT", f"go {NONCE}")
    assert "DEV-TEXT" in ex.texts("system")


def test_openai_responses_json_schema_is_side_but_tied(gw: Gateway, history: History) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    reply = client.responses.create(model="luna", input=f"title for {NONCE}", text={
        "format": {"type": "json_schema", "name": "t", "schema": TITLE_SCHEMA, "strict": True}})
    jsonschema.validate(json.loads(reply.output_text), TITLE_SCHEMA)
    ex = only_exchange(history)
    assert (ex.session, ex.turn, ex.side) == ("A", 3, True)
    assert json.loads(ex.reply_text) == {"title": "ok"}


def test_openai_chat_json_schema(gw: Gateway, history: History) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    schema = {"type": "object", "required": ["mood", "n"], "properties": {
        "mood": {"enum": ["calm", "angry"]}, "n": {"type": "integer", "minimum": 7}}}
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                           response_format=response_format)
    value = json.loads(reply.choices[0].message.content or "")
    jsonschema.validate(value, schema)
    assert value == {"mood": "calm", "n": 7}
    ex = only_exchange(history)
    # No nonce in the request: a side request that belongs to no turn.
    assert (ex.session, ex.turn, ex.side) == (None, None, True)


# -- Anthropic ---------------------------------------------------------------------------------


def anthropic_client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=SECRET, max_retries=0,
                               default_headers={"x-api-key": SECRET})


def test_anthropic_messages_plain(gw: Gateway, history: History) -> None:
    reply = anthropic_client(gw).messages.create(
        model="claude-x", max_tokens=100, system="SYSTEM-TEXT",
        messages=[{"role": "user", "content": f"first {NONCE}"}])
    assert reply.content[0].type == "text" and reply.content[0].text == "ok"
    ex = assert_recorded(history, "anthropic.messages", "SYSTEM-TEXT", f"first {NONCE}")
    assert ex.headers["x-api-key"] == "<redacted>"


def test_anthropic_messages_streaming(gw: Gateway, history: History) -> None:
    messages: Any = [
        {"role": "user", "content": "older turn acpfuzz-ffffffffffff"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "# Environment"},
        {"role": "user", "content": [{"type": "text", "text": f"newest {NONCE}"}]},
    ]
    with anthropic_client(gw).messages.stream(
            model="claude-x", max_tokens=100, messages=messages,
            system=[{"type": "text", "text": "billing"},
                    {"type": "text", "text": "SYSTEM-TEXT",
                     "cache_control": {"type": "ephemeral"}}]) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == "ok"
    assert final.stop_reason == "end_turn"
    ex = assert_recorded(history, "anthropic.messages", "SYSTEM-TEXT", f"newest {NONCE}")
    assert "# Environment" in ex.texts("system")
    assert "older turn acpfuzz-ffffffffffff" in ex.texts("history")


def test_anthropic_title_request_gets_schema_json(gw: Gateway, history: History) -> None:
    reply = anthropic_client(gw).messages.create(
        model="claude-x", max_tokens=100, tools=[],
        messages=[{"role": "user", "content": f"<session>{NONCE}</session>"}],
        extra_body={"output_config": {"format": {"type": "json_schema",
                                                 "schema": TITLE_SCHEMA}}})
    assert reply.content[0].type == "text"
    jsonschema.validate(json.loads(reply.content[0].text), TITLE_SCHEMA)
    ex = only_exchange(history)
    assert (ex.session, ex.turn, ex.side) == ("A", 3, True)


def test_anthropic_tool_loop_ties_to_the_prompt(gw: Gateway, history: History) -> None:
    anthropic_client(gw).messages.create(model="c", max_tokens=10, messages=[
        {"role": "user", "content": f"do it {NONCE}"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                           "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "a.txt"}]}])
    ex = only_exchange(history)
    assert ex.texts("user") == ["a.txt"]
    assert (ex.session, ex.turn, ex.side) == ("A", 3, False)


def test_anthropic_suggestion_mode_is_side(gw: Gateway, history: History) -> None:
    anthropic_client(gw).messages.create(model="c", max_tokens=10, messages=[
        {"role": "user", "content": f"p {NONCE}"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "[SUGGESTION MODE: suggest next]"}])
    ex = only_exchange(history)
    assert ex.side is True and ex.session is None


# -- Gemini ------------------------------------------------------------------------------------


GEMINI_BODY = {
    "systemInstruction": {"parts": [{"text": "SYSTEM-TEXT"}]},
    "contents": [{"role": "user", "parts": [{"text": "<session_context>"}]},
                 {"role": "model", "parts": [{"text": "ok"}]},
                 {"role": "user", "parts": [{"text": f"question {NONCE}"}]}],
}


def test_gemini_generate_content(gw: Gateway, history: History) -> None:
    status, _, body = post(gw.url + "/v1beta/models/gem:generateContent", GEMINI_BODY,
                           {"x-goog-api-key": SECRET})
    assert status == 200
    assert json.loads(body)["candidates"][0]["content"]["parts"][0]["text"] == "ok"
    ex = assert_recorded(history, "gemini", "SYSTEM-TEXT", f"question {NONCE}")
    assert ex.headers["x-goog-api-key"] == "<redacted>"
    assert "<session_context>" in ex.texts("history")


def test_gemini_stream_sse_with_key_in_query(gw: Gateway, history: History) -> None:
    status, headers, body = post(
        gw.url + f"/v1beta/models/gem:streamGenerateContent?alt=sse&key={SECRET}", GEMINI_BODY)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in body.decode().splitlines()
              if line.startswith("data:")]
    assert [e["candidates"][0]["content"]["parts"][0]["text"] for e in events] == ["ok"]
    ex = assert_recorded(history, "gemini", "SYSTEM-TEXT", f"question {NONCE}")
    assert ex.path == "/v1beta/models/gem:streamGenerateContent?alt=sse&key=<redacted>"


def test_gemini_router_json_schema(gw: Gateway, history: History) -> None:
    schema = {"type": "object", "properties": {
        "complexity_reasoning": {"type": "string"}, "complexity_score": {"type": "integer"}},
        "required": ["complexity_reasoning", "complexity_score"]}
    body = {**GEMINI_BODY, "generationConfig": {"responseMimeType": "application/json",
                                                "responseJsonSchema": schema}}
    _, _, raw = post(gw.url + "/v1beta/models/flash-lite:generateContent", body)
    text = json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
    jsonschema.validate(json.loads(text), schema)
    assert only_exchange(history).side is True


# -- real agents' recorded requests -----------------------------------------------------------

REAL_REQUESTS = Path(__file__).parent.parent / "realagent" / "fixtures" / "model_requests.json"


def real_requests() -> list[Any]:
    if not REAL_REQUESTS.is_file():
        return []
    loaded: list[Any] = json.loads(REAL_REQUESTS.read_text())
    return loaded


@pytest.mark.skipif(not REAL_REQUESTS.is_file(), reason="no recorded real-agent requests")
@pytest.mark.parametrize("fixture", real_requests(),
                         ids=lambda f: f"{f['profile']}-{f['kind']}")
def test_real_agent_requests(gw: Gateway, history: History, fixture: Any) -> None:
    """Requests captured from codex-acp, claude-agent-acp and gemini-cli are classified the
    way real-agents.md §2.5/§2.6 describes, and structured ones get parseable JSON."""
    headers = {k: v for k, v in fixture["headers"].items() if k.lower() != "content-length"}
    status, _, raw = post(gw.url + fixture["path"], fixture["body"], headers)
    assert status == 200
    ex = only_exchange(history)
    assert ex.api == fixture["api"]
    user_text = "".join(ex.texts("user"))
    if fixture["kind"] != "turn":
        assert ex.side is True
    elif NONCE in user_text:
        assert (ex.session, ex.turn, ex.side) == ("A", 3, False)
    else:
        # A turn whose prompt carries no registered nonce cannot be tied: it counts as side.
        assert (ex.session, ex.side) == (None, True)
    if fixture["kind"] == "turn":
        assert "acpfuzz-" in user_text
        assert ex.texts("system") and all("acpfuzz-" not in t for t in ex.texts("system"))
    if fixture["kind"] in ("title", "router"):
        assert isinstance(json.loads(ex.reply_text), dict)
        assert raw


# -- HTTP behaviour ----------------------------------------------------------------------------


def test_identical_requests_get_identical_bytes(gw: Gateway) -> None:
    for path, body in [
        ("/v1/responses", {"model": "m", "input": "x", "stream": True}),
        ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}],
                          "stream": True}),
        ("/v1/chat/completions", {"model": "m", "messages": [], "stream": True}),
    ]:
        first, second = post(gw.url + path, body), post(gw.url + path, body)
        assert first[2] == second[2] and first[2]
        other = post(gw.url + path, {**body, "model": "n"})
        assert other[2] != first[2]


def test_chunked_and_gzip_bodies(gw: Gateway, history: History) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": NONCE}]}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body=iter([body[:10], body[10:]]),
                     headers={"Content-Type": "application/json", **AUTH}, encode_chunked=True)
        assert json.loads(conn.getresponse().read())["choices"][0]["message"]["content"] == "ok"
        # The same keep-alive connection serves a gzip-encoded body next.
        conn.request("POST", "/v1/chat/completions", body=gzip.compress(body),
                     headers={"Content-Type": "application/json", "Content-Encoding": "gzip",
                              **AUTH})
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    exchanges = [x for _, x in history.model_exchanges()]
    assert [x.body for x in exchanges] == [json.loads(body)] * 2
    assert all(x.session == "A" for x in exchanges)


def test_oversized_body_is_refused(gw: Gateway, history: History) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.putrequest("POST", "/v1/messages")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.putheader("Authorization", f"Bearer {SECRET}")
        conn.endheaders()
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    assert only_exchange(history).status == 413


def test_deeply_nested_bodies_are_answered_and_recorded(gw: Gateway, history: History,
                                                         capfd: pytest.CaptureFixture[str]
                                                         ) -> None:
    # More than the JSON parser takes (a hostile agent): it once killed the handler thread,
    # closed the connection and printed a traceback.
    for depth in (200, 100_000):
        body = (b'{"model":"m","messages":[{"role":"user","content":"' + NONCE.encode()
                + b'"}],"x":' + b"[" * depth + b"]" * depth + b"}")
        conn = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]),
                                          timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json", **AUTH})
            assert conn.getresponse().status == 200
        finally:
            conn.close()
    shallow, deep = (x for _, x in history.model_exchanges())
    assert isinstance(shallow.body, dict)  # parsed (and clipped where it is recorded)
    assert isinstance(deep.body, str) and deep.body.startswith('{"model"')  # kept as text
    assert "Traceback" not in capfd.readouterr().err


def test_unknown_models_and_count_tokens(gw: Gateway, history: History) -> None:
    status, _, body = post(gw.url + "/v1/embeddings", {"input": "x"})
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found"
    status, _, body = post(gw.url + "/v1/models", None, method="GET")
    assert status == 200 and json.loads(body)["data"][0]["id"]
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)
    assert [m.id for m in client.models.list()] == ["fake-model"]
    _, _, body = post(gw.url + "/v1beta/models", None, method="GET")
    assert json.loads(body)["models"]
    _, _, body = post(gw.url + "/v1/messages/count_tokens?beta=true", {"messages": []})
    assert json.loads(body) == {"input_tokens": 10}
    _, _, body = post(gw.url + "/v1beta/models/g:countTokens", {"contents": []})
    assert json.loads(body) == {"totalTokens": 10}
    assert [(x.api, x.status) for _, x in history.model_exchanges()] == [
        ("unknown", 404), ("models", 200), ("models", 200), ("models", 200),
        ("anthropic.count_tokens", 200), ("gemini", 200)]


def test_history_swap_custom_reply_and_predicate() -> None:
    first, second = History(), History()
    calls: list[str] = []

    def side(api: str, headers: Any, body: Any) -> bool:
        calls.append(api)
        return bool(headers.get("x-openai-internal-codex-responses-lite") == "true")

    with Gateway(first, reply_text="pong", side_request=side, token=SECRET) as gw:
        gw.register_nonce(NONCE, "B", 1)
        body = {"model": "m", "input": NONCE}
        assert json.loads(post(gw.url + "/v1/responses", body)[2])["output"][0][
            "content"][0]["text"] == "pong"
        gw.history = second
        post(gw.url + "/v1/responses", body, {"x-openai-internal-codex-responses-lite": "true"})
        gw.history = None
        gw.forget_nonces()
        post(gw.url + "/v1/responses", body)
        assert "OPENAI_BASE_URL" in gw.agent_env()
        assert gw.agent_env()["ANTHROPIC_BASE_URL"] == gw.url
    assert [(x.session, x.side, x.reply_text) for _, x in first.model_exchanges()] == [
        ("B", False, "pong")]
    assert [(x.session, x.side) for _, x in second.model_exchanges()] == [("B", True)]
    assert calls == ["openai.responses"] * 3


def test_concurrent_requests_are_each_recorded_once(gw: Gateway, history: History) -> None:
    bodies = [{"model": f"m{i}", "input": f"{NONCE} #{i}"} for i in range(24)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda b: post(gw.url + "/v1/responses", b), bodies))
    assert [r[0] for r in results] == [200] * 24
    events = history.snapshot()
    assert [e.seq for e in events] == list(range(24))
    assert sorted(e.data["body"]["model"] for e in events) == sorted(b["model"] for b in bodies)


def test_register_nonce_rejects_non_nonces(gw: Gateway) -> None:
    with pytest.raises(ValueError, match="nonce"):
        gw.register_nonce("hello", "A", 1)


# -- upstream mode and vcrpy recording ---------------------------------------------------------


def test_upstream_record_then_replay_offline() -> None:
    upstream_history, front_history = History(), History()
    upstream = Gateway(upstream_history, reply_text="from-upstream", token=SECRET).start()
    upstream_url = upstream.url
    recorder = UpstreamRecorder()
    schema_body = {"model": "m", "input": f"name it {NONCE}", "text": {"format": {
        "type": "json_schema", "name": "t", "schema": TITLE_SCHEMA}}}
    turn_body = {"model": "m", "stream": True, "input": f"do it {NONCE}"}
    try:
        with Gateway(front_history, upstream=upstream_url, upstream_recorder=recorder,
                     token=SECRET) as front:
            front.register_nonce(NONCE, "A", 1)
            client = openai.OpenAI(base_url=front.url + "/v1", api_key=SECRET, max_retries=0)
            with client.responses.stream(model="m", input=f"do it {NONCE}") as stream:
                assert stream.get_final_response().output_text == "from-upstream"
            recorded_turn = post(front.url + "/v1/responses", turn_body,
                                 {"authorization": f"Bearer {SECRET}"})
            recorded_side = post(front.url + "/v1/responses", schema_body,
                                 {"x-api-key": SECRET, "x-goog-api-key": SECRET,
                                  "authorization": f"Bearer {SECRET}"})
    finally:
        upstream.stop()
    # The upstream really was called, with the agent's credentials passed on.
    assert [x.headers.get("authorization") for _, x in upstream_history.model_exchanges()] == [
        "<redacted>"] * 3
    assert [(x.upstream, x.session, x.side, x.reply_text)
            for _, x in front_history.model_exchanges()] == [
        (True, "A", False, "from-upstream"), (True, "A", False, "from-upstream"),
        (True, "A", True, '{"title":"ok"}')]
    data = recorder.to_bytes()
    assert len(recorder) == 3
    assert SECRET.encode() not in data and b"<redacted>" in data
    assert b"x-acp-fuzz-tie" in data

    # Offline replay: the upstream is gone; the recording alone answers, matched by the tie
    # (the side request is sent first this time, yet gets its own reply; requests with the
    # same tie are replayed in recorded order).
    replay_history = History()
    replayer = UpstreamRecorder.from_bytes(data)
    assert replayer.upstream == upstream_url
    with Gateway(replay_history, upstream_recorder=replayer, token=SECRET) as front:
        front.register_nonce(NONCE, "A", 1)
        replayed_side = post(front.url + "/v1/responses", schema_body)
        client = openai.OpenAI(base_url=front.url + "/v1", api_key=SECRET, max_retries=0)
        with client.responses.stream(model="m", input=f"do it {NONCE}") as stream:
            assert stream.get_final_response().output_text == "from-upstream"
        replayed_turn = post(front.url + "/v1/responses", turn_body)
        missing = post(front.url + "/v1/chat/completions", {"messages": []})
    assert replayed_side[2] == recorded_side[2]
    assert replayed_turn[2] == recorded_turn[2]
    assert missing[0] == 502
    assert [(x.status, x.upstream) for _, x in replay_history.model_exchanges()] == [
        (200, True), (200, True), (200, True), (502, True)]
    recorder.close()
    replayer.close()


def test_upstream_unreachable_is_a_502(history: History) -> None:
    dead = Gateway().start()
    url = dead.url
    dead.stop()
    with Gateway(history, upstream=url, token=SECRET) as front:
        status, _, body = post(front.url + "/v1/messages", {"messages": []})
    assert status == 502 and json.loads(body)["error"]["type"] == "upstream_error"
    assert only_exchange(history).upstream is True
