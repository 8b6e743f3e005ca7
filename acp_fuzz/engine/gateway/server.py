"""The fake model HTTP server: answers agents' model calls and records each one.

Every exchange becomes one ``model`` event in the current :class:`~acp_fuzz.core.history.History`
(see :class:`~acp_fuzz.core.history.ModelExchange`), appended *before* the reply is written, so
once an agent (or a test) has the reply, the event is in the history.

Only the agent under test may talk to the gateway: each gateway makes a random token
(:attr:`Gateway.token`) and hands it to the agent as every SDK's API key
(:meth:`Gateway.agent_env`). A request that does not carry it (``Authorization: Bearer``,
``x-api-key``, ``x-goog-api-key``, ``api-key`` or ``?key=``) is answered 401, its body unread,
and recorded as a ``model`` event with status 401 and no text, so that another local process
can neither forge nor hide what the agent sent, and a report shows that someone tried.

Nothing sent to it can grow the harness without bound: a refused request (no token, a
body or header block over the limits, a request target that is not a path) is recorded in
brief (method, clipped path, a few clipped headers, the reason as its ``reply_text``), at most
:data:`MAX_RECORDED_REFUSALS` per history, the rest counted (``counts["unrecorded"]``); a
request's header block is bounded (:data:`MAX_HEADERS`, :data:`MAX_HEADER_LINE`,
:data:`MAX_HEADER_BYTES`: past them, a 431), and so is its body, on the wire, inflated and
in JSON values (:mod:`acp_fuzz.engine.gateway.body`: past them, a 413 or 400). A request's
header block must arrive within :data:`HEADER_TIMEOUT` seconds of its first byte and its body
within :data:`REQUEST_TIMEOUT` (deadlines, not per-read timeouts: past the body's, a 408); a
connection idle for :data:`IDLE_TIMEOUT` seconds between requests is closed. At most
:data:`MAX_CONNECTIONS` are served at once, and the slots belong to connections that have
shown the token (a request that carries it *proves* its connection, for as long as it is
kept alive): when they are full, a new connection takes the slot of the oldest one not yet
proven, which is closed unanswered (``counts["connections_evicted"]``); only when every slot
is proven is a new one answered 503 and closed (``counts["connections_refused"]``).

The request target must be a path (origin-form, ``/v1/messages?x=y``): any other form
(``http://host/x``, ``@host/x``, ``*``) is refused with a 400, so that with ``--model-upstream``
the agent can choose only the path and query sent to the configured upstream, never its
scheme, host or port (:func:`acp_fuzz.engine.gateway.upstream.upstream_url`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import io
import json
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl

from acp_fuzz.core import replies
from acp_fuzz.core.fills import compact, compact_value, may_hold_fill
from acp_fuzz.core.history import History, ModelExchange, Segment
from acp_fuzz.core.slots import ModelApi, detect_api, split_request, user_turn_is_tool_result
from acp_fuzz.engine.gateway.body import MAX_BODY, MAX_TEXT_BODY, BodyError, parse_body, read_body
from acp_fuzz.engine.gateway.faults import (
    HOLD_BOUND,
    SLOW_SECONDS,
    Fault,
    Hold,
    Plan,
    error_reply,
    not_json,
)
from acp_fuzz.engine.gateway.redact import redact_headers, redact_path
from acp_fuzz.engine.gateway.upstream import UpstreamError, UpstreamRecorder, forward

__all__ = ["HEADER_TIMEOUT", "IDLE_TIMEOUT", "KEY_VARIABLES", "MAX_BODY", "MAX_CONNECTIONS",
           "MAX_HEADERS", "MAX_HEADER_BYTES", "MAX_HEADER_LINE", "MAX_RECORDED_REFUSALS",
           "MAX_TEXT_BODY", "NONCE_RE", "REQUEST_TIMEOUT", "Gateway", "is_side_request",
           "recorded_body", "recorded_segments"]

#: The harness nonce the runner puts into each ``session/prompt`` text.
NONCE_RE = re.compile(r"acpfuzz-[0-9a-f]{12}")
#: The SDK variables :meth:`Gateway.agent_env` sets to the gateway's token.
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                 "ACP_FUZZ_MODEL_TOKEN")
#: Where the APIs the gateway speaks carry their key (besides ``Authorization: Bearer``).
KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")
#: Largest request body recorded as it came (parsed). A bigger one is recorded as its first
#: :data:`BODY_PREVIEW` bytes of text and a marker: the oracles judge the segments, not the
#: body, and a body of up to :data:`MAX_BODY` would otherwise be stored twice per request.
MAX_RECORDED_BODY = 1024 * 1024
BODY_PREVIEW = 64 * 1024
#: Characters of segment text recorded per request, whole, system and user slots first (a
#: fuzzed prompt is at most about 400 KiB). Past it each segment keeps its head and tail
#: (:data:`SEGMENT_KEEP` characters) around a marker, so a canary at either end survives.
MAX_RECORDED_TEXT = 16 * 1024 * 1024
SEGMENT_KEEP = 4096
#: Segments recorded per request; the rest are counted in one marker segment.
MAX_RECORDED_SEGMENTS = 10_000

#: A request's header block: lines, bytes per line, bytes in all (past any, a 431). The
#: stdlib's own bounds (100 lines of 64 KiB: 6.4 MiB per request and connection) let a local
#: stranger park hundreds of MB in the harness. Model SDKs send 10-30 headers, each under
#: 1 KiB but for a bearer token (a ChatGPT login's, the longest seen, is about 2 KiB).
MAX_HEADERS = 64
MAX_HEADER_LINE = 16 * 1024
MAX_HEADER_BYTES = 64 * 1024
#: Refused requests recorded per history (the gateway's current one); the rest are counted.
MAX_RECORDED_REFUSALS = 32
#: Of a refused request, this many headers are recorded, each name and value clipped to
#: :data:`_BRIEF_TEXT` characters, and its path to :data:`_BRIEF_PATH`.
_BRIEF_HEADERS = 8
_BRIEF_TEXT = 200
_BRIEF_PATH = 512
#: Seconds a connection may sit idle (or stall a read or write) before it is closed. Longer
#: than any SDK keeps an idle keep-alive connection (httpx 5 s, undici 4 s, reqwest 90 s), so
#: the client always lets go first and never races a close; replies are written whole here.
IDLE_TIMEOUT = 120.0
#: Connections open at once; past it a new one takes the slot of the oldest connection that
#: has not shown the token yet, or with none such gets a 503 and is closed. An agent keeps a
#: handful of keep-alive connections (a campaign's pre-spawned agents do not call the model
#: before their example starts); the bound keeps threads and buffers from piling up.
MAX_CONNECTIONS = 64
#: Seconds a request's header block may take to arrive, from its first byte (a new
#: connection's, from its accept), and its headers and body together. A total, not a
#: per-read timeout: one byte per :data:`IDLE_TIMEOUT` would otherwise hold a connection
#: (and one of the :data:`MAX_CONNECTIONS`) for ever. SDKs write a request's headers at once
#: and its body right after, in milliseconds on loopback (64 MiB takes under a second), so
#: both are generous; only the body's deadline applies to requests that carry the token, as
#: a request without it is answered before its body is read.
HEADER_TIMEOUT = 30.0
REQUEST_TIMEOUT = 300.0

#: The APIs whose requests are model turns (counted in :attr:`Gateway.counts`).
_MODEL_APIS = frozenset(ModelApi)

SidePredicate = Callable[[str, Mapping[str, str], Any], bool]


def is_side_request(api: str, headers: Mapping[str, str], body: Any) -> bool:
    """The built-in side-request test: any structured-output (JSON schema) request, or an
    Anthropic or Chat Completions request whose last message is a ``[SUGGESTION MODE:``
    prompt (the Claude Agent SDK's and qwen-code's prompt suggestions)."""
    if replies.structured_schema(api, body) is not None:
        return True
    if api in ("anthropic.messages", "openai.chat") and isinstance(body, Mapping):
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        content = last.get("content") if isinstance(last, Mapping) else None
        if isinstance(content, list) and len(content) == 1 and isinstance(content[0], Mapping):
            content = content[0].get("text")
        if isinstance(content, str) and content.startswith("[SUGGESTION MODE:"):
            return True
    return False


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else f"{text[:n]}... [acp-fuzz: {len(text)} characters]"


class _Server(ThreadingHTTPServer):
    """Serves each connection in a thread of its own, at most ``gateway.max_connections`` at
    once. A slot belongs to a connection that has shown the run's token (*proven*, then for
    as long as it is kept alive); one that has not (still reading its first header block, or
    idle before its first request) is *unproven*, and when the slots are full a newcomer
    takes the oldest unproven one's, which is closed (:meth:`_evict`). Only when every slot
    is proven is a newcomer refused (503)."""

    daemon_threads = True
    block_on_close = False
    #: The listen backlog (socketserver's default is 5): past it the kernel drops a new
    #: connection's SYN and the client tries again only a second later, then 3, 7 s... A
    #: flood of connections kept it full, so the agent's connect waited there.
    request_queue_size = 1024
    gateway: Gateway

    def __init__(self, address: tuple[str, int], handler: type[_Handler]) -> None:
        super().__init__(address, handler)
        # The connections being served, each in one of the two, the unproven in the order
        # they came (the oldest first); an evicted one is in neither. Under the lock, so
        # is closing one's socket: an evicted socket is shut down only while still open.
        self._unproven: dict[Any, None] = {}
        self._proven: set[Any] = set()
        # Evicted and not yet released: only their errors are expected, and kept quiet.
        self._evicted: set[Any] = set()
        self._slots_lock = threading.Lock()

    @property
    def active(self) -> int:
        """Connections holding a slot now."""
        with self._slots_lock:
            return len(self._unproven) + len(self._proven)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._slots_lock:
            full = len(self._unproven) + len(self._proven) >= self.gateway.max_connections
            evicted = full and self._evict()
            if not full or evicted:
                self._unproven[request] = None
        if full and not evicted:
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)  # no thread was started for it
            raise

    def _evict(self) -> bool:
        """Close the oldest unproven connection (the lock held); whether there was one. Its
        blocked read returns at once and its handler ends without a word (see
        :meth:`holds`)."""
        if not self._unproven:
            return False
        victim = next(iter(self._unproven))
        del self._unproven[victim]
        self._evicted.add(victim)
        # Counted before the close: whoever sees the victim's EOF also sees the count.
        with self.gateway._lock:
            self.gateway.counts["connections_evicted"] += 1
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)
        return True

    def holds(self, request: Any, *, proven: bool) -> bool:
        """Does ``request`` (a connection's socket) still hold its slot? ``proven``: its
        request carries the token, so it keeps the slot from now on. ``False``: evicted."""
        with self._slots_lock:
            if request in self._proven:
                return True
            if request not in self._unproven:
                return False
            if proven:
                del self._unproven[request]
                self._proven.add(request)
            return True

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # ThreadingMixIn's, with the slot freed before the socket is closed: a client that
        # has seen the close may connect again at once and must find the slot free.
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._slots_lock:
            self._unproven.pop(request, None)
            self._proven.discard(request)
            self._evicted.discard(request)
            self.shutdown_request(request)

    def _refuse(self, request: Any) -> None:
        with self.gateway._lock:
            self.gateway.counts["connections_refused"] += 1
        body = b"acp-fuzz gateway: too many connections\n"
        with contextlib.suppress(OSError):
            request.setblocking(False)  # a few bytes into a fresh socket's buffer, or nothing
            request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An agent killed mid-request (a restart, a timeout, the end of an example) resets
        # its connection: expected, and no reason for a traceback on the user's terminal
        # (socketserver's default prints one to stderr). Nor is an evicted connection's end
        # (its socket shut down under it). Anything else still shows.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        with self._slots_lock:
            if request in self._evicted:
                return
        super().handle_error(request, client_address)


class _HeaderReader:
    """Stands in for ``rfile`` while the stdlib reads a request's header block, with tighter
    bounds than its own (see :data:`MAX_HEADERS`); past them it records the refusal and raises
    what the stdlib raises for its own bounds, which the stdlib answers with a 431."""

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler
        self._raw = handler.rfile
        self._lines = 0
        self._size = 0

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self._raw.readline(MAX_HEADER_LINE + 1)
        self._lines += 1
        self._size += len(line)
        if len(line) > MAX_HEADER_LINE:
            self._refuse(f"a header line over {MAX_HEADER_LINE} bytes")
            raise http.client.LineTooLong("header line")
        if self._lines > MAX_HEADERS + 1 or self._size > MAX_HEADER_BYTES:  # + the blank line
            why = f"over {MAX_HEADERS} headers or {MAX_HEADER_BYTES} bytes of them"
            self._refuse(why)
            raise http.client.HTTPException(why)
        return line

    def _refuse(self, why: str) -> None:
        # Recorded before the 431 is written: once the client has it, the event is there.
        h = self._handler
        h.server.gateway._refused(h.command or "", h.path or "", [], 431,
                                  f"the header block is too large ({why})")


class _Deadline:
    """When the request being read must have arrived (see :data:`HEADER_TIMEOUT`): its
    header block within ``header`` seconds of its first byte, headers and body within
    ``request``. Between requests a connection waits up to ``idle`` seconds for the next
    one's first byte, which starts the clock again."""

    def __init__(self, idle: float, header: float, request: float) -> None:
        self.idle, self.header, self.request = idle, header, request
        self.phase = "headers"  # a new connection's clock starts at its accept
        self.start = time.monotonic()

    def timeout(self) -> float:
        """The socket timeout for the next read: what is left, at most ``idle``."""
        if self.phase == "idle":
            return self.idle
        limit = self.header if self.phase == "headers" else self.request
        left = self.start + limit - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request did not arrive within {limit} s")
        return min(self.idle, left)

    def received(self) -> None:
        if self.phase == "idle":
            self.phase = "headers"
            self.start = time.monotonic()


class _DeadlineReader(io.RawIOBase):
    """The connection's raw input: each receive waits only until the request's deadline, so
    a request sent one byte at a time is cut off there, however steadily the bytes come."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.timeout())
        try:
            n = self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._deadline.idle)  # replies are written with this one
        if n:
            self._deadline.received()
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the history is the log

    def setup(self) -> None:
        super().setup()
        # A stalled read past the deadline, or an idle keep-alive connection, raises
        # TimeoutError, which the stdlib catches and closes the connection on.
        gw = self.server.gateway
        self.deadline = _Deadline(gw.idle_timeout, gw.header_timeout, gw.request_timeout)
        self.connection.settimeout(gw.idle_timeout)
        self.rfile.close()  # the stdlib's file of the socket; the socket stays open
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.deadline))

    def handle_one_request(self) -> None:
        super().handle_one_request()
        self.deadline.phase = "idle"  # the next request's clock starts with its first byte

    def parse_request(self) -> bool:
        real = self.rfile
        self.rfile = _HeaderReader(self)  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = real
        self.deadline.phase = "body"
        if not parsed:
            return False
        # A request with the token proves its connection, which keeps its slot. An evicted
        # one (its read cut short, so perhaps a header block cut in two) ends here unanswered.
        if not self.server.holds(self.connection, proven=self.server.gateway._authorized(self)):
            self.close_connection = True
            return False
        return True

    def _read_body(self) -> bytes:
        try:
            return read_body(self.rfile, self.headers)
        except TimeoutError:
            limit = self.deadline.request
            raise BodyError(408, f"the request body did not arrive within {limit} s") from None

    def _handle(self) -> None:
        self.server.gateway._serve(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


def recorded_body(body: Any, raw: bytes) -> Any:
    """What the history keeps of a request body: the parsed body (with each huge prompt's
    filler written as its mark, :mod:`acp_fuzz.core.fills`), or for one still larger than
    :data:`MAX_RECORDED_BODY` bytes a text preview ending in a visible marker."""
    small = compact_value(body) if may_hold_fill(raw) else body  # else not walked
    if len(raw) <= MAX_RECORDED_BODY or (small is not body and len(
            json.dumps(small, ensure_ascii=False, default=repr).encode()) <= MAX_RECORDED_BODY):
        # The whole body, but for its fillers: what the tools and scope checks read.
        return small
    head = compact(raw[:BODY_PREVIEW].decode("utf-8", errors="replace"))
    return f"{head}... [acp-fuzz: body clipped, {len(raw)} bytes in all; segments hold the text]"


def _clipped(text: str) -> str:
    """A text's head and tail around a marker that says how much was left out, and the
    length and SHA-256 of the whole (two recordings of one text can be told equal)."""
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return (f"{text[:SEGMENT_KEEP]}... [acp-fuzz: {len(text) - 2 * SEGMENT_KEEP} characters "
            f"clipped; {len(text)} in all, sha256 {digest}] ...{text[-SEGMENT_KEEP:]}")


_SLOT_ORDER = {"system": 0, "user": 1, "history": 2}


def recorded_segments(segments: list[Segment]) -> list[Segment]:
    """The segments the history keeps: all of them, whole, while their text fits in
    :data:`MAX_RECORDED_TEXT` characters (system and user slots are counted first: they are
    what the oracles judge); past that, each keeps its head and tail around a marker. At
    most :data:`MAX_RECORDED_SEGMENTS` are kept, in request order. A huge prompt's filler
    (:mod:`acp_fuzz.core.fills`) is written as its mark first: losslessly, so the oracles
    judge the rest as they would the whole."""
    segments = [Segment(s.slot, s.path, compact(s.text)) if may_hold_fill(s.text) else s
                for s in segments]
    if len(segments) <= MAX_RECORDED_SEGMENTS and \
            sum(len(s.text) for s in segments) <= MAX_RECORDED_TEXT:
        return segments
    order = sorted(range(len(segments)), key=lambda i: _SLOT_ORDER.get(segments[i].slot, 3))
    keep = sorted(order[:MAX_RECORDED_SEGMENTS])
    left = MAX_RECORDED_TEXT
    texts: dict[int, str] = {}
    for i in sorted(keep, key=lambda i: _SLOT_ORDER.get(segments[i].slot, 3)):
        text = segments[i].text
        if len(text) > max(left, 2 * SEGMENT_KEEP):
            text = _clipped(text)
        left = max(0, left - len(text))
        texts[i] = text
    out = [Segment(segments[i].slot, segments[i].path, texts[i]) for i in keep]
    dropped = len(segments) - len(keep)
    if dropped:
        out.append(Segment("other", "", f"[acp-fuzz: {dropped} more segments clipped]"))
    return out


class Gateway:
    """A local fake model endpoint that records exactly what agents send to their model.

    ``Gateway(history).start()`` listens on ``127.0.0.1`` on a free port (see :attr:`url`
    and :meth:`agent_env`) and answers OpenAI Chat and Responses, Anthropic Messages and
    Gemini requests with ``reply_text`` (schema-minimal JSON for structured-output
    requests). Each exchange is appended to :attr:`history` (assignable at any time;
    ``None`` records nothing).

    Requests are tied to the harness turn that caused them through nonces: register each
    prompt's nonce with :meth:`register_nonce` before sending it. ``side_request`` adds to
    the built-in :func:`is_side_request` test; it gets the API name, the (redacted,
    lower-cased) headers and the parsed body.

    :meth:`press` arms one session's next turn with pressure (usage near the context's
    limit, or the context-length error) to force a compaction; each exchange records what
    it did (``pressure``) and what the request was besides a turn (``side_kind``: a profile's
    rule of kind ``compaction`` names a compaction's summary request).

    With ``upstream`` (a base URL) or an ``upstream_recorder`` the gateway forwards every
    request instead of answering it; see :mod:`acp_fuzz.engine.gateway.upstream`.

    Every request must carry :attr:`token` (random unless given), or a key accepted with
    :meth:`allow_key`; others get a 401. ``require_token=False`` turns the check off, for a
    gateway that stands in for a provider behind another gateway.

    ``idle_timeout``, ``header_timeout``, ``request_timeout`` and ``max_connections``
    (:data:`IDLE_TIMEOUT`, :data:`HEADER_TIMEOUT`, :data:`REQUEST_TIMEOUT`,
    :data:`MAX_CONNECTIONS`) bound the connections (see the module docs).
    """

    def __init__(self, history: History | None = None, *, reply_text: str = "ok",
                 side_request: SidePredicate | None = None, upstream: str | None = None,
                 upstream_recorder: UpstreamRecorder | None = None, token: str | None = None,
                 require_token: bool = True, idle_timeout: float = IDLE_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._lock = threading.Lock()
        self._refusals = 0  # refused requests seen since the history was last set
        self.history = history
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        #: The per-gateway secret the agent gets as its API keys (see :meth:`agent_env`).
        self.token = token if token is not None else "acpfuzz-token-" + secrets.token_hex(16)
        self.require_token = require_token
        self._keys: list[bytes] = [self.token.encode()]
        self.reply_text = reply_text
        self.side_request = side_request
        self.upstream = upstream
        self.upstream_recorder = upstream_recorder
        self._nonces: dict[str, tuple[str, int]] = {}
        #: Pressure armed per session handle (:meth:`press`), and the handles whose pressure
        #: a request has used since.
        self._pressure: dict[str, replies.Pressure] = {}
        self._pressed: set[str] = set()
        #: Faults and holds armed for the next matching requests (:meth:`fail_next`,
        #: :meth:`hold_next`), in the order they were armed.
        self._plans: list[Plan] = []
        self._holds: list[Hold] = []  # every hold since the plans were last dropped
        self._faulted: dict[str | None, int] = {}  # requests failed, per session, since disarm
        #: Seconds a ``slow-first-byte`` fault waits before its reply; set when stopping, so
        #: that no such wait (nor a hold) outlives the gateway.
        self.slow_seconds = SLOW_SECONDS
        self._stopping = threading.Event()
        #: Model requests served, by kind: ``turn`` (tied to a harness turn, not a side
        #: request), ``side`` (a side request by the built-in or the profile's predicate)
        #: and ``untied`` (not a side request by any predicate, yet no registered nonce in
        #: it: recorded as a side request, so no oracle judges it). A correct profile on a
        #: well-behaved agent keeps ``untied`` at 0. ``refused``: requests without the token.
        #: ``unrecorded``: refused requests (for any reason) past :data:`MAX_RECORDED_REFUSALS`
        #: in a history, counted only; ``connections_refused``: past :data:`MAX_CONNECTIONS`
        #: with every slot proven; ``connections_evicted``: connections without the token yet
        #: closed to make room for a newcomer (see the module docs).
        self.counts: dict[str, int] = {"turn": 0, "side": 0, "untied": 0, "refused": 0,
                                       "unrecorded": 0, "connections_refused": 0,
                                       "connections_evicted": 0}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Gateway:
        """Bind and serve in a background thread. Returns ``self``."""
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.gateway = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="acp-fuzz-gateway",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        self._drop_plans()  # a held request must not keep the shutdown waiting
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def history(self) -> History | None:
        """Where exchanges are recorded (assignable; ``None`` records nothing). Setting it
        starts a new count of refused requests toward :data:`MAX_RECORDED_REFUSALS`."""
        return self._history

    @history.setter
    def history(self, history: History | None) -> None:
        with self._lock:
            self._history = history
            self._refusals = 0

    @property
    def connections(self) -> int:
        """Connections being served now (0 when not running)."""
        server = self._server
        return server.active if server is not None else 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the gateway must be started)."""
        if self._server is None:
            raise RuntimeError("the gateway is not running; call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def agent_env(self) -> dict[str, str]:
        """Environment variables that point OpenAI, Anthropic and Gemini clients here, with
        :attr:`token` as every key (:data:`KEY_VARIABLES`)."""
        url = self.url
        return {
            "OPENAI_BASE_URL": url + "/v1",
            "ANTHROPIC_BASE_URL": url,
            "GOOGLE_GEMINI_BASE_URL": url,
            "ACP_FUZZ_MODEL_URL": url,
            **dict.fromkeys(KEY_VARIABLES, self.token),
        }

    def allow_key(self, key: str) -> None:
        """Accept ``key`` as well as :attr:`token`: a real key the user passes to the agent on
        purpose (``--pass-env``, for ``--model-upstream``) replaces the token in its
        environment, and its requests must still get through."""
        if key:
            with self._lock:
                self._keys.append(key.encode())

    def _authorized(self, handler: _Handler) -> bool:
        """Does the request carry an accepted key? Compared in constant time."""
        if not self.require_token:
            return True
        offered = []
        auth = handler.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            offered.append(auth[7:].strip())
        offered += [v.strip() for h in KEY_HEADERS for v in handler.headers.get_all(h) or ()]
        _path, _sep, query = handler.path.partition("?")
        offered += [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "key"]
        with self._lock:
            keys = list(self._keys)
        # Every comparison is made, so timing does not tell which key was close.
        hits = [hmac.compare_digest(o.encode(), k) for o in offered for k in keys]
        return any(hits)

    # -- nonces --------------------------------------------------------------------------------

    def register_nonce(self, nonce: str, session: str, turn: int) -> None:
        """Tie requests whose newest user turn contains ``nonce`` to ``(session, turn)``."""
        if not NONCE_RE.fullmatch(nonce):
            raise ValueError(f"not a harness nonce: {nonce!r} (expected {NONCE_RE.pattern})")
        with self._lock:
            self._nonces[nonce] = (session, turn)

    def forget_nonces(self) -> None:
        """Drop every registered nonce, any pressure still armed (:meth:`press`), and every
        fault and hold still armed (:meth:`fail_next`, :meth:`hold_next`; a held request
        is let go)."""
        with self._lock:
            self._nonces.clear()
            self._pressure.clear()
            self._pressed.clear()
        self._drop_plans()

    # -- forcing a compaction ------------------------------------------------------------------

    def press(self, session: str, kind: str, *, tokens: int, window: int) -> None:
        """Arm pressure for session ``session`` (a logical handle): the next model turn tied
        to it (a request of a generating endpoint, tied by its nonce, not a side request) gets
        a reply that says its context is nearly full. ``kind`` ``"usage"``: a normal reply
        whose usage reports ``tokens`` input tokens; ``"overflow"``: the API's context-length
        error, saying ``tokens`` > ``window`` (``tokens`` is then one more than ``window``
        when not larger). Used once; its exchange is recorded with ``pressure`` set to
        ``kind``. A forwarding gateway (``upstream``) applies none: the real model answers."""
        if kind not in ("usage", "overflow"):
            raise ValueError(f"pressure must be usage or overflow, not {kind!r}")
        if kind == "overflow":
            tokens = max(tokens, window + 1)
        with self._lock:
            self._pressure[session] = replies.Pressure(kind, tokens, window)
            self._pressed.discard(session)

    def release(self, session: str) -> bool:
        """Disarm the pressure of ``session``; whether a request used it since :meth:`press`."""
        with self._lock:
            self._pressure.pop(session, None)
            used = session in self._pressed
            self._pressed.discard(session)
            return used

    def _take_pressure(self, api: str, path: str, tie: tuple[str, int] | None,
                       side: bool) -> replies.Pressure | None:
        if tie is None or side or api not in replies.PRESSED_APIS \
                or ":countTokens" in path.partition("?")[0]:
            return None
        with self._lock:
            pressure = self._pressure.pop(tie[0], None)
            if pressure is not None:
                self._pressed.add(tie[0])
            return pressure

    # -- faults and holds ----------------------------------------------------------------------

    def fail_next(self, kind: Fault | str, count: int = 1, session: str | None = None) -> None:
        """Answer the next ``count`` model turns of ``session`` (a logical handle: requests
        of a generating endpoint tied to it by their nonce, not side requests) with the
        failure ``kind`` (:class:`~acp_fuzz.engine.gateway.faults.Fault`) instead of a reply;
        the requests after them are answered as usual. ``session`` ``None``: the next
        ``count`` requests of a generating endpoint, tied or not. Each exchange is recorded
        with ``fault`` set. A forwarding gateway (``upstream``) applies none."""
        fault = Fault(kind)
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        with self._lock:
            self._plans.append(Plan(session, fault=fault, count=count))

    def hold_next(self, session: str | None = None, bound: float = HOLD_BOUND) -> Hold:
        """Hold the next model turn of ``session`` (as :meth:`fail_next` matches it) open,
        unanswered, until the returned :class:`~acp_fuzz.engine.gateway.faults.Hold` is
        released or ``bound`` seconds pass; then it is answered as usual, and recorded with
        ``held`` ``"released"`` or ``"expired"``. The gateway's stop, and
        :meth:`forget_nonces`, let every hold go."""
        hold = Hold(session, bound)
        with self._lock:
            self._plans.append(Plan(session, hold=hold))
            self._holds.append(hold)
        return hold

    def disarm(self, session: str | None = None) -> int:
        """Drop the faults and holds still armed for ``session`` (a held request is let go);
        how many requests faults armed for it failed since its last disarm."""
        with self._lock:
            mine = [p for p in self._plans if p.session == session]
            self._plans = [p for p in self._plans if p.session != session]
            used = self._faulted.pop(session, 0)
        for p in mine:
            if p.hold is not None:
                p.hold.release()
        return used

    def _drop_plans(self) -> None:
        with self._lock:
            holds, self._holds = self._holds, []
            self._plans = []
            self._faulted.clear()
        for hold in holds:  # armed, or holding a request now
            hold.release()

    def _take_plan(self, api: str, path: str, tie: tuple[str, int] | None,
                   side: bool) -> Plan | None:
        """The first armed plan this request matches (used once more, dropped when spent)."""
        if api not in replies.PRESSED_APIS or ":countTokens" in path.partition("?")[0]:
            return None
        with self._lock:
            for plan in self._plans:
                if plan.session is None or (tie is not None and not side
                                            and tie[0] == plan.session):
                    plan.used += 1
                    if plan.used >= plan.count:
                        self._plans.remove(plan)
                    if plan.fault is not None:
                        self._faulted[plan.session] = self._faulted.get(plan.session, 0) + 1
                    return plan
        return None

    def _find_tie(self, segments: list[Segment], fallback: bool) -> tuple[str, int] | None:
        with self._lock:
            nonces = dict(self._nonces)
        if not nonces:
            return None
        slots = ("user", "history") if fallback else ("user",)
        for slot in slots:
            # The newest occurrence wins: segments are in conversation order.
            for seg in reversed([s for s in segments if s.slot == slot]):
                for found in reversed(NONCE_RE.findall(seg.text)):
                    if found in nonces:
                        return nonces[found]
        return None

    # -- serving -------------------------------------------------------------------------------

    def _serve(self, handler: _Handler) -> None:
        method, path = handler.command, handler.path
        header_pairs = list(handler.headers.items())
        if not self._authorized(handler):
            # Unread, the body would be parsed as the next request: close instead of reading
            # what a stranger sends.
            handler.close_connection = True
            with self._lock:
                self.counts["refused"] += 1
            message = "acp-fuzz gateway: this request does not carry the run's token"
            reply = replies._json(401, {"error": {"type": "authentication_error",
                                                  "message": message}})
            self._refused(method, path, header_pairs, 401, message)
            self._write(handler, 401, reply.content_type, dict(reply.headers), reply.body)
            return
        if not path.startswith("/"):
            # Absolute-form (http://host/x), authority-ish (@host/x) or asterisk-form: not a
            # path. Forwarded, it could pick the upstream's host; answered, it means nothing.
            self._refuse(handler, header_pairs, 400,
                         "the request target must be a path (origin-form), such as /v1/messages")
            return
        api = detect_api(method, path)
        headers = redact_headers(header_pairs)
        try:
            raw = handler._read_body()
            body = parse_body(raw)
        except BodyError as exc:
            self._refuse(handler, header_pairs, exc.status, str(exc))
            return
        segments = split_request(api, body)
        kind = self._side_kind(api, path, headers, body)
        side = kind is not None
        tie = self._find_tie(segments, user_turn_is_tool_result(api, body))
        if api in _MODEL_APIS:
            with self._lock:
                self.counts["side" if side else "turn" if tie is not None else "untied"] += 1
        if tie is None:
            side = True
            # A model request that no rule calls a side request and no nonce ties: untied,
            # recorded as such so that reports and cassettes can show it as evidence.
            kind = kind or ("untied" if api in _MODEL_APIS else "side")
        if self.upstream is not None or self.upstream_recorder is not None:
            self._forward(handler, api, method, path, header_pairs, headers,
                          recorded_body(body, raw), raw, recorded_segments(segments), tie, side,
                          kind)
            return
        pressure = self._take_pressure(api, path, tie, side)
        plan = self._take_plan(api, path, tie, side)
        # A hold waits here, in this request's own thread, for its release or its bound.
        held = plan.hold._hold() if plan is not None and plan.hold is not None else None
        fault = plan.fault if plan is not None else None
        reply = replies.build_reply(api, method, path, body, raw, self.reply_text, pressure)
        kept = recorded_body(body, raw), recorded_segments(segments)

        def record(status: int, text: str) -> None:
            self._record(api, method, path, headers, kept[0], kept[1], tie, status, text, side,
                         side_kind=kind, pressure=pressure.kind if pressure is not None
                         else None, fault=fault, held=held)

        if fault is not None and fault is not Fault.SLOW_FIRST_BYTE:
            self._serve_fault(handler, fault, api, reply, record)
            return
        if fault is Fault.SLOW_FIRST_BYTE:
            self._stopping.wait(self.slow_seconds)  # the gateway's stop cuts it short
        record(reply.status, reply.text)
        self._write(handler, reply.status, reply.content_type, dict(reply.headers), reply.body)

    def _serve_fault(self, handler: _Handler, fault: Fault, api: str, reply: replies.Reply,
                     record: Callable[[int, str], None]) -> None:
        """Answer with ``fault`` instead of ``reply`` (recorded first, like every answer)."""
        if fault is Fault.CONNECTION_CLOSED:
            record(0, "")
            handler.close_connection = True  # the request was read whole: nothing is left
            return
        if fault is Fault.STREAM_CUT:
            record(reply.status, "")
            self._write_cut(handler, reply)
            return
        failed = not_json() if fault is Fault.NOT_JSON else error_reply(api, fault)
        record(failed.status, "")
        self._write(handler, failed.status, failed.content_type, dict(failed.headers),
                    failed.body)

    @staticmethod
    def _write_cut(handler: _Handler, reply: replies.Reply) -> None:
        """``reply``, cut short and the connection closed: a stream after its first event
        (chunked, so the missing last chunk shows), any other body after its first half
        (its ``Content-Length`` says the whole)."""
        handler.close_connection = True
        body = reply.body
        stream = reply.content_type == "text/event-stream"
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", reply.content_type)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if stream:
                handler.send_header("Transfer-Encoding", "chunked")
            else:
                handler.send_header("Content-Length", str(len(body)))
            handler.send_header("Connection", "close")
            handler.end_headers()
            if stream:
                sep = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
                first = body.split(sep, 1)[0] + sep
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
            else:
                handler.wfile.write(body[:len(body) // 2])
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent went away; the connection closes either way

    def _side_kind(self, api: str, path: str, headers: Mapping[str, str],
                   body: Any) -> str | None:
        """What a request is besides a turn: ``"side"`` by the built-in test or the profile's
        predicate, the kind of the profile's matching rule (``"compaction"``), or ``None``."""
        if is_side_request(api, headers, body):
            return "side"
        if self.side_request is None:
            return None
        # A profile file's rules see the path too, and say their kind (agent_setup.SideTest).
        with_kind = getattr(self.side_request, "side_kind", None)
        with_path = getattr(self.side_request, "request_is_side", None)
        try:
            if with_kind is not None:
                found = with_kind(api, path, headers, body)
                return found if isinstance(found, str) else None
            if with_path is not None:
                return "side" if with_path(api, path, headers, body) else None
            return "side" if self.side_request(api, headers, body) else None
        except Exception:
            return None  # a broken predicate must not take the gateway down

    def _forward(self, handler: _Handler, api: str, method: str, path: str,
                 header_pairs: list[tuple[str, str]], headers: dict[str, str], body: Any,
                 raw: bytes, segments: list[Segment], tie: tuple[str, int] | None,
                 side: bool, kind: str | None) -> None:
        recorder = self.upstream_recorder
        base = self.upstream or (recorder.upstream if recorder else None)
        tie_key = json.dumps([tie[0] if tie else None, tie[1] if tie else None, side])
        try:
            resp = forward(base or "http://upstream.invalid", method, path, dict(header_pairs),
                           raw, recorder=recorder, tie=tie_key)
        except UpstreamError as exc:
            reply = replies._json(502, {"error": {"type": "upstream_error", "message": str(exc)}})
            self._record(api, method, path, headers, body, segments, tie, 502, "", side,
                         upstream=True, side_kind=kind)
            self._write(handler, 502, reply.content_type, {}, reply.body)
            return
        ctype = next((v for k, v in resp.headers if k.lower() == "content-type"), "")
        cenc = next((v for k, v in resp.headers if k.lower() == "content-encoding"), "")
        text = replies.extract_reply_text(api, ctype, resp.body, cenc)
        self._record(api, method, path, headers, body, segments, tie, resp.status, text, side,
                     upstream=True, side_kind=kind)
        passed = {k: v for k, v in resp.headers
                  if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                       "content-type", "keep-alive", "server", "date")}
        self._write(handler, resp.status, ctype or "application/octet-stream", passed,
                    resp.body)

    def _refuse(self, handler: _Handler, header_pairs: list[tuple[str, str]], status: int,
                message: str) -> None:
        # The unread rest of the request would be parsed as the next one: close.
        handler.close_connection = True
        reply = replies._json(status, {"error": {"type": "invalid_request_error",
                                                 "message": message}})
        self._refused(handler.command, handler.path, header_pairs, status, message)
        self._write(handler, status, reply.content_type, dict(reply.headers), reply.body)

    def _refused(self, method: str, path: str, header_pairs: list[tuple[str, str]],
                 status: int, reason: str) -> None:
        """Record a refused request in brief (see the module docs), or only count it."""
        with self._lock:
            history = self._history
            if history is None:
                return
            self._refusals += 1
            n = self._refusals
            if n > MAX_RECORDED_REFUSALS:
                self.counts["unrecorded"] += 1
                return
        if n == MAX_RECORDED_REFUSALS:
            reason += (" [acp-fuzz: the last refused request recorded here; later ones are "
                       "counted, not recorded]")
        headers = {_clip(k, _BRIEF_TEXT): _clip(v, _BRIEF_TEXT)
                   for k, v in redact_headers(header_pairs[:_BRIEF_HEADERS]).items()}
        if len(header_pairs) > _BRIEF_HEADERS:
            headers["x-acp-fuzz-omitted"] = f"{len(header_pairs) - _BRIEF_HEADERS} more headers"
        exchange = ModelExchange(
            api=detect_api(method, path), method=_clip(method, _BRIEF_TEXT),
            path=_clip(redact_path(path), _BRIEF_PATH), headers=headers, body=None,
            segments=(), session=None, turn=None, side=True, status=status, reply_text=reason,
            upstream=False, side_kind="side")
        history.append("model", exchange.to_wire())

    def _record(self, api: str, method: str, path: str, headers: Mapping[str, str], body: Any,
                segments: list[Segment], tie: tuple[str, int] | None, status: int, text: str,
                side: bool, *, upstream: bool = False, side_kind: str | None = None,
                pressure: str | None = None, fault: str | None = None,
                held: str | None = None) -> None:
        history = self.history
        if history is None:
            return
        exchange = ModelExchange(
            api=api, method=method, path=redact_path(path), headers=headers, body=body,
            segments=tuple(segments), session=tie[0] if tie else None,
            turn=tie[1] if tie else None, side=side, status=status, reply_text=text,
            upstream=upstream, side_kind=side_kind, pressure=pressure, fault=fault, held=held)
        history.append("model", exchange.to_wire())

    @staticmethod
    def _write(handler: _Handler, status: int, content_type: str, headers: Mapping[str, str],
               body: bytes) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(body)))
            if handler.close_connection:
                handler.send_header("Connection", "close")
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(body)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the agent went away; nothing left to tell it
