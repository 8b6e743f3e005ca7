"""The stdio transport: one ACP agent process, spoken to in NDJSON JSON-RPC 2.0.

:class:`AgentProcess` spawns an agent in its own process group, writes requests to its stdin
and reads its stdout and stderr on background threads. It composes one collaborator a
concern, each in its module of this package: the request correlation (``correlation``:
:class:`Correlation`, :class:`Reply`, :class:`Pending`, :class:`Expectation`), the recording
budgets (``budget``), the writer thread (``writer``), the reader of stdout (``reader``; the
line framing is :class:`acp_fuzz.core.lines.LineAssembler`, pure), the reader of stderr
(``stderr``), the backlog of the agent's requests and the client handler's thread
(``backlog``) and the process groups (``group``: :func:`kill_all_agents`); every name other
modules use is importable from here too. Everything that crosses the pipes is
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

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from acp_fuzz.core.errors import AgentStartError, RpcError
from acp_fuzz.core.history import History
from acp_fuzz.core.lines import DECODER
from acp_fuzz.engine.process.backlog import (
    MAX_CLIENT_BACKLOG,
    MAX_CLIENT_BACKLOG_BYTES,
    MAX_UNSENT_ANSWER_BYTES,
    Backlog,
    ClientHandler,
)
from acp_fuzz.engine.process.budget import (
    MAX_RECORDED_BAD_BYTES,
    MAX_RECORDED_BAD_LINES,
    MAX_RECORDED_CLIENT_REQUEST_BYTES,
    MAX_RECORDED_CLIENT_REQUESTS,
    MAX_RECORDED_STRAY_BYTES,
    MAX_RECORDED_STRAY_RESPONSES,
    Budgets,
    _Budget,
    line_weight,
)
from acp_fuzz.engine.process.correlation import (
    _EXITED,
    Correlation,
    Expectation,
    Pending,
    Reply,
    _Slot,
)
from acp_fuzz.engine.process.correlation import Outcome as Outcome
from acp_fuzz.engine.process.group import _LIVE_GROUPS as _LIVE_GROUPS
from acp_fuzz.engine.process.group import _LIVE_LOCK as _LIVE_LOCK
from acp_fuzz.engine.process.group import group_left, kill_all_agents
from acp_fuzz.engine.process.pipes import Broadcast
from acp_fuzz.engine.process.reader import StdoutReader
from acp_fuzz.engine.process.stderr import StderrReader
from acp_fuzz.engine.process.writer import Writer, _encode

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

#: Bounded waits inside close(): these only matter if something is badly wrong (a process in
#: uninterruptible sleep, a thread stuck on a pipe held by an escaped grandchild).
_TERM_WAIT = 1.0
_KILL_WAIT = 5.0
_JOIN_WAIT = 5.0

_DECODER = DECODER


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
        self.max_client_backlog = max_client_backlog
        self.max_client_backlog_bytes = max_client_backlog_bytes
        self.max_unsent_answer_bytes = max_unsent_answer_bytes
        # Recording budgets (see Budgets: the client handler shares one under self._lock).
        self._budgets = Budgets(
            notes=(max_recorded_notifications, max_recorded_notification_bytes),
            asks=(max_recorded_client_requests, max_recorded_client_request_bytes),
            strays=(max_recorded_stray_responses, max_recorded_stray_bytes),
            bad=(max_recorded_bad_lines, max_recorded_bad_bytes),
            capped=self._record_capped)
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
        # The agent's requests waiting for an answer (see MAX_CLIENT_BACKLOG); its condition
        # shares self._lock.
        self._backlog = Backlog(
            self._lock, limit=self.max_client_backlog,
            limit_bytes=self.max_client_backlog_bytes,
            unsent_limit=self.max_unsent_answer_bytes,
            stopped=lambda: self._closing or self._write_broken,
            cannot_answer=self._cannot_answer, noted=self._record_backlog)

        self._close_lock = threading.Lock()
        self._closed = False

        self._writer = Writer(history=lambda: self.history, broken=self._on_write_broken,
                              fail_one=self._fail_one, answered=self._backlog.answered)
        self._threads: list[threading.Thread] = []

        # Broadcasts to the threads: close() says stop, the watcher says the process exited.
        self._stop = Broadcast()
        self._exit = Broadcast()

        self._stdout = StdoutReader(self.max_line_bytes, dispatch=self._dispatch,
                                    budgets=self._budgets, record=self._record)
        self._stderr = StderrReader(self.stderr_tail_bytes, self.stderr_record_limit)

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
        return self._budgets.notes.dropped

    @property
    def dropped(self) -> dict[str, int]:
        """How many lines of each kind were counted, not recorded (``notifications``,
        ``client-requests``, ``stray-responses``, ``bad-lines``), how many answers to
        recorded requests were left out (``answers``) and how many requests got no answer
        because none could be sent any more (``unanswered``)."""
        with self._lock:
            return self._budgets.dropped()

    @property
    def stderr_tail(self) -> str:
        """The last ``stderr_tail_bytes`` of stderr, decoded with replacement characters."""
        return self._stderr.tail

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
        self._stop.open()
        self._exit.open()
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
                self._backlog.room.notify_all()  # nothing waits for room once closing
            self._writer.stop()
            if not self._exited_evt.wait(max(grace, 0.0)):
                self._kill(signal.SIGTERM, "grace-expired" if grace > 0 else "stop")
                if not self._exited_evt.wait(_TERM_WAIT):
                    self._kill(signal.SIGKILL, "term-ignored")
                    self._exited_evt.wait(_KILL_WAIT)
            # Always: the leader may be gone while its children still hold the pipes.
            self._kill(signal.SIGKILL, "group-cleanup", only_if_present=True)
            self._stop.fire()
            self._backlog.stop()
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
        self._writer.enqueue((line, event, rid, 0))
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
        self._writer.enqueue((line, {"dir": "send"}, None, 0))

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
        return self._stdout.caught_up(self._proc.stdout.fileno(), timeout)

    def one_write(self) -> contextlib.AbstractContextManager[None]:
        """The requests and notifications this thread sends inside the block go to the agent
        in one write, in order (each recorded as its own event), when the block ends.

        For lines that must reach the agent together: a ``session/cancel`` written right
        behind its ``session/prompt`` is in the pipe when the agent reads the prompt, whatever
        the machine's load. Written one by one, the writer thread could be put to sleep
        between them, and whether the agent saw the cancel before its model call turned on
        the scheduler (the same seed gave another campaign on a busy machine)."""
        return self._writer.one_write()

    def written(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) until every line queued before this call is written to
        the agent's stdin (or its write failed): a request written beside a held turn is then
        in the pipe before the hold ends, whatever the writer thread's scheduling. False
        when the writer did not get there in time (an agent that reads nothing while it waits
        on the model leaves a full pipe unread)."""
        return self._writer.written(timeout)

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
        self._writer.put((data, event, None, 0))

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
        if only_if_present and not group_left(pgid, sandboxed=self.sandbox != "none"):
            # Record the clean-up kill only when something was left in the group.
            return
        self._record("process", data)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def _record_backlog(self, waiting: int) -> None:
        self._record("process", {"what": "client-requests-backlog", "pid": self._pid,
                                 "waiting": waiting, "limit": self.max_client_backlog,
                                 "limit_bytes": self.max_client_backlog_bytes,
                                 "generation": self.generation})

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
            self._backlog.room.notify_all()  # a dead agent reads no answer: stop waiting
        self._exit.fire()  # tells the reader: drain what the process wrote, then report

    def _writer_loop(self) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._writer.run(self._proc.stdin)

    def _on_write_broken(self) -> None:
        with self._lock:
            self._write_broken = True
            self._backlog.room.notify_all()  # no answer can be delivered any more

    def _cannot_answer(self) -> bool:
        # Under self._lock: waiting for the backlog to drain is pointless, the agent is gone
        # or going (or no answer can be written any more).
        return self._closing or self._write_broken or self._dead or self._returncode is not None

    def _handler_loop(self) -> None:
        self._backlog.serve(lambda: self.client_handler, self._budgets.asks, self._writer.put)

    def _stderr_loop(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        self._stderr.run(self._proc.stderr.fileno(), self._stop.r, self._record,
                         self.generation)

    def _reader_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._stdout.run(self._proc.stdout.fileno(), self._exit.r, self._stop.r,
                         on_eof=self._on_stdout_eof, on_exited=self._on_exited)

    # -- internals: JSON-RPC dispatch ---------------------------------------------------------

    def _dispatch(self, obj: dict[str, Any], weight: int = 0) -> None:
        # ``weight``: the line's line_weight, what every budget counts.
        method = obj.get("method")
        if "method" in obj and "id" not in obj:
            if isinstance(method, str):
                self._notice(method, obj.get("params"))
            if self._budgets.take(self._budgets.notes, weight):
                self._record("acp", {"dir": "recv", "msg": obj})
            return
        if isinstance(method, str):
            # A request from the agent: answered whether recorded or not (the client policy
            # is cheap); recorded while the budget lasts, its answer along with it.
            asks = self._budgets.asks
            with self._lock:
                recorded = self._budgets.take(asks, weight)
            if recorded:
                self._record("acp", {"dir": "recv", "msg": obj})
            elif asks.dropped == 1:
                self._record_capped(asks)
            if self._backlog.admit(weight):
                self._backlog.put(obj["id"], method, obj.get("params"), weight, recorded)
            else:
                with self._lock:
                    asks.extra["unanswered"] += 1
            return
        if "method" in obj or "id" not in obj or ("result" not in obj and "error" not in obj):
            if self._budgets.take(self._budgets.bad, weight):  # malformed; oracles judge it
                self._record("acp", {"dir": "recv", "msg": obj})
            return
        rid = obj["id"]
        with self._lock:
            slot, marker, stray = self._ids.answer(rid, "error" in obj)
        if (marker is not None or stray) and not self._budgets.take(self._budgets.strays,
                                                                    weight):
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
            self._backlog.room.notify_all()
            pending = self._ids.take_all()
            watches, self._watches = self._watches, []
        for rid, slot in pending.items():
            slot.resolve(Reply("exited", id=rid))
        for watch in watches:
            watch.resolve(_EXITED)

    def _on_stdout_eof(self) -> None:
        self._stdout.end()
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
            counts = self._budgets.report_once()
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
            for fd in (self._stop.r, self._exit.r):
                try:
                    os.close(fd)
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        raise

