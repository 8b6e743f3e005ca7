"""Request correlation for the stdio transport (engine): which answer belongs to which request.

:class:`Correlation` is the bookkeeping alone (ids, requests in flight, the ones given up on,
those sent raw), so ``tests/cover`` reaches it without a process. :class:`Pending` and
:class:`Expectation` are what the caller waits on: a request's answer, or a notification
awaited from the agent; both end as a :class:`Reply`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from acp_fuzz.engine.process.transport import AgentProcess

__all__ = ["Correlation", "Expectation", "Pending", "Reply"]

Outcome = Literal["ok", "error", "timeout", "exited"]


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


def _id_key(rid: Any) -> str:
    # JSON ids compare by type and value ("1" is not 1, true is not 1).
    return json.dumps(rid, sort_keys=True)


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
