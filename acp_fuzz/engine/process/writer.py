"""The agent's stdin, written by one thread (engine).

Outgoing lines go through one writer thread, so a request's timeout holds even when the agent
stops reading stdin and the pipe is full. :class:`Writer` owns the queue, the thread's loop and
the count of lines written (:meth:`Writer.written`); :meth:`Writer.one_write` gathers lines
that must reach the agent in one write.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

from acp_fuzz.core.history import History
from acp_fuzz.engine.process.pipes import _write_all

__all__ = ["Writer"]

#: A line for the writer thread: the line, its event (None: not recorded), the id of the
#: harness's request it carries, and for an answer to the agent its size (else 0).
_Out = tuple[bytes, dict[str, Any] | None, int | None, int]


def _encode(msg: Any) -> bytes:
    try:
        text = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8 encoded; \u escapes are still valid JSON.
        text = json.dumps(msg, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return text.encode("ascii") + b"\n"


class Writer:
    """The queue of lines for the agent's stdin and the loop of the thread that writes them.

    Args:
        history: where the lines written are recorded, read at each write (the agent's
            history is assignable).
        broken: called once when a write fails (the agent closed its stdin).
        fail_one: called with the id of the harness's request a line carried when the line
            could not be written (``None`` for other lines).
        answered: called with the size of an answer to the agent once it is written (or
            given up on): the backlog of the agent's requests shrinks.
    """

    def __init__(self, *, history: Callable[[], History | None], broken: Callable[[], None],
                 fail_one: Callable[[int | None], None],
                 answered: Callable[[int], None]) -> None:
        self._history = history
        self._broken = broken
        self._fail_one = fail_one
        self._answered = answered
        # Each item: the line, its event (None: not recorded), the id of the harness's request
        # it carries, and for an answer to the agent its size (0 for the harness's own lines);
        # or a list of such items, written in one write (see one_write).
        self._outq: queue.SimpleQueue[_Out | list[_Out] | None] = queue.SimpleQueue()
        # The lines of a one_write block being gathered, and the thread gathering them.
        self._batch: list[_Out] | None = None
        self._batch_owner: int | None = None
        # Queue items put and written (or given up on): written() waits for the count.
        self._put = 0
        self._done_writing = 0
        self._wrote = threading.Condition()

    @contextlib.contextmanager
    def one_write(self) -> Iterator[None]:
        """See :meth:`AgentProcess.one_write`."""
        if self._batch_owner is not None:
            raise RuntimeError("one_write blocks do not nest")
        self._batch, self._batch_owner = [], threading.get_ident()
        try:
            yield
        finally:
            batch, self._batch, self._batch_owner = self._batch, None, None
            if batch:
                self.put(batch)

    def put(self, item: _Out | list[_Out]) -> None:
        """Queue ``item`` for the writer thread now, whatever block is being gathered."""
        with self._wrote:
            self._put += 1
        self._outq.put(item)

    def enqueue(self, item: _Out) -> None:
        """Queue ``item``, or add it to this thread's :meth:`one_write` block."""
        if self._batch is not None and self._batch_owner == threading.get_ident():
            self._batch.append(item)
        else:
            self.put(item)

    def written(self, timeout: float) -> bool:
        """See :meth:`AgentProcess.written`."""
        with self._wrote:
            target = self._put
            return self._wrote.wait_for(lambda: self._done_writing >= target, timeout)

    def stop(self) -> None:
        """The loop ends, and closes stdin, after the lines queued before this call."""
        self._outq.put(None)

    def run(self, stdin: IO[bytes]) -> None:
        """The writer thread's loop, until :meth:`stop`."""
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
                history = self._history()
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
                    self._broken()
                    for _, _, rid, _ in items:
                        self._fail_one(rid)
            finally:
                with self._wrote:
                    self._done_writing += 1
                    self._wrote.notify_all()
                for _, _, _, answer in items:
                    if answer:
                        self._answered(answer)
        with contextlib.suppress(OSError):
            stdin.close()
