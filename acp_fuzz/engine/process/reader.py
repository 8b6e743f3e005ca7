"""The agent's stdout, read by one thread (engine): lines framed, parsed, bad ones recorded.

:class:`StdoutReader` owns the framing (:class:`acp_fuzz.core.lines.LineAssembler`), the count
of bytes read and handled that :meth:`AgentProcess.caught_up` compares, and the records of the
lines that are no JSON object (``oversize``, ``invalid-*``, ``not-object``, ``partial-line``).
Each JSON object goes to ``dispatch`` with its :func:`line_weight`.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from typing import Any

from acp_fuzz.core.fills import compact_value, may_hold_fill
from acp_fuzz.core.lines import BAD_LINE_MAX, LineAssembler, parse_line
from acp_fuzz.engine.process.budget import Budgets, line_weight
from acp_fuzz.engine.process.pipes import _READ_CHUNK, _bytes_available

__all__ = ["StdoutReader"]

#: How much of an undecodable / unparsable line is kept in its event.
_BAD_LINE_MAX = BAD_LINE_MAX


class StdoutReader:
    """The reading of one agent's stdout.

    Args:
        max_line_bytes: the longest line accepted; longer lines are discarded.
        dispatch: called on the reader thread with each line that is a JSON object, and its
            weight.
        budgets: what may be recorded (``bad`` for the lines that are no JSON-RPC message).
        record: appends an event to the agent's history.
    """

    def __init__(self, max_line_bytes: int, *,
                 dispatch: Callable[[dict[str, Any], int], None], budgets: Budgets,
                 record: Callable[[str, dict[str, Any]], None]) -> None:
        self._dispatch = dispatch
        self._budgets = budgets
        self._record = record
        # Line assembly state (reader thread only).
        self._lines = LineAssembler(max_line_bytes, self._handle_line, self._record_oversize)
        self.eof = False
        # Bytes of stdout read (under _read_lock, with the read) and handled (under _fed):
        # what caught_up compares.
        self._read_lock = threading.Lock()
        self._read_bytes = 0
        self._fed = threading.Condition()
        self._fed_bytes = 0

    def run(self, fd: int, exit_r: int, stop_r: int, *, on_eof: Callable[[], None],
            on_exited: Callable[[], None]) -> None:
        """The reader thread's loop: until ``stop_r`` is readable, or stdout ended and
        ``exit_r`` (the process exited) is readable."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(exit_r, select.POLLIN)
        poller.register(stop_r, select.POLLIN)
        exit_seen = False
        while True:
            ready = dict(poller.poll())
            if fd in ready and not self.eof:
                data = self._read(fd, _READ_CHUNK)
                if data:
                    self._feed(data)
                else:
                    poller.unregister(fd)
                    on_eof()
            if exit_r in ready and not exit_seen:
                exit_seen = True
                poller.unregister(exit_r)
                # Everything the dead process wrote is already in the pipe (a grandchild may
                # keep it open, so EOF may never come): consume exactly that much first, so
                # its last answers count and the exit event follows its last line.
                self._drain(fd, on_eof)
                on_exited()
            if stop_r in ready:
                self._drain(fd, on_eof)
                self.flush_partial()
                return
            if self.eof and exit_seen:
                return

    def _drain(self, fd: int, on_eof: Callable[[], None]) -> None:
        if self.eof:
            return
        n = _bytes_available(fd)
        while n > 0:
            data = self._read(fd, min(n, _READ_CHUNK))
            if not data:
                on_eof()
                return
            self._feed(data)
            n -= len(data)

    def end(self) -> None:
        """Stdout ended: no more to wait for, and a line cut short is recorded."""
        self.eof = True
        with self._fed:
            self._fed.notify_all()  # a caught_up waiting for more learns there is no more
        self.flush_partial()

    def caught_up(self, fd: int, timeout: float) -> bool:
        """See :meth:`AgentProcess.caught_up`; ``fd`` is stdout."""
        try:
            with self._read_lock:
                target = self._read_bytes + _bytes_available(fd)
        except OSError:
            return False
        with self._fed:
            return self._fed.wait_for(lambda: self._fed_bytes >= target or self.eof,
                                      timeout) and self._fed_bytes >= target

    # -- lines (framing in acp_fuzz.core.lines) -------------------------------------------------

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

    def flush_partial(self) -> None:
        """Record the line cut short by the end of stdout or by close, if any."""
        cut = self._lines.finish()
        if cut is None:
            return
        head, size = cut
        self._record("acp", {"dir": "recv", "msg": None,
                             "raw": head.decode("utf-8", errors="replace"),
                             "error": "partial-line", "size": size})

    def _record_oversize(self, head: bytes, size: int) -> None:
        if self._budgets.take(self._budgets.bad, len(head)):
            self._record("acp", {"dir": "recv", "msg": None,
                                 "raw": head.decode("utf-8", errors="replace"),
                                 "error": "oversize", "size": size})

    def _record_bad(self, line: bytes, error: str) -> None:
        kept = line[:_BAD_LINE_MAX]
        if not self._budgets.take(self._budgets.bad, len(kept)):
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
