"""The stdio transport: one ACP agent process, spoken to in NDJSON JSON-RPC 2.0.

:class:`AgentProcess` spawns an agent in its own process group, writes requests to its stdin
and reads its stdout and stderr on background threads. Two parts are its own classes, so
``tests/cover`` reaches them without a process: the line framing
(:class:`acp_fuzz.core.lines.LineAssembler`, pure) and the request correlation
(:class:`Correlation`). Everything that crosses the pipes is
appended to a :class:`~acp_fuzz.core.history.History`:

* every line in either direction is one ``acp`` event (``{"dir": "send"|"recv", "msg": ...}``).
  A received line that is not a JSON object keeps ``msg: None`` and carries ``raw`` (the line
  decoded with replacement characters, bounded) and ``error``: ``oversize`` (longer than
  ``max_line_bytes``; ``size`` gives its length), ``invalid-utf8``, ``invalid-json``,
  ``not-object`` or ``partial-line`` (no newline before EOF or :meth:`AgentProcess.close`).
  A response that matches no request in flight is recorded with ``error`` set to
  ``unknown-id``, ``duplicate-id`` (a second answer to the same id) or ``late`` (an answer to
  a request that already timed out);
* the spawn, exit and any signals sent are ``process`` events;
* stderr arrives as ``stderr`` events, up to ``stderr_record_limit`` bytes per process;
* notifications from the agent (messages with a ``method`` and no ``id``) are recorded up to
  ``max_recorded_notifications`` per process and ``max_recorded_notification_bytes`` of their
  lines (if set; weighed as below); past either they are counted, not kept, and one
  ``process`` event ``notifications-capped`` marks where recording stopped (a final
  ``notifications-dropped`` event at exit or close gives the count). Without this, an agent
  that floods ``session/update`` would grow the history, and the harness, without bound.
* the same holds, with bounds on by default, for three more kinds of line (``KIND-capped``
  where recording stopped, ``KIND-dropped`` with the ``count`` at exit or close):
  ``client-requests``, the agent's own requests and the answers the client handler gave
  them (:data:`MAX_RECORDED_CLIENT_REQUESTS`, :data:`MAX_RECORDED_CLIENT_REQUEST_BYTES`,
  request and answer lines counted together; every request is still answered, and an answer
  is recorded only with its request: ``answers`` in the ``-dropped`` event counts those left
  out for the byte budget, ``unanswered`` the requests that came when no answer could be
  sent any more); ``stray-responses``, answers to no request in flight (``unknown-id``,
  ``duplicate-id``, ``late``; :data:`MAX_RECORDED_STRAY_RESPONSES`,
  :data:`MAX_RECORDED_STRAY_BYTES`); ``bad-lines``, lines that are not JSON-RPC messages
  (``oversize``, ``invalid-*``, ``not-object``) or are malformed ones
  (:data:`MAX_RECORDED_BAD_LINES`, :data:`MAX_RECORDED_BAD_BYTES`). Without these, 60,000
  answers to unknown ids or 300 reads of a 1 MiB file took the harness past 300 MB;
* every byte budget weighs a line by what it costs parsed, not by its length alone
  (:func:`line_weight`): ``[{},{},...]`` is 3 bytes an element on the wire and 72 in memory;
* the agent's requests wait for the client handler, and their answers for the agent to read
  its stdin, in a bounded backlog (:data:`MAX_CLIENT_BACKLOG` requests,
  :data:`MAX_CLIENT_BACKLOG_BYTES` of requests not yet handled, :data:`MAX_UNSENT_ANSWER_BYTES`
  of answers not yet written). When it is full, stdout is not read until there is room (so an
  agent that writes requests and reads no answer is stopped by its own full pipe, not by the
  harness's memory), and one ``process`` event ``client-requests-backlog`` says so.

The transport never trusts the agent: over-long lines are discarded in chunks and never held
whole, a flood of notifications cannot starve or block responses, a request to a process that
died returns :attr:`Reply.outcome` ``"exited"`` at once rather than waiting for its timeout,
and :meth:`AgentProcess.close` kills the whole process group, so no child of the agent
outlives it even if it keeps the pipes open.

Typical use::

    agent = AgentProcess(argv, env=sandbox.build_env(), cwd=sandbox.root, history=history,
                         client_handler=ClientPolicy([session_cwd]))  # engine.client_policy
    agent.start()
    try:
        reply = agent.request("initialize", {"protocolVersion": 1}, timeout=30)
    finally:
        agent.close()
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import json
import os
import queue
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from acp_fuzz.core.errors import AgentStartError, RpcError
from acp_fuzz.core.fills import compact_value, may_hold_fill
from acp_fuzz.core.history import History
from acp_fuzz.core.lines import BAD_LINE_MAX, DECODER, LineAssembler, parse_line

__all__ = [
    "AgentProcess",
    "AgentStartError",
    "ClientHandler",
    "Expectation",
    "Pending",
    "Reply",
    "RpcError",
    "kill_all_agents",
    "line_weight",
]

#: Process groups of agents started and not yet closed, for a forced exit (a second Ctrl-C)
#: that must still leave no orphan behind.
_LIVE_GROUPS: set[int] = set()
_LIVE_LOCK = threading.Lock()


def kill_all_agents() -> int:
    """SIGKILL the process group of every agent that is still open; return how many.

    For emergencies only (a forced exit): it skips the orderly shutdown of :meth:`close`."""
    with _LIVE_LOCK:
        groups = list(_LIVE_GROUPS)
        _LIVE_GROUPS.clear()
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return len(groups)

def _group_has_live_member(pgid: int) -> bool:
    """Does process group ``pgid`` hold a process that is not a zombie? Read from /proc
    (``killpg(pgid, 0)`` also counts zombies); without /proc, whatever ``killpg`` says."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


#: A handler for requests the agent sends to the client: ``handler(method, params)`` returns
#: the JSON-serialisable result, or raises :class:`RpcError` to answer with an error.
ClientHandler = Callable[[str, Any], Any]

Outcome = Literal["ok", "error", "timeout", "exited"]
#: A line for the writer thread: the line, its event (None: not recorded), the id of the
#: harness's request it carries, and for an answer to the agent its size (else 0).
_Out = tuple[bytes, dict[str, Any] | None, int | None, int]

_READ_CHUNK = 64 * 1024
#: How much of an undecodable / unparsable line is kept in its event.
_BAD_LINE_MAX = BAD_LINE_MAX
#: What is recorded of the agent's own requests and of their answers, per process (see the
#: module docs). Generous for real agents: a turn asks for a permission or a file or two.
MAX_RECORDED_CLIENT_REQUESTS = 2_000
MAX_RECORDED_CLIENT_REQUEST_BYTES = 8 * 1024 * 1024
#: What is recorded of answers to no request in flight, per process: evidence of a bug after
#: the first one, never a conversation to judge.
MAX_RECORDED_STRAY_RESPONSES = 1_000
MAX_RECORDED_STRAY_BYTES = 4 * 1024 * 1024
#: What is recorded of lines that are not (well-formed) JSON-RPC messages, per process.
MAX_RECORDED_BAD_LINES = 1_000
MAX_RECORDED_BAD_BYTES = 4 * 1024 * 1024
#: The agent's requests that may wait for an answer at once (queued for the client handler,
#: being handled, or answered but not yet written), and the weight (:func:`line_weight`) of
#: those not yet handled; past either, stdout is read again only once there is room. Real
#: agents have a handful in flight; the count is high so that an agent that fires many small
#: requests at once is not slowed down (its next answer to the harness is read behind them);
#: a request line is at most ``max_line_bytes``, so one always fits.
MAX_CLIENT_BACKLOG = 4096
MAX_CLIENT_BACKLOG_BYTES = 8 * 1024 * 1024
#: Bytes of answers to the agent's requests waiting for the writer (an agent that does not
#: read its stdin); past it the client handler waits. One answer is at most about 6 MiB (a
#: 1 MiB file read, every character escaped), so one always fits.
MAX_UNSENT_ANSWER_BYTES = 8 * 1024 * 1024
#: Bounded waits inside close(): these only matter if something is badly wrong (a process in
#: uninterruptible sleep, a thread stuck on a pipe held by an escaped grandchild).
_TERM_WAIT = 1.0
_KILL_WAIT = 5.0
_JOIN_WAIT = 5.0
#: How long a sandboxed agent's PID namespace may take to empty after the agent exited.
_TEARDOWN_WAIT = 0.5


@dataclass(frozen=True, slots=True)
class Reply:
    """How a request ended.

    ``outcome`` is ``"ok"`` (``result`` holds the result), ``"error"`` (``error`` holds the
    JSON-RPC error object; a non-object ``error`` value is wrapped as ``{"data": value}``),
    ``"timeout"`` (no answer in time; a later answer is recorded with ``error: "late"``) or
    ``"exited"`` (the process exited, closed stdout or stdin, or was closed, before answering).
    ``id`` is the request id, or ``None`` if the request was never sent."""

    outcome: Outcome
    result: Any = None
    error: dict[str, Any] | None = None
    id: int | None = None


_EXITED = Reply("exited")


class _Slot:
    """One request in flight: the waiter blocks on ``event``; the reader fills ``reply``."""

    __slots__ = ("event", "id", "reply")

    def __init__(self, rid: int) -> None:
        self.id = rid
        self.event = threading.Event()
        self.reply: Reply = _EXITED

    def resolve(self, reply: Reply) -> None:
        self.reply = reply
        self.event.set()


class Correlation:
    """Which answer belongs to which request: the ids acp-fuzz gave, the requests still in
    flight, the ones given up on (their answer comes *late*), and the ids of requests sent
    raw (answered without a :class:`Reply`). Not locked itself: :class:`AgentProcess` holds
    its lock around every call.

    :meth:`answer` classifies an answer's id: the waiting slot, or a marker for the
    history (``late``, ``duplicate-id``, ``unknown-id``), or a stray error (JSON-RPC's
    answer, with id ``null``, to a line it could not parse)."""

    def __init__(self) -> None:
        self.next_id = 1
        self.pending: dict[int, _Slot] = {}
        self.timed_out: set[int] = set()
        self.raw_ids: dict[str, bool] = {}  # id key -> answered, for requests sent raw

    def open(self) -> tuple[int, _Slot]:
        """A new request id and the slot its answer will fill."""
        rid = self.next_id
        self.next_id += 1
        slot = self.pending[rid] = _Slot(rid)
        return rid, slot

    def forget(self, rid: int) -> None:
        """A request that was never sent (it could not be encoded)."""
        self.pending.pop(rid, None)

    def give_up(self, rid: int, slot: _Slot) -> bool:
        """The waiter timed out: stop waiting for ``rid`` (an answer after this is ``late``).
        False when the answer came first (read it from the slot)."""
        if self.pending.get(rid) is not slot:
            return False
        del self.pending[rid]
        self.timed_out.add(rid)
        return True

    def sent_raw(self, rid: Any) -> None:
        self.raw_ids.setdefault(_id_key(rid), False)

    def answer(self, rid: Any, is_error: bool) -> tuple[_Slot | None, str | None, bool]:
        """(the slot to resolve, the marker to record, whether it is a stray error)."""
        if type(rid) is int and rid in self.pending:
            return self.pending.pop(rid), None, False
        key = _id_key(rid)
        answered = self.raw_ids.get(key)
        if answered is not None:
            self.raw_ids[key] = True
            return None, "duplicate-id" if answered else None, False
        if type(rid) is int and rid in self.timed_out:
            self.timed_out.discard(rid)
            return None, "late", False
        if type(rid) is int and 1 <= rid < self.next_id:
            return None, "duplicate-id", False
        if rid is None and is_error:
            return None, None, True
        return None, "unknown-id", False

    def take_one(self, rid: int) -> _Slot | None:
        return self.pending.pop(rid, None)

    def take_all(self) -> dict[int, _Slot]:
        pending, self.pending = self.pending, {}
        return pending


def line_weight(line: bytes) -> int:
    """About how many bytes ``line`` (one JSON text) takes once parsed: its length, plus 64 a
    container and 24 a separator (a dict or list costs 56-64 bytes in CPython, a pointer to
    each item 8, a float 24, a short string about 50). Within about 2x of what ``json.loads``
    allocates, whatever the shape (short strings, empty dicts, numbers); text with characters
    past U+FFFF can take up to 4x its length. Counted in C, at the speed of a copy."""
    return len(line) + 64 * (line.count(b"{") + line.count(b"[")) + 24 * (
        line.count(b",") + line.count(b":"))


class _Budget:
    """What is recorded of one kind of line from the agent: the first ``limit`` lines and
    ``limit_bytes`` bytes of them (``None``: no bound). Past either, every later line of the
    kind is counted, not recorded (``dropped``), so the history says where recording stopped."""

    __slots__ = ("dropped", "extra", "kind", "limit", "limit_bytes", "lines", "size")

    def __init__(self, kind: str, limit: int | None, limit_bytes: int | None) -> None:
        self.kind = kind
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.lines = 0  # recorded
        self.size = 0  # bytes recorded
        self.dropped = 0
        #: Further counts for the ``-dropped`` event (``client-requests``: answers, unanswered).
        self.extra: dict[str, int] = {}

    def fits(self, size: int) -> bool:
        return self.limit_bytes is None or self.size + size <= self.limit_bytes

    def take(self, size: int) -> bool:
        """Record one more line of ``size`` bytes? Counted either way."""
        if not self.dropped and (self.limit is None or self.lines < self.limit) \
                and self.fits(size):
            self.lines += 1
            self.size += size
            return True
        self.dropped += 1
        return False

    def limits(self) -> dict[str, int | None]:
        return {"limit": self.limit, "limit_bytes": self.limit_bytes}


_DECODER = DECODER


def _encode(msg: Any) -> bytes:
    try:
        text = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8 encoded; \u escapes are still valid JSON.
        text = json.dumps(msg, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return text.encode("ascii") + b"\n"


def _id_key(rid: Any) -> str:
    # JSON ids compare by type and value ("1" is not 1, true is not 1).
    return json.dumps(rid, sort_keys=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _bytes_available(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("@i", buf)[0])


class Pending:
    """A request in flight (from :meth:`AgentProcess.send_request`)."""

    def __init__(self, agent: AgentProcess, rid: int | None, slot: _Slot | None) -> None:
        self._agent = agent
        self.id = rid
        self._slot = slot

    @property
    def done(self) -> bool:
        """Whether the answer has arrived (or the request can no longer get one)."""
        return self._slot is None or self._slot.event.is_set()

    def wait(self, timeout: float, *, give_up: bool = True) -> Reply:
        """Wait up to ``timeout`` seconds for the answer (see :meth:`AgentProcess.request`).

        With ``give_up=False`` a request not answered in time stays in flight: the reply is
        ``"timeout"`` but a later :meth:`wait` can still get its answer."""
        if self.id is None or self._slot is None:
            return _EXITED
        if not give_up:
            if self._slot.event.wait(timeout):
                return self._slot.reply
            return Reply("timeout", id=self.id)
        return self._agent._wait(self.id, self._slot, timeout)


class Expectation:
    """A notification awaited from the agent (from :meth:`AgentProcess.expect`).

    ACP v2 ends a turn with a ``state_update`` notification rather than with the answer to
    ``session/prompt``, so the runner waits for a notification as it waits for a reply."""

    def __init__(self, agent: AgentProcess, match: Callable[[str, Any], bool]) -> None:
        self._agent = agent
        self.match = match
        self.event = threading.Event()
        self.reply: Reply = _EXITED

    def resolve(self, reply: Reply) -> None:
        self.reply = reply
        self.event.set()

    def wait(self, timeout: float, *, give_up: bool = True) -> Reply:
        """Wait up to ``timeout`` seconds: ``"ok"`` with the notification's ``params`` as
        ``result``, ``"exited"``, or ``"timeout"``. With ``give_up`` (the default) a timeout
        stops watching; otherwise a later :meth:`wait` may still see the notification."""
        if self.event.wait(timeout):
            return self.reply
        if give_up:
            self.cancel()
        return Reply("timeout")

    def cancel(self) -> None:
        """Stop watching (idempotent)."""
        self._agent._unwatch(self)


class AgentProcess:
    """One agent process and the JSON-RPC conversation with it.

    Args:
        argv: the command; ``argv[0]`` is looked up on ``env["PATH"]``.
        env: the complete environment (nothing is inherited; see
            :meth:`acp_fuzz.engine.process.sandbox.Sandbox.build_env`).
        cwd: the process working directory (not necessarily a session ``cwd``).
        history: where events are recorded, or ``None`` to record nothing. Assignable, e.g.
            to start a new history for the next run while the process keeps running.
        generation: recorded in ``process`` and ``stderr`` events (0 for the first spawn in a
            run, +1 per restart).
        client_handler: answers requests from the agent (``session/request_permission``,
            ``fs/*``, ...). ``None`` answers every such request with ``-32601``. It runs on
            one worker thread, so it may block without stalling the reading of stdout. If it
            has a ``sent(method, params)`` method, that is called with every request and
            notification queued for the agent, before it is written (so a client policy
            knows about a ``session/cancel``; see
            :class:`acp_fuzz.engine.process.client_policy.ClientPolicy`).
        max_line_bytes: the longest stdout line accepted; longer lines are discarded.
        stderr_tail_bytes: how much of the end of stderr :attr:`stderr_tail` keeps.
        stderr_record_limit: how many stderr bytes are recorded as events in total.
        max_recorded_notifications: how many notifications from the agent are recorded as
            ``acp`` events; the rest are only counted (:attr:`dropped_notifications`).
            ``None`` (the default) records them all; :class:`acp_fuzz.engine.campaign.runner.Run`
            sets a cap.
        max_recorded_notification_bytes: the same cap, on the total size of their lines
            (each weighed by :func:`line_weight`).
        max_recorded_client_requests, max_recorded_client_request_bytes: the same for the
            agent's requests and their answers (the module's constants by default).
        max_recorded_stray_responses, max_recorded_stray_bytes: the same for answers to no
            request in flight.
        max_recorded_bad_lines, max_recorded_bad_bytes: the same for lines that are not
            well-formed JSON-RPC messages.
        max_client_backlog, max_client_backlog_bytes, max_unsent_answer_bytes: the backlog of
            the agent's requests (see the module docs).
        command: what is really executed, when it is not ``argv``: ``argv`` wrapped by a
            sandbox (:func:`acp_fuzz.engine.process.sandbox.agent_command`). ``argv`` is what is
            recorded.
        sandbox: how the process is confined (``"bwrap pid"``, ...), for the spawn event.

    All methods are thread-safe; :meth:`request` may be called from many threads at once.
    Also usable as a context manager (``__exit__`` calls :meth:`close`).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        history: History | None,
        generation: int = 0,
        client_handler: ClientHandler | None = None,
        max_line_bytes: int = 8 * 1024 * 1024,
        stderr_tail_bytes: int = 64 * 1024,
        stderr_record_limit: int = 1024 * 1024,
        max_recorded_notifications: int | None = None,
        max_recorded_notification_bytes: int | None = None,
        max_recorded_client_requests: int | None = MAX_RECORDED_CLIENT_REQUESTS,
        max_recorded_client_request_bytes: int | None = MAX_RECORDED_CLIENT_REQUEST_BYTES,
        max_recorded_stray_responses: int | None = MAX_RECORDED_STRAY_RESPONSES,
        max_recorded_stray_bytes: int | None = MAX_RECORDED_STRAY_BYTES,
        max_recorded_bad_lines: int | None = MAX_RECORDED_BAD_LINES,
        max_recorded_bad_bytes: int | None = MAX_RECORDED_BAD_BYTES,
        max_client_backlog: int = MAX_CLIENT_BACKLOG,
        max_client_backlog_bytes: int = MAX_CLIENT_BACKLOG_BYTES,
        max_unsent_answer_bytes: int = MAX_UNSENT_ANSWER_BYTES,
        command: Sequence[str] | None = None,
        sandbox: str = "none",
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.argv = list(argv)
        self.command = list(command) if command is not None else list(argv)
        self.sandbox = sandbox
        self.env = dict(env)
        self.cwd = cwd
        self.history = history
        self.generation = generation
        self.client_handler = client_handler
        self.max_line_bytes = max_line_bytes
        self.stderr_tail_bytes = stderr_tail_bytes
        self.stderr_record_limit = stderr_record_limit
        self.max_recorded_notifications = max_recorded_notifications
        self.max_recorded_notification_bytes = max_recorded_notification_bytes
        # Recording budgets. The reader thread alone uses all but the client requests' one,
        # which the client handler shares (under self._lock) for the answers.
        self._notes = _Budget("notifications", max_recorded_notifications,
                              max_recorded_notification_bytes)
        self._asks = _Budget("client-requests", max_recorded_client_requests,
                             max_recorded_client_request_bytes)
        self._asks.extra.update(answers=0, unanswered=0)
        self._strays = _Budget("stray-responses", max_recorded_stray_responses,
                               max_recorded_stray_bytes)
        self._bad = _Budget("bad-lines", max_recorded_bad_lines, max_recorded_bad_bytes)
        self._budgets = (self._notes, self._asks, self._strays, self._bad)
        self._dropped_reported = False
        self.max_client_backlog = max_client_backlog
        self.max_client_backlog_bytes = max_client_backlog_bytes
        self.max_unsent_answer_bytes = max_unsent_answer_bytes
        self._init_state()

    def _init_state(self) -> None:
        """The state of the process and of the threads that talk to it: nothing started,
        nothing in flight, nothing read yet."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._pgid: int | None = None
        self._returncode: int | None = None

        # One lock guards request bookkeeping: ids, slots in flight, liveness flags.
        self._lock = threading.Lock()
        self._ids = Correlation()
        self._dead = False  # no answer can arrive any more
        self._watches: list[Expectation] = []  # notifications awaited (see expect())
        self._closing = False
        self._write_broken = False
        self._exit_recorded = False
        self._exited_evt = threading.Event()
        # The agent's requests waiting for an answer (see MAX_CLIENT_BACKLOG): admitted and
        # not yet written, the bytes of those not yet handled, the bytes of answers not yet
        # written. The reader and the client handler wait on this condition for room.
        self._room = threading.Condition(self._lock)
        self._backlog = 0
        self._queued_bytes = 0
        self._unsent_bytes = 0
        self._backlog_noted = False

        self._close_lock = threading.Lock()
        self._closed = False

        # Outgoing lines go through one writer thread, so a request's timeout holds even when
        # the agent stops reading stdin and the pipe is full.
        # Each item: the line, its event (None: not recorded), the id of the harness's request
        # it carries, and for an answer to the agent its size (0 for the harness's own lines);
        # or a list of such items, written in one write (see one_write).
        self._outq: queue.SimpleQueue[_Out | list[_Out] | None] = queue.SimpleQueue()
        # The lines of a one_write block being gathered, and the thread gathering them.
        self._batch: list[_Out] | None = None
        # Queue items put and written (or given up on): written() waits for the count.
        self._put = 0
        self._done_writing = 0
        self._wrote = threading.Condition()
        self._batch_owner: int | None = None
        # Each item: id, method, params, line size, whether the request was recorded. Bounded
        # by the backlog (see _admit).
        self._handlerq: queue.SimpleQueue[tuple[Any, str, Any, int, bool] | None] = (
            queue.SimpleQueue())
        self._threads: list[threading.Thread] = []

        # Self-pipes used as level-triggered broadcasts: closing the write end makes the read
        # end permanently readable for every poller.
        self._stop_r = self._stop_w = -1
        self._exit_r = self._exit_w = -1

        # stdout line assembly state (reader thread only).
        self._lines = LineAssembler(self.max_line_bytes, self._handle_line,
                                    self._record_oversize)
        self._stdout_eof = False
        # Bytes of stdout read (under _read_lock, with the read) and handled (under _fed):
        # what caught_up compares.
        self._read_lock = threading.Lock()
        self._read_bytes = 0
        self._fed = threading.Condition()
        self._fed_bytes = 0

        # stderr state.
        self._tail = bytearray()
        self._tail_lock = threading.Lock()

    # -- properties ---------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The agent's pid (``None`` before :meth:`start`)."""
        return self._pid

    @property
    def pgid(self) -> int | None:
        """The agent's process group id (equal to its pid: it leads its own session)."""
        return self._pgid

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited; negative for a signal."""
        return self._returncode

    @property
    def alive(self) -> bool:
        """True between :meth:`start` and the process's exit."""
        return self._proc is not None and self._returncode is None

    @property
    def dropped_notifications(self) -> int:
        """How many notifications arrived past ``max_recorded_notifications`` (not recorded)."""
        return self._notes.dropped

    @property
    def dropped(self) -> dict[str, int]:
        """How many lines of each kind were counted, not recorded (``notifications``,
        ``client-requests``, ``stray-responses``, ``bad-lines``), how many answers to
        recorded requests were left out (``answers``) and how many requests got no answer
        because none could be sent any more (``unanswered``)."""
        with self._lock:
            out = {b.kind: b.dropped for b in self._budgets}
            out.update(self._asks.extra)
        return out

    @property
    def stderr_tail(self) -> str:
        """The last ``stderr_tail_bytes`` of stderr, decoded with replacement characters."""
        with self._tail_lock:
            data = bytes(self._tail)
        return data.decode("utf-8", errors="replace")

    def settle_stderr(self, timeout: float = 0.5, *, exiting: bool = False) -> None:
        """Once the agent has exited, wait (up to ``timeout``) for its stderr to be read to
        the end, so that :attr:`stderr_tail` holds its last words: the reader of stdout can
        see the exit before the reader of stderr has read them. Only for failure paths.

        With ``exiting`` (an answer failed because the agent's stdout closed), the exit is
        waited for too, within the same ``timeout``: a process's stdout is closed a moment
        before it can be reaped, and a ``poll()`` then said "still running" and its last words
        were lost."""
        if self._proc is None:
            return
        end = time.monotonic() + timeout
        if (self.wait_exit(timeout) if exiting else self._proc.poll()) is None:
            return
        for t in self._threads:
            if t.name.startswith("acp-stderr-"):
                t.join(max(end - time.monotonic(), 0.0))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the agent in a new session (so its own process group) and start the reader,
        writer and watcher threads. Records a ``spawn`` event.

        Raises:
            AgentStartError: ``argv`` is empty, ``argv[0]`` is not found or not executable,
                or ``cwd`` is not a directory.
            RuntimeError: called twice.
        """
        if self._proc is not None:
            raise RuntimeError("AgentProcess.start() called twice")
        if not self.argv:
            raise AgentStartError("cannot start agent: empty command")
        if not os.path.isdir(self.cwd):
            raise AgentStartError(f"cannot start agent: working directory {self.cwd!r} "
                                  "does not exist")
        if self.command != self.argv:
            self._check_wrapped_program()
        try:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                bufsize=0,
            )
        except FileNotFoundError:
            raise AgentStartError(
                f"cannot start agent: {self.argv[0]!r} not found "
                f"(PATH={self.env.get('PATH', '')!r})"
            ) from None
        except PermissionError:
            raise AgentStartError(
                f"cannot start agent: {self.argv[0]!r} is not executable"
            ) from None
        except OSError as exc:
            raise AgentStartError(
                f"cannot start agent: {self.argv[0]!r}: {exc.strerror or exc}"
            ) from None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self._pid = proc.pid
        try:
            self._pgid = os.getpgid(proc.pid)
        except ProcessLookupError:
            self._pgid = proc.pid  # start_new_session makes it the group leader
        with _LIVE_LOCK:
            _LIVE_GROUPS.add(self._pgid)
        self._stop_r, self._stop_w = os.pipe()
        self._exit_r, self._exit_w = os.pipe()
        spawn: dict[str, Any] = {"what": "spawn", "pid": proc.pid, "argv": list(self.argv),
                                 "generation": self.generation}
        if self.sandbox != "none":
            spawn["sandbox"] = self.sandbox
        self._record("process", spawn)
        for target, name in (
            (self._reader_loop, "stdout"),
            (self._stderr_loop, "stderr"),
            (self._writer_loop, "stdin"),
            (self._wait_loop, "wait"),
            (self._handler_loop, "client-handler"),
        ):
            t = threading.Thread(target=self._guarded, args=(target,),
                                 name=f"acp-{name}-{proc.pid}", daemon=True)
            self._threads.append(t)
            t.start()

    def _check_wrapped_program(self) -> None:
        # A sandbox wrapper would report a missing agent only as its own exit status 1:
        # keep the one-line error a bare agent gets.
        exe = self.argv[0]
        found = shutil.which(exe, path=self.env.get("PATH")) if os.sep not in exe else exe
        if found is None or not os.path.exists(found):
            raise AgentStartError(f"cannot start agent: {exe!r} not found "
                                  f"(PATH={self.env.get('PATH', '')!r})")
        if os.path.isdir(found) or not os.access(found, os.X_OK):
            raise AgentStartError(f"cannot start agent: {exe!r} is not executable")

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to exit on its own.

        Returns the exit status, or ``None`` if it is still running. Once this returns a
        status, the exit event and all stdout the process wrote are in the history."""
        if self._proc is None:
            return None
        if self._exited_evt.wait(timeout):
            return self._returncode
        return None

    def close(self, grace: float = 3.0) -> int | None:
        """Shut the agent down and return its exit status (``None`` if never started).

        Closes stdin (after queued writes), waits up to ``grace`` seconds for the agent to
        exit, then sends ``SIGTERM`` to the process group, waits about a second, and sends
        ``SIGKILL``. The group is always sent ``SIGKILL`` at the end, so children the agent
        left behind die too. Requests still in flight return ``"exited"``. Idempotent.

        With ``grace`` 0 the ``SIGTERM`` follows the end of stdin at once (its ``kill`` event
        says ``reason: "stop"`` instead of ``"grace-expired"``): for when nothing will read
        the agent's state again."""
        with self._close_lock:
            if self._proc is None:
                return None
            if self._closed:
                return self._returncode
            self._closed = True
            with self._lock:
                self._closing = True
                self._room.notify_all()  # nothing waits for room once closing
            self._outq.put(None)
            if not self._exited_evt.wait(max(grace, 0.0)):
                self._kill(signal.SIGTERM, "grace-expired" if grace > 0 else "stop")
                if not self._exited_evt.wait(_TERM_WAIT):
                    self._kill(signal.SIGKILL, "term-ignored")
                    self._exited_evt.wait(_KILL_WAIT)
            # Always: the leader may be gone while its children still hold the pipes.
            self._kill(signal.SIGKILL, "group-cleanup", only_if_present=True)
            os.close(self._stop_w)
            self._handlerq.put(None)
            stuck = []
            for t in self._threads:
                if t is threading.current_thread():
                    continue  # close() called from the client handler
                t.join(_JOIN_WAIT)
                if t.is_alive():
                    stuck.append(t.name)
            if self._returncode is not None:
                self._on_exited()  # no-op unless the reader could not record it
            self._fail_all_pending()
            self._close_fds(stuck)
            if self._pgid is not None:
                with _LIVE_LOCK:
                    _LIVE_GROUPS.discard(self._pgid)
            return self._returncode

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- sending ------------------------------------------------------------------------------

    def request(self, method: str, params: Any, *, timeout: float) -> Reply:
        """Send a request and wait up to ``timeout`` seconds for its response.

        ``params=None`` omits the ``params`` member. Returns promptly with ``"exited"`` if the
        process exits (or closes stdout) before answering.

        Raises:
            RuntimeError: before :meth:`start`.
            ValueError, TypeError: ``params`` is not JSON-serialisable (NaN included).
        """
        return self.send_request(method, params).wait(timeout)

    def send_request(self, method: str, params: Any, *, recorded: Any = None) -> Pending:
        """Queue a request and return at once; :meth:`Pending.wait` gets its answer.

        Lines are written in the order they are queued, so a notification sent after this
        call (a ``session/cancel`` for a prompt in flight) reaches the agent after the
        request. ``recorded``: the params the history records instead of ``params``, the
        same request with each huge filler written as its mark (``acp_fuzz.core.fills``),
        so that a request of megabytes is not kept whole."""
        if self._proc is None:
            raise RuntimeError("AgentProcess.request() before start()")
        with self._lock:
            if self._dead or self._closing or self._write_broken:
                return Pending(self, None, None)
            rid, slot = self._ids.open()
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            line = _encode(msg)
        except Exception:
            with self._lock:
                self._ids.forget(rid)
            raise
        self._tell_handler(method, params)
        event: dict[str, Any] = {"dir": "send"}
        if recorded is not None:
            # What went on the wire, each filler as its mark (a lossless exchange): parsed
            # back as the writer parses a line, so that it reads back from a cassette equal.
            event["msg"] = json.loads(_encode({**msg, "params": recorded}))
        self._enqueue((line, event, rid, 0))
        return Pending(self, rid, slot)

    def expect(self, match: Callable[[str, Any], bool]) -> Expectation:
        """Watch for the first notification from the agent whose method and params ``match``
        accepts (called on the reader thread, in arrival order, so it sees a notification
        after every answer that came before it). Watch before sending what causes it: the
        notification may come before the answer. Notifications past the recording cap
        are still seen."""
        watch = Expectation(self, match)
        with self._lock:
            if self._dead:
                watch.resolve(_EXITED)
            else:
                self._watches.append(watch)
        return watch

    def _unwatch(self, watch: Expectation) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def _notice(self, method: str, params: Any) -> None:
        with self._lock:
            if not self._watches:
                return
            watches = list(self._watches)
        for watch in watches:
            try:
                hit = watch.match(method, params)
            except Exception:  # a matcher bug must not kill the reader thread
                hit = False
            if hit:
                self._unwatch(watch)
                watch.resolve(Reply("ok", result=params))

    def _wait(self, rid: int, slot: _Slot, timeout: float) -> Reply:
        if slot.event.wait(timeout):
            return slot.reply
        with self._lock:
            if self._ids.give_up(rid, slot):
                return Reply("timeout", id=rid)
        return slot.reply  # answered between the wait expiring and taking the lock

    def notify(self, method: str, params: Any) -> None:
        """Send a notification (no id, no answer). Dropped silently once the process is gone
        or closing. ``params=None`` omits the ``params`` member."""
        if self._proc is None:
            raise RuntimeError("AgentProcess.notify() before start()")
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        line = _encode(msg)
        with self._lock:
            if self._dead or self._closing or self._write_broken:
                return
        self._tell_handler(method, params)
        self._enqueue((line, {"dir": "send"}, None, 0))

    def caught_up(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) until every byte the agent had written to stdout when this
        was called is read and handled: its answers resolved, its notifications recorded.

        What the agent wrote before it did something the harness saw another way (a model
        request reaching the fake model) is then known, whichever thread was scheduled first:
        an agent that answers its ``session/prompt`` before it asks the model (ACP v2) is seen
        to have answered it, on an idle machine and a busy one alike. False when the bytes
        were not handled in time (or the agent's output ended)."""
        if self._proc is None or self._proc.stdout is None:
            return False
        fd = self._proc.stdout.fileno()
        try:
            with self._read_lock:
                target = self._read_bytes + _bytes_available(fd)
        except OSError:
            return False
        with self._fed:
            return self._fed.wait_for(lambda: self._fed_bytes >= target or self._stdout_eof,
                                      timeout) and self._fed_bytes >= target

    @contextlib.contextmanager
    def one_write(self) -> Iterator[None]:
        """The requests and notifications this thread sends inside the block go to the agent
        in one write, in order (each recorded as its own event), when the block ends.

        For lines that must reach the agent together: a ``session/cancel`` written right
        behind its ``session/prompt`` is in the pipe when the agent reads the prompt, whatever
        the machine's load. Written one by one, the writer thread could be put to sleep
        between them, and whether the agent saw the cancel before its model call turned on
        the scheduler (the same seed gave another campaign on a busy machine)."""
        if self._batch_owner is not None:
            raise RuntimeError("one_write blocks do not nest")
        self._batch, self._batch_owner = [], threading.get_ident()
        try:
            yield
        finally:
            batch, self._batch, self._batch_owner = self._batch, None, None
            if batch:
                self._put_out(batch)

    def _put_out(self, item: _Out | list[_Out]) -> None:
        with self._wrote:
            self._put += 1
        self._outq.put(item)

    def written(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) until every line queued before this call is written to
        the agent's stdin (or its write failed): a request written beside a held turn is then
        in the pipe before the hold ends, whatever the writer thread's scheduling. False
        when the writer did not get there in time (an agent that reads nothing while it waits
        on the model leaves a full pipe unread)."""
        with self._wrote:
            target = self._put
            return self._wrote.wait_for(lambda: self._done_writing >= target, timeout)

    def _enqueue(self, item: _Out) -> None:
        if self._batch is not None and self._batch_owner == threading.get_ident():
            self._batch.append(item)
        else:
            self._put_out(item)

    def _tell_handler(self, method: str, params: Any) -> None:
        sent = getattr(self.client_handler, "sent", None)
        if callable(sent):
            sent(method, params)

    def send_raw(self, line: bytes) -> None:
        """Write ``line`` to the agent's stdin exactly as given (no newline is added), for
        protocol fuzzing.

        Recorded as an ``acp`` send event with ``raw`` (decoded with replacement characters)
        and ``msg`` (the parsed object if the bytes are one JSON object, else ``None``). If it
        is a request, an answer to its id is recorded without an ``unknown-id`` marker, but no
        :class:`Reply` is produced: look for it in the history."""
        if self._proc is None:
            raise RuntimeError("AgentProcess.send_raw() before start()")
        data = bytes(line)
        msg: Any = None
        try:
            parsed = _DECODER.decode(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            msg = parsed
        with self._lock:
            if self._dead or self._closing or self._write_broken:
                return
            if isinstance(msg, dict) and "method" in msg and "id" in msg:
                self._ids.sent_raw(msg["id"])
        event = {"dir": "send", "msg": msg, "raw": data.decode("utf-8", errors="replace")}
        self._put_out((data, event, None, 0))

    # -- internals: recording -----------------------------------------------------------------

    def _record(self, kind: str, data: dict[str, Any]) -> None:
        history = self.history
        if history is not None:
            history.append(kind, data)

    def _kill(self, sig: signal.Signals, reason: str, *, only_if_present: bool = False) -> None:
        pgid = self._pgid
        if pgid is None:
            return
        data = {"what": "kill", "pid": self._pid, "pgid": pgid, "signal": int(sig),
                "reason": reason, "generation": self.generation}
        if only_if_present and not self._group_left(pgid):
            # Record the clean-up kill only when something was left in the group.
            return
        self._record("process", data)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def _group_left(self, pgid: int) -> bool:
        """Is anything left in the group? In a PID namespace the sandbox's init may still be
        tearing it down for a moment after the agent's exit was reported, and then lingers as
        a zombie until the system reaps it: wait up to :data:`_TEARDOWN_WAIT` for the group to
        hold nothing but zombies (the namespace kills everything in it when its init ends)."""
        if self.sandbox == "none":
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return False
            return True
        deadline = time.monotonic() + _TEARDOWN_WAIT
        while _group_has_live_member(pgid):
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.005)  # polled: a process that is not our child cannot be waited for
        return False

    # -- internals: threads -------------------------------------------------------------------

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException:
            # A broken thread (say, a history sink that raises) must not leave callers waiting
            # for answers that can no longer be read; the exception is still reported.
            self._fail_all_pending()
            raise

    def _wait_loop(self) -> None:
        assert self._proc is not None
        rc = self._proc.wait()
        self._returncode = rc
        with self._lock:
            self._room.notify_all()  # a dead agent reads no answer: stop waiting for room
        os.close(self._exit_w)  # tells the reader: drain what the process wrote, then report

    def _writer_loop(self) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        stdin = self._proc.stdin
        fd = stdin.fileno()
        broken = False
        while True:
            item = self._outq.get()
            if item is None:
                break
            items = item if isinstance(item, list) else [item]
            try:
                if broken:
                    for _, _, rid, _ in items:
                        self._fail_one(rid)
                    continue
                history = self.history
                for line, event, _, _ in items:
                    if history is not None and event is not None:
                        if "raw" not in event and "msg" not in event:
                            # Record what went on the wire (tuples become lists, ...), so the
                            # history is equal to itself read back from a cassette.
                            event["msg"] = json.loads(line)
                        history.append("acp", event)
                try:
                    _write_all(fd, b"".join(line for line, _, _, _ in items))
                except (OSError, ValueError):
                    broken = True
                    with self._lock:
                        self._write_broken = True
                        self._room.notify_all()  # no answer can be delivered any more
                    for _, _, rid, _ in items:
                        self._fail_one(rid)
            finally:
                with self._wrote:
                    self._done_writing += 1
                    self._wrote.notify_all()
                for _, _, _, answer in items:
                    if answer:
                        with self._lock:
                            self._backlog -= 1
                            self._unsent_bytes -= answer
                            self._room.notify_all()
        with contextlib.suppress(OSError):
            stdin.close()

    def _cannot_answer(self) -> bool:
        # Under self._lock: waiting for the backlog to drain is pointless, the agent is gone
        # or going (or no answer can be written any more).
        return self._closing or self._write_broken or self._dead or self._returncode is not None

    def _admit(self, size: int) -> bool:
        """Make room in the backlog for an agent request of ``size`` bytes, waiting (and so
        leaving stdout unread) while it is full; False when it is full and will not drain, or
        when no answer is sent any more. Reader thread only."""
        while True:
            with self._room:
                if self._closing or self._write_broken:
                    return False
                if self._backlog < self.max_client_backlog and (
                        self._queued_bytes < self.max_client_backlog_bytes):
                    self._backlog += 1
                    self._queued_bytes += size
                    return True
                if self._cannot_answer():
                    return False
                if self._backlog_noted:
                    self._room.wait()
                    continue
                self._backlog_noted = True
                waiting = self._backlog
            self._record("process", {"what": "client-requests-backlog", "pid": self._pid,
                                     "waiting": waiting, "limit": self.max_client_backlog,
                                     "limit_bytes": self.max_client_backlog_bytes,
                                     "generation": self.generation})

    def _handler_loop(self) -> None:
        while True:
            item = self._handlerq.get()
            if item is None:
                return
            rid, method, params, size, recorded = item
            with self._room:
                self._queued_bytes -= size
                self._room.notify_all()
                # Answers the agent has not read yet: wait for the writer before making more.
                while self._unsent_bytes >= self.max_unsent_answer_bytes \
                        and not self._cannot_answer():
                    self._room.wait()
                if self._closing or self._write_broken:
                    self._backlog -= 1
                    self._room.notify_all()
                    continue
            response: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
            try:
                if self.client_handler is None:
                    raise RpcError(-32601, "Method not found", {"method": method})
                response["result"] = self.client_handler(method, params)
                line = _encode(response)
            except RpcError as exc:
                response.pop("result", None)
                response["error"] = exc.to_error()
                line = _encode(response)
            except Exception as exc:  # a handler bug must not kill the conversation
                response.pop("result", None)
                response["error"] = {"code": -32603, "message": "Internal error",
                                     "data": f"{type(exc).__name__}: {exc}"[:1000]}
                line = _encode(response)
            with self._room:
                if self._closing or self._write_broken:
                    self._backlog -= 1
                    self._room.notify_all()
                    continue
                self._unsent_bytes += len(line)
                # Recorded only with its request, and within the same byte budget.
                record = recorded and self._asks.fits(len(line))
                if record:
                    self._asks.size += len(line)
                elif recorded:
                    self._asks.extra["answers"] += 1
            self._put_out((line, {"dir": "send"} if record else None, None, len(line)))

    def _stderr_loop(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        recorded = 0
        truncated = False
        limit = self.stderr_record_limit

        def handle(data: bytes) -> None:
            nonlocal recorded, truncated
            with self._tail_lock:
                self._tail += data
                if len(self._tail) > self.stderr_tail_bytes:
                    del self._tail[: len(self._tail) - self.stderr_tail_bytes]
            if truncated:
                return
            room = limit - recorded
            piece = data[:room]
            recorded += len(piece)
            text = decoder.decode(piece)
            if text:
                self._record("stderr", {"text": text, "generation": self.generation})
            if len(piece) < len(data) or recorded >= limit:
                truncated = True
                self._record("stderr", {"text": "", "generation": self.generation,
                                        "truncated": True, "limit": limit})

        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = dict(poller.poll())
            if fd in ready:
                data = os.read(fd, _READ_CHUNK)
                if not data:
                    break
                handle(data)
            if self._stop_r in ready:
                n = _bytes_available(fd)
                while n > 0:
                    data = os.read(fd, min(n, _READ_CHUNK))
                    if not data:
                        break
                    handle(data)
                    n -= len(data)
                break
        if not truncated:
            text = decoder.decode(b"", final=True)
            if text:
                self._record("stderr", {"text": text, "generation": self.generation})

    def _reader_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._exit_r, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        exit_seen = False
        while True:
            ready = dict(poller.poll())
            if fd in ready and not self._stdout_eof:
                data = self._read(fd, _READ_CHUNK)
                if data:
                    self._feed(data)
                else:
                    poller.unregister(fd)
                    self._on_stdout_eof()
            if self._exit_r in ready and not exit_seen:
                exit_seen = True
                poller.unregister(self._exit_r)
                # Everything the dead process wrote is already in the pipe (a grandchild may
                # keep it open, so EOF may never come): consume exactly that much first, so
                # its last answers count and the exit event follows its last line.
                self._drain(fd)
                self._on_exited()
            if self._stop_r in ready:
                self._drain(fd)
                self._flush_partial()
                return
            if self._stdout_eof and exit_seen:
                return

    def _drain(self, fd: int) -> None:
        if self._stdout_eof:
            return
        n = _bytes_available(fd)
        while n > 0:
            data = self._read(fd, min(n, _READ_CHUNK))
            if not data:
                self._on_stdout_eof()
                return
            self._feed(data)
            n -= len(data)

    # -- internals: stdout lines (framing in acp_fuzz.core.lines) -----------------------------

    def _read(self, fd: int, size: int) -> bytes:
        """Read stdout, counting what was read with the read (see :meth:`caught_up`)."""
        with self._read_lock:
            data = os.read(fd, size)
            self._read_bytes += len(data)
        return data

    def _feed(self, data: bytes) -> None:
        self._lines.feed(data)
        with self._fed:
            self._fed_bytes += len(data)
            self._fed.notify_all()

    def _flush_partial(self) -> None:
        cut = self._lines.finish()
        if cut is None:
            return
        head, size = cut
        self._record("acp", {"dir": "recv", "msg": None,
                             "raw": head.decode("utf-8", errors="replace"),
                             "error": "partial-line", "size": size})

    def _record_oversize(self, head: bytes, size: int) -> None:
        if self._take(self._bad, len(head)):
            self._record("acp", {"dir": "recv", "msg": None,
                                 "raw": head.decode("utf-8", errors="replace"),
                                 "error": "oversize", "size": size})

    def _record_bad(self, line: bytes, error: str) -> None:
        kept = line[:_BAD_LINE_MAX]
        if not self._take(self._bad, len(kept)):
            return
        data: dict[str, Any] = {"dir": "recv", "msg": None,
                                "raw": kept.decode("utf-8", errors="replace"), "error": error}
        if len(line) > _BAD_LINE_MAX:
            data["size"] = len(line)
        self._record("acp", data)

    def _handle_line(self, line: bytes) -> None:
        obj, problem = parse_line(line)
        if obj is None:
            self._record_bad(line, problem or "invalid-json")
            return
        if may_hold_fill(line):
            # A prompt's filler echoed back is recorded as its mark (acp_fuzz.core.fills),
            # as the request that carried it was; a mark-like text of the agent's is not one.
            obj = compact_value(obj)
        self._dispatch(obj, line_weight(line))

    # -- internals: JSON-RPC dispatch ---------------------------------------------------------

    def _dispatch(self, obj: dict[str, Any], weight: int = 0) -> None:
        # ``weight``: the line's line_weight, what every budget counts.
        method = obj.get("method")
        if "method" in obj and "id" not in obj:
            if isinstance(method, str):
                self._notice(method, obj.get("params"))
            if self._take(self._notes, weight):
                self._record("acp", {"dir": "recv", "msg": obj})
            return
        if isinstance(method, str):
            # A request from the agent: answered whether recorded or not (the client policy
            # is cheap); recorded while the budget lasts, its answer along with it.
            with self._lock:
                recorded = self._take(self._asks, weight)
            if recorded:
                self._record("acp", {"dir": "recv", "msg": obj})
            elif self._asks.dropped == 1:
                self._record_capped(self._asks)
            if self._admit(weight):
                self._handlerq.put((obj["id"], method, obj.get("params"), weight,
                                    recorded))
            else:
                with self._lock:
                    self._asks.extra["unanswered"] += 1
            return
        if "method" in obj or "id" not in obj or ("result" not in obj and "error" not in obj):
            if self._take(self._bad, weight):  # malformed; oracles judge it
                self._record("acp", {"dir": "recv", "msg": obj})
            return
        rid = obj["id"]
        with self._lock:
            slot, marker, stray = self._ids.answer(rid, "error" in obj)
        if (marker is not None or stray) and not self._take(self._strays, weight):
            return
        event: dict[str, Any] = {"dir": "recv", "msg": obj}
        if marker is not None:
            event["error"] = marker
        self._record("acp", event)
        if slot is not None:
            err = obj.get("error")
            if err is not None:
                slot.resolve(Reply("error", error=err if isinstance(err, dict) else
                                   {"data": err}, id=rid))
            else:
                slot.resolve(Reply("ok", result=obj.get("result"), id=rid))

    def _take(self, budget: _Budget, size: int) -> bool:
        """Record one more line of ``budget``'s kind? The first one past it is marked in the
        history (for the client requests' budget, shared with the handler: the caller holds
        self._lock and marks it)."""
        if budget.take(size):
            return True
        if budget.dropped == 1 and budget is not self._asks:
            self._record_capped(budget)
        return False

    def _record_capped(self, budget: _Budget) -> None:
        self._record("process", {"what": f"{budget.kind}-capped", "pid": self._pid,
                                 **budget.limits(), "generation": self.generation})

    def _fail_one(self, rid: int | None) -> None:
        if rid is None:
            return
        with self._lock:
            slot = self._ids.take_one(rid)
        if slot is not None:
            slot.resolve(Reply("exited", id=rid))

    def _fail_all_pending(self) -> None:
        with self._lock:
            self._dead = True
            self._room.notify_all()
            pending = self._ids.take_all()
            watches, self._watches = self._watches, []
        for rid, slot in pending.items():
            slot.resolve(Reply("exited", id=rid))
        for watch in watches:
            watch.resolve(_EXITED)

    def _on_stdout_eof(self) -> None:
        self._stdout_eof = True
        with self._fed:
            self._fed.notify_all()  # a caught_up waiting for more learns there is no more
        self._flush_partial()
        self._fail_all_pending()

    def _on_exited(self) -> None:
        with self._lock:
            if self._exit_recorded:
                return
            self._exit_recorded = True
        rc = self._returncode
        self._report_dropped()
        self._record("process", {
            "what": "exit", "pid": self._pid, "returncode": rc, "generation": self.generation,
            "signal": -rc if rc is not None and rc < 0 else None,
        })
        self._fail_all_pending()
        self._exited_evt.set()

    def _report_dropped(self) -> None:
        with self._lock:
            if self._dropped_reported:
                return
            self._dropped_reported = True
            counts = [(b, b.dropped, dict(b.extra)) for b in self._budgets]
        for budget, dropped, extra in counts:
            if dropped or any(extra.values()):
                self._record("process", {"what": f"{budget.kind}-dropped", "pid": self._pid,
                                         "count": dropped, **extra, **budget.limits(),
                                         "generation": self.generation})

    def _close_fds(self, stuck: list[str]) -> None:
        assert self._proc is not None
        # A descriptor a stuck thread may still use is left open rather than risk a reused fd.
        stuck_names = " ".join(stuck)
        if "stdout" not in stuck_names and self._proc.stdout is not None:
            self._proc.stdout.close()
        if "stderr" not in stuck_names and self._proc.stderr is not None:
            self._proc.stderr.close()
        if "stdout" not in stuck_names and "stderr" not in stuck_names:
            for fd in (self._stop_r, self._exit_r):
                try:
                    os.close(fd)
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        raise

