"""The agent's requests to the client (engine): their bounded backlog and the handler thread.

The agent's requests wait for the client handler, and their answers for the agent to read its
stdin, in a bounded backlog (see the module docs of :mod:`acp_fuzz.engine.process.transport`).
:class:`Backlog` owns its counts, the condition the reader and the handler wait on for room,
and the queue and loop of the client handler's thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from acp_fuzz.core.errors import RpcError
from acp_fuzz.engine.process.budget import _Budget
from acp_fuzz.engine.process.writer import _encode, _Out

__all__ = [
    "MAX_CLIENT_BACKLOG",
    "MAX_CLIENT_BACKLOG_BYTES",
    "MAX_UNSENT_ANSWER_BYTES",
    "Backlog",
    "ClientHandler",
]

#: A handler for requests the agent sends to the client: ``handler(method, params)`` returns
#: the JSON-serialisable result, or raises :class:`RpcError` to answer with an error.
ClientHandler = Callable[[str, Any], Any]

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


class Backlog:
    """The agent's requests waiting for an answer (see :data:`MAX_CLIENT_BACKLOG`): admitted
    and not yet written (``count``), the bytes of those not yet handled (``queued_bytes``),
    the bytes of answers not yet written (``unsent_bytes``). The reader and the client handler
    wait on ``room`` (a condition on the agent's lock) for room.

    Args:
        lock: the agent's lock, which ``room`` shares.
        limit, limit_bytes, unsent_limit: ``max_client_backlog``, ``max_client_backlog_bytes``
            and ``max_unsent_answer_bytes`` of :class:`AgentProcess`.
        stopped: under the lock, whether no answer is sent any more (closing, or stdin
            broken).
        cannot_answer: under the lock, whether waiting for the backlog to drain is pointless
            (``stopped``, or the agent is gone).
        noted: records the ``client-requests-backlog`` event (with the requests waiting).
    """

    def __init__(self, lock: threading.Lock, *, limit: int, limit_bytes: int,
                 unsent_limit: int, stopped: Callable[[], bool],
                 cannot_answer: Callable[[], bool], noted: Callable[[int], None]) -> None:
        self.room = threading.Condition(lock)
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.unsent_limit = unsent_limit
        self._stopped = stopped
        self._cannot_answer = cannot_answer
        self._noted = noted
        self.count = 0
        self.queued_bytes = 0
        self.unsent_bytes = 0
        self.backlog_noted = False
        # Each item: id, method, params, line size, whether the request was recorded. Bounded
        # by the backlog (see admit).
        self._requests: queue.SimpleQueue[tuple[Any, str, Any, int, bool] | None] = (
            queue.SimpleQueue())

    def admit(self, size: int) -> bool:
        """Make room in the backlog for an agent request of ``size`` bytes, waiting (and so
        leaving stdout unread) while it is full; False when it is full and will not drain, or
        when no answer is sent any more. Reader thread only."""
        while True:
            with self.room:
                if self._stopped():
                    return False
                if self.count < self.limit and self.queued_bytes < self.limit_bytes:
                    self.count += 1
                    self.queued_bytes += size
                    return True
                if self._cannot_answer():
                    return False
                if self.backlog_noted:
                    self.room.wait()
                    continue
                self.backlog_noted = True
                waiting = self.count
            self._noted(waiting)

    def put(self, rid: Any, method: str, params: Any, size: int, recorded: bool) -> None:
        """Hand an admitted request to the client handler's thread."""
        self._requests.put((rid, method, params, size, recorded))

    def stop(self) -> None:
        """The handler's loop ends after the requests queued before this call."""
        self._requests.put(None)

    def answered(self, size: int) -> None:
        """An answer of ``size`` bytes was written (or given up on): it leaves the backlog."""
        with self.room:
            self.count -= 1
            self.unsent_bytes -= size
            self.room.notify_all()

    def serve(self, handler: Callable[[], ClientHandler | None], asks: _Budget,
              put: Callable[[_Out], None]) -> None:
        """The client handler's loop, until :meth:`stop`: each request answered by
        ``handler()`` (read at each request), the answer recorded within ``asks`` when its
        request was, and ``put`` for the writer."""
        while True:
            item = self._requests.get()
            if item is None:
                return
            rid, method, params, size, recorded = item
            with self.room:
                self.queued_bytes -= size
                self.room.notify_all()
                # Answers the agent has not read yet: wait for the writer before making more.
                while self.unsent_bytes >= self.unsent_limit and not self._cannot_answer():
                    self.room.wait()
                if self._stopped():
                    self.count -= 1
                    self.room.notify_all()
                    continue
            line = _answer(handler(), rid, method, params)
            with self.room:
                if self._stopped():
                    self.count -= 1
                    self.room.notify_all()
                    continue
                self.unsent_bytes += len(line)
                # Recorded only with its request, and within the same byte budget.
                record = recorded and asks.fits(len(line))
                if record:
                    asks.size += len(line)
                elif recorded:
                    asks.extra["answers"] += 1
            put((line, {"dir": "send"} if record else None, None, len(line)))


def _answer(handler: ClientHandler | None, rid: Any, method: str, params: Any) -> bytes:
    """The answer line to the agent's request ``rid``: ``handler``'s result, its
    :class:`RpcError`, or an internal error."""
    response: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    try:
        if handler is None:
            raise RpcError(-32601, "Method not found", {"method": method})
        response["result"] = handler(method, params)
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
    return line
