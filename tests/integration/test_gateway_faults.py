"""The fake model's faults and holds, seen through the official SDKs and raw HTTP (Gemini)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from acp_fuzz.core.history import History, ModelExchange
from acp_fuzz.core.steps import FAULTS
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.gateway.faults import Fault

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOKEN = "acpfuzz-token-faults"
NONCE_A = "acpfuzz-0123456789ab"
NONCE_B = "acpfuzz-ba9876543210"
#: The status each fault with one sends, by API family (Anthropic's overload is its 529).
STATUS = {"server-error": (500, 500), "rate-limited": (429, 429), "overloaded": (503, 529)}


@pytest.fixture
def history() -> History:
    return History()


@pytest.fixture
def gw(history: History) -> Iterator[Gateway]:
    with Gateway(history, token=TOKEN) as gateway:
        gateway.slow_seconds = 0.01
        gateway.register_nonce(NONCE_A, "A", 1)
        gateway.register_nonce(NONCE_B, "B", 1)
        yield gateway


def exchanges(history: History) -> list[ModelExchange]:
    return [x for _, x in history.model_exchanges()]


def openai_chat(gw: Gateway, retries: int = 0, text: str = "hi") -> str:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=TOKEN, max_retries=retries)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                  "content": text}])
    return answer.choices[0].message.content or ""


def anthropic_messages(gw: Gateway, retries: int = 0, text: str = "hi") -> str:
    client = anthropic.Anthropic(base_url=gw.url, api_key=TOKEN, max_retries=retries)
    answer = client.messages.create(model="m", max_tokens=5,
                                    messages=[{"role": "user", "content": text}])
    block = answer.content[0]
    return block.text if isinstance(block, anthropic.types.TextBlock) else ""


def openai_chat_stream(gw: Gateway) -> str:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=TOKEN, max_retries=0)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def anthropic_stream(gw: Gateway) -> list[str]:
    client = anthropic.Anthropic(base_url=gw.url, api_key=TOKEN, max_retries=0)
    stream = client.messages.create(model="m", max_tokens=5, stream=True,
                                    messages=[{"role": "user", "content": "hi"}])
    return [event.type for event in stream]


def test_the_step_kinds_are_the_gateway_s() -> None:
    assert tuple(Fault) == FAULTS


@pytest.mark.parametrize("kind", ["server-error", "rate-limited", "overloaded"])
@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_an_error_status_reaches_the_sdk_as_that_status(gw: Gateway, history: History,
                                                        kind: str, family: str) -> None:
    call = openai_chat if family == "openai" else anthropic_messages
    error: type[Exception] = openai.APIStatusError if family == "openai" \
        else anthropic.APIStatusError
    gw.fail_next(kind)
    with pytest.raises(error) as caught:
        call(gw)
    status = STATUS[kind][family == "anthropic"]
    assert getattr(caught.value, "status_code", None) == status
    if kind == "rate-limited":
        rate: type[Exception] = openai.RateLimitError if family == "openai" \
            else anthropic.RateLimitError
        assert isinstance(caught.value, rate)
    if family == "anthropic":
        body = caught.value.body  # type: ignore[attr-defined]
        assert body["error"]["type"] == {"server-error": "api_error",
                                         "rate-limited": "rate_limit_error",
                                         "overloaded": "overloaded_error"}[kind]
    [x] = exchanges(history)
    assert (x.fault, x.status, x.reply_text) == (kind, status, "")


@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_a_closed_connection_and_a_cut_body_are_connection_errors(
        gw: Gateway, history: History, family: str) -> None:
    call = openai_chat if family == "openai" else anthropic_messages
    error: type[Exception] = openai.APIConnectionError if family == "openai" \
        else anthropic.APIConnectionError
    for kind in ("connection-closed", "stream-cut"):
        gw.fail_next(kind)
        with pytest.raises(error):
            call(gw)
    assert [(x.fault, x.status) for x in exchanges(history)] == [
        ("connection-closed", 0), ("stream-cut", 200)]


def test_a_cut_stream_ends_in_an_error_after_its_first_event(gw: Gateway,
                                                             history: History) -> None:
    gw.fail_next("stream-cut")
    seen: list[str] = []
    client = anthropic.Anthropic(base_url=gw.url, api_key=TOKEN, max_retries=0)
    stream = client.messages.create(model="m", max_tokens=5, stream=True,
                                    messages=[{"role": "user", "content": "hi"}])
    # The SDK's HTTP client's own error (httpx's RemoteProtocolError: the last chunk missing).
    with pytest.raises(Exception, match=r"incomplete chunked read|Connection error"):
        for event in stream:
            seen.append(event.type)
    assert seen == ["message_start"]
    gw.fail_next("stream-cut")
    with pytest.raises(openai.APIConnectionError):
        openai_chat_stream(gw)
    assert anthropic_stream(gw)[-1] == "message_stop"  # spent: the next stream is whole
    assert [x.fault for x in exchanges(history)] == ["stream-cut", "stream-cut", None]


@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_an_answer_that_is_not_json_fails_to_parse(gw: Gateway, history: History,
                                                   family: str) -> None:
    gw.fail_next("not-json")
    with pytest.raises(ValueError):
        (openai_chat if family == "openai" else anthropic_messages)(gw)
    [x] = exchanges(history)
    assert (x.fault, x.status) == ("not-json", 200)


def test_a_slow_first_byte_is_the_normal_answer(gw: Gateway, history: History) -> None:
    gw.fail_next("slow-first-byte", count=2)
    assert openai_chat(gw) == "ok"
    assert anthropic_messages(gw) == "ok"
    assert [(x.fault, x.reply_text) for x in exchanges(history)] == [
        ("slow-first-byte", "ok"), ("slow-first-byte", "ok")]


RETRIED = ["server-error", "rate-limited", "overloaded", "connection-closed", "stream-cut"]


@pytest.mark.parametrize("kind", RETRIED)
@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_the_sdk_s_retry_gets_the_normal_answer(gw: Gateway, history: History, kind: str,
                                                family: str) -> None:
    gw.fail_next(kind)
    assert (openai_chat if family == "openai" else anthropic_messages)(gw, retries=2) == "ok"
    assert [(x.fault, x.reply_text) for x in exchanges(history)] == [(kind, ""), (None, "ok")]
    assert gw.disarm() == 1


def gemini(gw: Gateway, action: str = "generateContent", query: str = "") -> Any:
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    request = urllib.request.Request(
        f"{gw.url}/v1beta/models/m:{action}{query}", data=body, method="POST",
        headers={"Content-Type": "application/json", "x-goog-api-key": TOKEN})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


@pytest.mark.parametrize("kind,status", [("server-error", "INTERNAL"),
                                         ("rate-limited", "RESOURCE_EXHAUSTED"),
                                         ("overloaded", "UNAVAILABLE")])
def test_gemini_gets_its_own_error_shape(gw: Gateway, kind: str, status: str) -> None:
    gw.fail_next(kind)
    with pytest.raises(urllib.error.HTTPError) as caught:
        gemini(gw)
    assert caught.value.code == STATUS[kind][0]
    assert caught.value.headers["Retry-After"] == "0"
    error = json.loads(caught.value.read())["error"]
    assert (error["code"], error["status"]) == (STATUS[kind][0], status)


def test_gemini_sees_each_broken_answer(gw: Gateway, history: History) -> None:
    gw.fail_next("connection-closed")
    with pytest.raises(http.client.RemoteDisconnected):
        gemini(gw)
    gw.fail_next("stream-cut")
    with pytest.raises(http.client.IncompleteRead):
        gemini(gw, "streamGenerateContent", "?alt=sse")
    gw.fail_next("not-json")
    with pytest.raises(ValueError):
        json.loads(gemini(gw))
    gw.fail_next("slow-first-byte")
    assert json.loads(gemini(gw))["candidates"][0]["content"]["parts"][0]["text"] == "ok"
    assert json.loads(gemini(gw, "countTokens")) == {"totalTokens": 10}  # not a model turn
    assert [x.fault for x in exchanges(history)] == [
        "connection-closed", "stream-cut", "not-json", "slow-first-byte", None]


def test_a_fault_for_a_session_fails_only_its_turns(gw: Gateway, history: History) -> None:
    gw.fail_next("server-error", count=2, session="A")
    assert openai_chat(gw, text="untied") == "ok"
    assert openai_chat(gw, text=f"turn of B [{NONCE_B}]") == "ok"
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            openai_chat(gw, text=f"turn of A [{NONCE_A}]")
    assert openai_chat(gw, text=f"turn of A [{NONCE_A}]") == "ok"
    assert [(x.session, x.fault) for x in exchanges(history)] == [
        (None, None), ("B", None), ("A", "server-error"), ("A", "server-error"), ("A", None)]
    assert gw.disarm("A") == 2
    assert gw.disarm("A") == 0  # counted since the last disarm


def test_a_disarmed_fault_fails_nothing(gw: Gateway, history: History) -> None:
    gw.fail_next("rate-limited", session="A")
    assert gw.disarm("A") == 0
    assert openai_chat(gw, text=f"[{NONCE_A}]") == "ok"
    gw.fail_next("rate-limited")
    gw.forget_nonces()
    assert openai_chat(gw) == "ok"
    assert [x.fault for x in exchanges(history)] == [None, None]
    with pytest.raises(ValueError):
        gw.fail_next("teapot")


def in_thread(call: Callable[[], str]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as e:  # the test reads what the client got
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_held_request_waits_for_its_release(gw: Gateway, history: History) -> None:
    hold = gw.hold_next(session="A")
    thread, out = in_thread(lambda: openai_chat(gw, text=f"[{NONCE_A}]"))
    assert hold.wait_arrived(20)
    # Held: the exchange is recorded when it is answered, so nothing is there yet.
    assert exchanges(history) == [] and out == []
    assert openai_chat(gw, text=f"[{NONCE_B}]") == "ok"  # other requests go on meanwhile
    hold.release()
    thread.join(20)
    assert out == ["ok"]
    assert [(x.session, x.held) for x in exchanges(history)] == [("B", None), ("A", "released")]


def test_an_unreleased_hold_lets_go_at_its_bound(gw: Gateway, history: History) -> None:
    hold = gw.hold_next(bound=0.05)
    assert openai_chat(gw) == "ok"
    assert hold.arrived
    assert [x.held for x in exchanges(history)] == ["expired"]


def test_stopping_the_gateway_lets_a_held_request_go(history: History) -> None:
    gateway = Gateway(history, token=TOKEN).start()
    hold = gateway.hold_next()
    thread, out = in_thread(lambda: openai_chat(gateway))
    assert hold.wait_arrived(20)
    gateway.stop()  # must not wait for the hold's bound (30 s; the test's timeout is 60)
    thread.join(20)
    assert not thread.is_alive() and len(out) == 1
    assert [x.held for x in exchanges(history)] == ["released"]
