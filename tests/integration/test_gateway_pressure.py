"""The fake model forces a compaction (issue #22 §1): armed for a session, its next model turn
gets a reply whose usage reports a context near its limit, or the API's context-length error,
and the official SDKs read both as they read a real model's. Side requests, and the summary
request of a compaction, are recorded with their ``side_kind``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from acp_fuzz.core.history import History, ModelExchange
from acp_fuzz.engine.agents.setup import Matcher, SideRule, SideTest
from acp_fuzz.engine.gateway import Gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SECRET = "sk-test-SECRET-pressure"
NONCE = "acpfuzz-0123456789ab"
OTHER = "acpfuzz-ba9876543210"
TOKENS, WINDOW = 120_000, 128_000
SUMMARY = "Summarise the conversation so far."


@pytest.fixture
def history() -> History:
    return History()


@pytest.fixture
def gw(history: History) -> Iterator[Gateway]:
    rules = (SideRule("summary", body=(("messages.0.content", Matcher("prefix", SUMMARY)),),
                      kind="compaction"),
             SideRule("title", body=(("messages.0.content", Matcher("prefix", "Title")),)))
    with Gateway(history, token=SECRET, side_request=SideTest(rules)) as gateway:
        gateway.register_nonce(NONCE, "A", 3)
        gateway.register_nonce(OTHER, "B", 1)
        yield gateway


def exchanges(history: History) -> list[ModelExchange]:
    return [x for _, x in history.model_exchanges()]


def openai_client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0)


def anthropic_client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=SECRET, max_retries=0)


def chat(gw: Gateway, text: str = f"hi {NONCE}", **kw: Any) -> Any:
    return openai_client(gw).chat.completions.create(
        model="fake-model", messages=[{"role": "system", "content": "S"},
                                      {"role": "user", "content": text}], **kw)


def post(url: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json",
                                          "x-goog-api-key": SECRET})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    text = raw.decode()
    if text.startswith("data:"):
        return status, [json.loads(line[5:]) for line in text.splitlines()
                        if line.startswith("data:")]
    return status, json.loads(text)


GEMINI = {"contents": [{"role": "user", "parts": [{"text": f"q {NONCE}"}]}]}


# -- usage -------------------------------------------------------------------------------------


def test_usage_reaches_the_openai_sdk_once_and_only_for_its_session(gw: Gateway,
                                                                   history: History) -> None:
    gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
    # Not B's turn, not A's side request, not a request tied to nobody: they leave it armed.
    assert chat(gw, f"hi {OTHER}").usage.prompt_tokens == 10
    openai_client(gw).chat.completions.create(model="m", messages=[  # a side request
        {"role": "system", "content": "Title this"}, {"role": "user", "content": NONCE}])
    assert chat(gw, "no nonce here").usage.prompt_tokens == 10
    reply = chat(gw)
    assert reply.usage.prompt_tokens == TOKENS and reply.usage.total_tokens == TOKENS + 1
    assert chat(gw).usage.prompt_tokens == 10  # used once
    assert gw.release("A") is True and gw.release("B") is False
    pressed = [(x.session, x.pressure) for x in exchanges(history)]
    assert pressed == [("B", None), ("A", None), (None, None), ("A", "usage"), ("A", None)]


def test_usage_in_every_openai_stream_and_the_responses_api(gw: Gateway) -> None:
    gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
    chunks = list(chat(gw, stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == TOKENS
    for stream in (False, True):
        gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
        client = openai_client(gw)
        if stream:
            with client.responses.stream(model="m", input=f"go {NONCE}") as events:
                final = events.get_final_response()
        else:
            final = client.responses.create(model="m", input=f"go {NONCE}")
        assert final.usage is not None
        assert (final.usage.input_tokens, final.usage.total_tokens) == (TOKENS, TOKENS + 1)


def test_usage_in_anthropic_messages_streamed_and_not(gw: Gateway) -> None:
    gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
    messages: Any = [{"role": "user", "content": f"hi {NONCE}"}]
    reply = anthropic_client(gw).messages.create(model="c", max_tokens=9, messages=messages)
    assert reply.usage.input_tokens == TOKENS
    gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
    seen = []
    with anthropic_client(gw).messages.stream(model="c", max_tokens=9,
                                              messages=messages) as stream:
        for event in stream:
            if event.type == "message_start":
                seen.append(event.message.usage.input_tokens)
            elif event.type == "message_delta":
                seen.append(event.usage.input_tokens)
        final = stream.get_final_message()
    assert seen == [TOKENS, TOKENS] and final.usage.input_tokens == TOKENS


def test_usage_in_gemini_streamed_and_not(gw: Gateway) -> None:
    for action in ("generateContent", "streamGenerateContent?alt=sse"):
        gw.press("A", "usage", tokens=TOKENS, window=WINDOW)
        status, body = post(f"{gw.url}/v1beta/models/gem:{action}", GEMINI)
        reply = body[0] if isinstance(body, list) else body
        assert status == 200
        assert reply["usageMetadata"]["promptTokenCount"] == TOKENS
        assert reply["usageMetadata"]["totalTokenCount"] == TOKENS + 1


# -- overflow ----------------------------------------------------------------------------------


def test_overflow_is_the_openai_context_length_error(gw: Gateway, history: History) -> None:
    gw.press("A", "overflow", tokens=TOKENS, window=WINDOW)
    with pytest.raises(openai.BadRequestError) as e:
        chat(gw, stream=True)
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    assert e.value.type == "invalid_request_error"
    assert f"maximum context length is {WINDOW} tokens" in e.value.message
    assert chat(gw).choices[0].message.content == "ok"  # once: the retry gets a reply
    gw.press("A", "overflow", tokens=TOKENS, window=WINDOW)
    with pytest.raises(openai.BadRequestError) as e:
        openai_client(gw).responses.create(model="m", input=f"go {NONCE}")
    assert e.value.code == "context_length_exceeded"
    recorded = [(x.status, x.pressure) for x in exchanges(history)]
    assert recorded == [(400, "overflow"), (200, None), (400, "overflow")]


def test_overflow_is_the_anthropic_prompt_too_long_error(gw: Gateway) -> None:
    gw.press("A", "overflow", tokens=TOKENS, window=WINDOW)
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client(gw).messages.create(
            model="c", max_tokens=9, messages=[{"role": "user", "content": f"hi {NONCE}"}])
    assert e.value.status_code == 400
    body: Any = e.value.body
    assert body["error"]["type"] == "invalid_request_error"
    # The window is the most the model takes; the request is said to be past it.
    assert body["error"]["message"] == \
        f"prompt is too long: {WINDOW + 1} tokens > {WINDOW} maximum"


def test_overflow_is_gemini_invalid_argument(gw: Gateway) -> None:
    gw.press("A", "overflow", tokens=WINDOW + 5, window=WINDOW)
    status, body = post(f"{gw.url}/v1beta/models/gem:generateContent", GEMINI)
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    assert body["error"]["message"] == (f"The input token count ({WINDOW + 5}) exceeds the "
                                        f"maximum number of tokens allowed ({WINDOW}).")


def test_pressure_is_forgotten_with_the_nonces(gw: Gateway) -> None:
    gw.press("A", "overflow", tokens=TOKENS, window=WINDOW)
    gw.forget_nonces()
    gw.register_nonce(NONCE, "A", 3)
    assert chat(gw).choices[0].message.content == "ok"
    with pytest.raises(ValueError, match="usage or overflow"):
        gw.press("A", "command", tokens=1, window=1)


# -- side kinds --------------------------------------------------------------------------------


def test_each_model_event_says_what_kind_of_request_it_was(gw: Gateway,
                                                           history: History) -> None:
    client = openai_client(gw)
    chat(gw)  # a turn
    client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"{SUMMARY} Keep every decision."},
        {"role": "user", "content": f"user: hi {NONCE}\n\nassistant: ok"}])
    client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"Title for {NONCE}"},
        {"role": "user", "content": f"hi {NONCE}"}])
    chat(gw, "tied to no turn")
    kinds = [(x.session, x.side, x.side_kind) for x in exchanges(history)]
    # A model request no rule names and no nonce ties is recorded as untied (#38 §2).
    assert kinds == [("A", False, None), ("A", True, "compaction"), ("A", True, "side"),
                     (None, True, "untied")]
