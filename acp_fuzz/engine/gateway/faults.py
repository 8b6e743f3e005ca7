"""What the fake model can do to one model request besides answering it: fail it, or hold it.

A *fault* (:class:`Fault`, the kinds of :data:`acp_fuzz.core.steps.FAULTS`) replaces the
reply, in the API the request speaks, the way a real provider or the network fails:

``server-error``
    HTTP 500 with the API's error body (OpenAI ``server_error``, Anthropic ``api_error``,
    Gemini ``INTERNAL``).
``rate-limited``
    HTTP 429 (``rate_limit_exceeded``, ``rate_limit_error``, ``RESOURCE_EXHAUSTED``).
``overloaded``
    Anthropic's HTTP 529 ``overloaded_error``; OpenAI's and Gemini's 503 (``UNAVAILABLE``).
``connection-closed``
    The request is read whole, then the connection is closed without a byte of answer.
``stream-cut``
    The normal reply, cut: a streamed one (SSE) after its first event, sent chunked and
    closed before the last chunk; any other after half its body (``Content-Length`` says
    the whole).
``not-json``
    HTTP 200, ``application/json``, and an HTML page for a body (what a proxy in front of
    the provider sends).
``slow-first-byte``
    The normal reply, after :attr:`Gateway.slow_seconds` (bounded; the gateway's stop ends
    the wait).

Every error status comes with ``Retry-After: 0`` and ``retry-after-ms: 10``, which the
official SDKs honour, so their retries stay fast. A *hold* (:class:`Hold`) keeps a request
open, unanswered, until the harness releases it or its bound passes, so that the harness can
send a step while the agent's model call is in flight.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from acp_fuzz.core import replies
from acp_fuzz.core.steps import FAULTS

__all__ = ["HOLD_BOUND", "SLOW_SECONDS", "Fault", "Hold", "Plan", "error_reply", "not_json"]

#: Seconds a held request waits for its release before the gateway lets it go by itself.
HOLD_BOUND = 30.0
#: Seconds a ``slow-first-byte`` reply waits before its first byte.
SLOW_SECONDS = 1.0


class Fault(enum.StrEnum):
    """The failures the fake model can answer a request with (see the module docs)."""

    SERVER_ERROR = "server-error"
    RATE_LIMITED = "rate-limited"
    OVERLOADED = "overloaded"
    CONNECTION_CLOSED = "connection-closed"
    STREAM_CUT = "stream-cut"
    NOT_JSON = "not-json"
    SLOW_FIRST_BYTE = "slow-first-byte"


assert tuple(Fault) == FAULTS, "the gateway renders every fault a step can name"

#: The headers every error status carries: retry at once (``retry-after-ms`` is what the
#: OpenAI and Anthropic SDKs read first; ``Retry-After: 0`` is for everyone else).
RETRY_NOW = {"retry-after": "0", "retry-after-ms": "10"}

#: Per fault with a status: (status, OpenAI's error, Anthropic's type and message, Gemini's).
_ERRORS: dict[Fault, tuple[int, dict[str, object], tuple[str, str], tuple[str, str]]] = {
    Fault.SERVER_ERROR: (500, {"message": "The server had an error while processing your "
                               "request.", "type": "server_error", "param": None,
                               "code": None},
                         ("api_error", "Internal server error"),
                         ("INTERNAL", "An internal error has occurred.")),
    Fault.RATE_LIMITED: (429, {"message": "Rate limit reached for requests.",
                               "type": "requests", "param": None,
                               "code": "rate_limit_exceeded"},
                         ("rate_limit_error", "Number of requests has exceeded your rate "
                          "limit."),
                         ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check "
                          "quota).")),
    Fault.OVERLOADED: (503, {"message": "The engine is currently overloaded, please try "
                             "again later.", "type": "server_error", "param": None,
                             "code": None},
                       ("overloaded_error", "Overloaded"),
                       ("UNAVAILABLE", "The model is overloaded. Please try again later.")),
}

#: The body of a ``not-json`` answer.
NOT_JSON_BODY = (b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 "
                 b"Bad Gateway</h1></center></body></html>\n")


def error_reply(api: str, fault: Fault) -> replies.Reply:
    """The error answer of ``fault`` (one with a status: server-error, rate-limited,
    overloaded) in ``api``'s shape, as its official SDK reads it."""
    status, openai_error, (a_type, a_message), (g_status, g_message) = _ERRORS[fault]
    if api.startswith("anthropic"):
        status = 529 if fault is Fault.OVERLOADED else status
        return replies._json(status, {"type": "error", "error": {"type": a_type,
                                                                 "message": a_message}},
                             **RETRY_NOW)
    if api == "gemini":
        return replies._json(status, {"error": {"code": status, "message": g_message,
                                                "status": g_status}}, **RETRY_NOW)
    return replies._json(status, {"error": openai_error}, **RETRY_NOW)


def not_json() -> replies.Reply:
    """The ``not-json`` answer: a 200 that says JSON and is an HTML page."""
    return replies.Reply(200, NOT_JSON_BODY, "application/json")


class Hold:
    """A request the gateway holds open (:meth:`Gateway.hold_next`).

    :meth:`wait_arrived` waits (at most ``timeout`` seconds) for the request to arrive;
    :meth:`release` lets it go on to its answer. Unreleased, it goes on by itself after
    ``bound`` seconds (recorded as ``held: "expired"``), and at once when the gateway stops
    or forgets its plans, so a hold can never keep an agent (or Ctrl-C) waiting for ever."""

    def __init__(self, session: str | None, bound: float) -> None:
        self.session = session
        self.bound = bound
        self._arrived = threading.Event()
        self._released = threading.Event()

    def wait_arrived(self, timeout: float) -> bool:
        """Whether the held request has arrived (waiting up to ``timeout`` seconds)."""
        return self._arrived.wait(timeout)

    @property
    def arrived(self) -> bool:
        return self._arrived.is_set()

    def release(self) -> None:
        """Let the held request (or the one still to come) go on to its answer."""
        self._released.set()

    def _hold(self) -> str:
        """In the serving thread: arrive, wait for the release or the bound."""
        self._arrived.set()
        return "released" if self._released.wait(self.bound) else "expired"


@dataclass
class Plan:
    """One thing armed for the next matching requests: a fault ``count`` times, or a hold.
    ``session`` ``None`` matches any generating request; ``used`` counts the requests it
    took."""

    session: str | None
    fault: Fault | None = None
    hold: Hold | None = None
    count: int = 1
    used: int = 0
