"""The model requests beside the turns, as evidence: side and untied requests (pure).

The fake model ties each request to the turn whose nonce sits in its newest user message; a
request a profile's ``[[side]]`` rule (or the built-in test) names is a *side* request, and
one that is neither is *untied* (``ModelExchange.side_kind``). Only the leak check judges
them, so a campaign with many untied requests judged little of what its agent sent. The
summary counts them; this module keeps what they were, so that there is something to look
at: each one's API, path, the first characters of each of its slots, and the step it came
after (:func:`beside_turns`), gathered over a campaign by :class:`SideLog`, distinct ones
counted once each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.slots import MODEL_APIS

__all__ = ["MAX_DISTINCT", "MODEL_APIS", "SLOT_CHARS", "BesideRequest", "SideLog",
           "beside_turns", "is_untied"]

#: How many characters of each slot a request's evidence keeps.
SLOT_CHARS = 80
#: Distinct requests a :class:`SideLog` keeps; the rest are counted.
MAX_DISTINCT = 50
_SLOTS = ("system", "user", "history")


def is_untied(x: ModelExchange) -> bool:
    """Whether ``x`` is an untied model request (older cassettes cannot say: ``False``)."""
    return x.side_kind == "untied"


@dataclass(frozen=True)
class BesideRequest:
    """One model request that is not a turn: ``kind`` (``untied``, ``side`` or
    ``compaction``), its API, method and path, the first :data:`SLOT_CHARS` characters of
    each slot that has text (``system``, ``user``, ``history``, in that order), and the step
    it came after (1-based ``step``, ``op``, ``session``, and ``turn`` for a turn's step; empty
    before the first step)."""

    kind: str
    api: str
    method: str
    path: str
    slots: tuple[tuple[str, str], ...]
    after: tuple[tuple[str, Any], ...] = ()
    #: The event's seq in its history.
    seq: int = -1

    def key(self) -> tuple[Any, ...]:
        """What makes two of them the same request: its kind, API, method, path and first
        slot (its instructions, usually), not where it came nor what else it carried (a
        digest of the sessions' prompts holds other text each time)."""
        return (self.kind, self.api, self.method, self.path, self.slots[:1])

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "api": self.api, "method": self.method, "path": self.path,
                "slots": {slot: text for slot, text in self.slots}, "after": dict(self.after)}


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SLOT_CHARS else text[:SLOT_CHARS] + "..."


def _after(step: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    if step is None:
        return ()
    args = step.get("args")
    args = args if isinstance(args, Mapping) else {}
    index = step.get("index")
    out: list[tuple[str, Any]] = [("step", index + 1 if isinstance(index, int) else None),
                                  ("op", args.get("op")), ("session", args.get("session"))]
    if isinstance(step.get("turn"), int):
        out.append(("turn", step["turn"]))
    return tuple(out)


def beside_turns(events: Iterable[Event]) -> list[BesideRequest]:
    """Every model request of a history that is not a turn (side or untied), served by the
    fake model (or upstream), in order. Refused requests (no token, a body it could not
    read) and APIs it does not serve are not model requests: the diagnosis counts them."""
    out: list[BesideRequest] = []
    step: Mapping[str, Any] | None = None
    for e in events:
        if e.kind == "step":
            step = e.data
            continue
        if e.kind != "model":
            continue
        x = ModelExchange.from_wire(e.data)
        if not x.side or x.api not in MODEL_APIS or (x.status >= 400 and not x.upstream):
            continue
        slots = tuple((slot, _clip("\n".join(texts))) for slot in _SLOTS
                      if (texts := [t for t in x.texts(slot) if t.strip()]))
        out.append(BesideRequest(x.side_kind or "side", x.api, x.method, x.path, slots,
                                 _after(step), e.seq))
    return out


@dataclass
class SideLog:
    """The side and untied requests of a campaign: each distinct one (:meth:`BesideRequest.key`)
    once, with how many times it came and in which example first; at most
    :data:`MAX_DISTINCT` kept, the rest counted."""

    kept: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    unkept: int = 0

    def add(self, events: Iterable[Event], example: int) -> list[BesideRequest]:
        """Note the requests beside the turns of one run (``example``: 0 for calibration);
        return them."""
        found = beside_turns(events)
        for r in found:
            entry = self.kept.get(r.key())
            if entry is not None:
                entry["count"] += 1
            elif len(self.kept) < MAX_DISTINCT:
                self.kept[r.key()] = {**r.to_wire(), "count": 1, "first_example": example}
            else:
                self.unkept += 1
        return found

    @classmethod
    def merged(cls, logs: Sequence[SideLog]) -> SideLog:
        """Several campaigns' logs (workers, shards) as one."""
        out = cls()
        for log in logs:
            out.merge(log)
        return out

    def merge(self, other: SideLog) -> None:
        """Add another campaign's (a worker's) log to this one."""
        for key, entry in other.kept.items():
            mine = self.kept.get(key)
            if mine is not None:
                mine["count"] += entry["count"]
            elif len(self.kept) < MAX_DISTINCT:
                self.kept[key] = dict(entry)
            else:
                self.unkept += entry["count"]
        self.unkept += other.unkept

    def to_wire(self) -> list[dict[str, Any]]:
        """The distinct requests, untied first, then by how often they came."""
        order = {"untied": 0, "side": 1, "compaction": 2}
        return sorted((dict(e) for e in self.kept.values()),
                      key=lambda e: (order.get(e["kind"], 3), -e["count"]))
