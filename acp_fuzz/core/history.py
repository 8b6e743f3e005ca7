"""The history: one ordered log of everything that crossed a wire during a run.

This module is the pure core of acp-fuzz. It does no I/O. The engine (transport, gateway,
runner) appends events to a :class:`History`; the oracles read it; the cassette module
serialises it. Every event is a plain, msgpack-friendly mapping under the hood, so a history
read back from a cassette is *equal* to the one that was recorded.

Event kinds (the ``kind`` field):

``acp``
    One JSON-RPC line, in either direction. ``data = {"dir": "send"|"recv", "msg": <parsed
    object or None>, "raw": <str, only when the line was not valid JSON or not an object>}``.
    ``send`` is harness -> agent, ``recv`` is agent -> harness.
``model``
    One HTTP exchange seen by the fake model gateway. See :class:`ModelExchange` for the
    fields; the important ones are ``segments`` (every piece of text in the request, with the
    slot it sat in) and ``session``/``turn`` (the nonce tie, or ``None`` for side requests).
``process``
    ``data = {"what": "spawn"|"exit"|"kill"|"restart", "pid": int, "argv": [...],
    "returncode": int|None, "generation": int}``. ``generation`` counts agent processes within
    one run (0 for the first spawn, +1 per restart).
``stderr``
    ``data = {"text": str, "generation": int}``: a chunk of the agent's stderr.
``step``
    A harness annotation that opens one logical lifecycle step, so oracles and reports can
    speak of "step 3: session/load of session B". ``data = {"index": int, "name": str,
    "args": {...}}``.
``verdict``
    An annotation the runner adds after a step (for example, that a request timed out).
    ``data = {"step": int, "what": str, ...}``.

The types above (and a ``model`` event's, :class:`ModelExchange`) are checked wherever a
field is present when a cassette is read or written (``acp_fuzz.core.cassette``), so code
that reads a history may rely on them; a field may be missing. What acp-fuzz does not choose
(an ACP ``msg``, a request ``body``, an agent's error or stop reason in a verdict) can hold
any msgpack value, and code reading it must expect anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "SLOTS",
    "Event",
    "EventKind",
    "History",
    "ModelExchange",
    "Segment",
    "clip_depth",
]

EventKind = Literal["acp", "model", "process", "stderr", "step", "verdict"]
EVENT_KINDS: frozenset[str] = frozenset({"acp", "model", "process", "stderr", "step", "verdict"})

#: Where a piece of text sat in a model request.
#:
#: ``system``: the API's system slot (Anthropic ``system``, Responses ``instructions`` and
#: system/developer input items, Chat system/developer messages, Gemini ``systemInstruction``).
#: ``user``: the newest user turn. ``history``: earlier user turns and all assistant turns.
#: ``other``: anything else (tool definitions, metadata) that still holds text.
SLOTS = ("system", "user", "history", "other")
Slot = Literal["system", "user", "history", "other"]


@dataclass(frozen=True, slots=True)
class Event:
    """One entry in the history. ``seq`` is dense from 0; ``t`` is monotonic seconds since
    the history was created (informational only: no oracle may depend on it)."""

    seq: int
    t: float
    kind: str
    data: Mapping[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "t": self.t, "kind": self.kind, "data": dict(self.data)}

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Event:
        return cls(seq=obj["seq"], t=obj["t"], kind=obj["kind"], data=obj["data"])


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of text from a model request, and where it sat.

    ``path`` is a JSON-path-like locator into the request body (``system[2].text``,
    ``messages[0].content``), so evidence can point at the exact spot."""

    slot: str
    path: str
    text: str

    def to_wire(self) -> dict[str, Any]:
        return {"slot": self.slot, "path": self.path, "text": self.text}

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Segment:
        return cls(slot=obj.get("slot", "other"), path=obj.get("path", ""),
                   text=obj.get("text", ""))


@dataclass(frozen=True, slots=True)
class ModelExchange:
    """A typed view of a ``model`` event's data.

    ``api`` is one of ``openai.chat``, ``openai.responses``, ``anthropic.messages``,
    ``anthropic.count_tokens``, ``gemini``, ``models``, ``unknown``. ``session`` and ``turn``
    come from the harness nonce found in the request; both are ``None`` for a side request
    (title generation, routers, suggestions) or a request the gateway could not tie.

    ``side_kind`` says what the gateway took the request for: ``None`` for a turn,
    ``"side"`` for a side request (or a request of no model API), ``"untied"`` for a model
    request that no side-request rule matched and no turn's nonce tied (older cassettes say
    ``"side"`` for it too), ``"compaction"`` for the summary
    request of a compaction (a profile's ``[[side]]`` rule of ``kind = "compaction"``): a
    side request, judged for leaks only, whose tie names the session it compacted.
    ``pressure`` says what the gateway did to force a compaction (a ``compact`` step armed
    it for the session): ``"usage"`` (the reply reported a context near its limit) or
    ``"overflow"`` (it answered with the API's context-length error); ``None`` otherwise.
    ``fault`` names the failure the gateway answered with instead of a reply (a ``prompt``
    step's ``fault``, ``acp_fuzz.core.steps.FAULTS``): ``status`` is then what it sent (0
    for a connection closed before any answer) and ``reply_text`` empty unless the agent got
    the whole reply (``slow-first-byte``). ``held`` says how a request the harness held
    (``Gateway.hold_next``) was let go: ``"released"`` or ``"expired"`` (its bound passed).
    """

    api: str
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    segments: tuple[Segment, ...]
    session: str | None
    turn: int | None
    side: bool
    status: int
    reply_text: str
    upstream: bool = False
    side_kind: str | None = None
    pressure: str | None = None
    fault: str | None = None
    held: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "method": self.method,
            "path": self.path,
            "headers": dict(self.headers),
            "body": self.body,
            "segments": [s.to_wire() for s in self.segments],
            "session": self.session,
            "turn": self.turn,
            "side": self.side,
            "status": self.status,
            "reply_text": self.reply_text,
            "upstream": self.upstream,
            "side_kind": self.side_kind,
            "pressure": self.pressure,
            "fault": self.fault,
            "held": self.held,
        }

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> ModelExchange:
        """The exchange of a ``model`` event's data. A missing field takes its default (a
        cassette's reader has checked the type of every field that is there)."""
        return cls(
            api=obj.get("api", "unknown"),
            method=obj.get("method", ""),
            path=obj.get("path", ""),
            headers=obj.get("headers", {}),
            body=obj.get("body"),
            segments=tuple(Segment.from_wire(s) for s in obj.get("segments", ())),
            session=obj.get("session"),
            turn=obj.get("turn"),
            side=bool(obj.get("side", False)),
            status=int(obj.get("status", 200)),
            reply_text=obj.get("reply_text", ""),
            upstream=bool(obj.get("upstream", False)),
            side_kind=obj.get("side_kind"),
            pressure=obj.get("pressure"),
            fault=obj.get("fault"),
            held=obj.get("held"),
        )

    def texts(self, slot: str) -> list[str]:
        return [s.text for s in self.segments if s.slot == slot]


#: How many containers deep an event's ``data`` may nest. What an agent sends is recorded as
#: it came, except deeper than this: a cassette holds at most 64 levels (``Limits.max_depth``,
#: the event map adds one), and no real message comes near it. Clipping where events are
#: recorded, not where they are written, keeps a live run, its cassette and its replay equal.
MAX_DATA_DEPTH = 48
CLIPPED = f"[acp-fuzz: clipped, nested deeper than {MAX_DATA_DEPTH} levels]"


def clip_depth(data: dict[str, Any], max_depth: int = MAX_DATA_DEPTH) -> dict[str, Any]:
    """``data``, with every container deeper than ``max_depth`` levels replaced by
    :data:`CLIPPED` (``data`` itself is returned when nothing is that deep, the usual case).

    A hostile agent can send JSON nested thousands of levels deep; recorded as is, its cassette
    could not be written, and the finding would be lost."""
    level: list[Any] = [data]
    depth = 1
    while level:
        if depth > max_depth:
            clipped: dict[str, Any] = _copy_clipped(data, max_depth)
            return clipped
        nxt: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            nxt.extend(c for c in children if isinstance(c, (dict, list, tuple)))
        level = nxt
        depth += 1
    return data


def _copy_clipped(node: Any, levels_left: int) -> Any:
    # Recursion is bounded by max_depth: it never descends below the clip.
    if not isinstance(node, (dict, list, tuple)):
        return node
    if levels_left == 0:
        return CLIPPED
    if isinstance(node, dict):
        return {k: _copy_clipped(v, levels_left - 1) for k, v in node.items()}
    return [_copy_clipped(v, levels_left - 1) for v in node]


@dataclass
class History:
    """A thread-safe, append-only event log.

    The transport's reader thread, the gateway's HTTP threads and the runner all append
    concurrently; one lock gives a single total order, which is the order the cassette keeps.
    ``sink`` (if set) is called with each event under the lock, so a streaming cassette writer
    sees events in exactly ``seq`` order.
    """

    events: list[Event] = field(default_factory=list)
    sink: Callable[[Event], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _t0: float = field(default_factory=time.monotonic, repr=False, compare=False)

    def append(self, kind: str, data: Mapping[str, Any]) -> Event:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {sorted(EVENT_KINDS)}")
        data = clip_depth(dict(data))
        with self._lock:
            ev = Event(seq=len(self.events), t=round(time.monotonic() - self._t0, 6),
                       kind=kind, data=data)
            self.events.append(ev)
            if self.sink is not None:
                self.sink(ev)
            return ev

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self.events))

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> History:
        return cls(events=list(events))

    # -- typed views used by oracles, reports and tests --------------------------------------

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.snapshot() if e.kind == kind]

    def model_exchanges(self) -> list[tuple[Event, ModelExchange]]:
        return [(e, ModelExchange.from_wire(e.data)) for e in self.of_kind("model")]

    def acp_messages(self, direction: str | None = None) -> list[tuple[Event, Any]]:
        out = []
        for e in self.of_kind("acp"):
            if direction is None or e.data.get("dir") == direction:
                out.append((e, e.data.get("msg")))
        return out
