"""Deadlines learned from the agent: how long a campaign waits for each answer (engine).

``--timeout`` is what a user is willing to wait for one answer (30 s by default). Waiting that
long on every trial of a hang made an ``agent.hang`` finding cost minutes: every shrink trial
and every confirmation run paid the full timeout. Instead, every answer is timed, per method,
from calibration on (whose requests, the first of their method, may take the full timeout),
and each request waits at most::

    deadline(method) = min(ceiling, max(FLOOR, MULTIPLE × slowest answer seen for method))

with ``MULTIPLE`` = 10, ``FLOOR`` = 2 s and the ceiling ``--timeout`` (for ``initialize``, the
target's start-up timeout). A method not timed yet uses the largest deadline learned. A
deadline only grows, as the agent shows it needs more.

A request that outlives its learned deadline is not yet a hang. The first time a method overruns
its deadline, the request is given the rest of the ceiling (so the full ``--timeout``):

* the answer comes: the agent is slow, not hung; the step goes on as normal and the method's
  deadline grows to ``MULTIPLE`` times that answer's time (capped at the ceiling). A slow agent
  is never called hung.
* it does not: the hang is confirmed with the full timeout, once. From then on that method's
  learned deadline is trusted, so shrinking the hang and the confirmation runs each wait only
  the learned deadline, not ``--timeout``.

:attr:`Deadlines.full_waits` counts the waits to the full timeout; :meth:`Deadlines.to_wire`
goes into each finding cassette's settings (``deadlines``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FLOOR", "MULTIPLE", "Deadlines"]

#: A request waits at most this many times the agent's slowest answer to its method ...
MULTIPLE = 10.0
#: ... and never less than this many seconds (a loaded machine, a cold cache, a GC pause).
FLOOR = 2.0


class Deadlines:
    """Per-method deadlines learned from answer times, under a ceiling. Thread-safe: the
    pre-spawn thread's ``initialize`` and the example's requests share one."""

    def __init__(self, ceiling: float, times: Mapping[str, float] | None = None) -> None:
        self.ceiling = ceiling
        self._slowest: dict[str, float] = {}
        #: methods whose overrun was confirmed as a hang with the full timeout
        self._confirmed: set[str] = set()
        #: how many times a request was given the full timeout (each first overrun)
        self.full_waits = 0
        self._lock = threading.Lock()
        for method, seconds in (times or {}).items():
            self.observe(method, seconds)

    def observe(self, method: str, seconds: float) -> None:
        """An answer to ``method`` took ``seconds``."""
        with self._lock:
            self._slowest[method] = max(seconds, self._slowest.get(method, 0.0))

    def deadline(self, method: str, ceiling: float | None = None) -> float:
        """How long a request of ``method`` waits before it counts as overdue."""
        top = self.ceiling if ceiling is None else ceiling
        with self._lock:
            slowest = self._slowest.get(method)
            if slowest is None:
                slowest = max(self._slowest.values(), default=top / MULTIPLE)
        return min(top, max(FLOOR, MULTIPLE * slowest))

    def trusted(self, method: str) -> bool:
        """Whether an overrun of ``method`` is a hang without another full wait."""
        with self._lock:
            return method in self._confirmed

    def overran(self, method: str, answered_after: float | None) -> None:
        """A request of ``method`` was given the full timeout: answered after that many
        seconds (slow, not hung), or ``None`` (a hang, now confirmed)."""
        with self._lock:
            self.full_waits += 1
            if answered_after is None:
                self._confirmed.add(method)
        if answered_after is not None:
            self.observe(method, answered_after)

    def to_wire(self) -> dict[str, Any]:
        with self._lock:
            methods = sorted(self._slowest)
            slowest = dict(self._slowest)
            confirmed = sorted(self._confirmed)
            full = self.full_waits
        return {"multiple": MULTIPLE, "floor": FLOOR, "ceiling": self.ceiling,
                "deadlines": {m: round(self.deadline(m), 3) for m in methods},
                "slowest": {m: round(slowest[m], 3) for m in methods},
                "hang_confirmed": confirmed, "full_waits": full}

    @classmethod
    def merged(cls, wires: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Several campaigns' deadlines (:meth:`to_wire`, ``{}`` for none) as one: the
        slowest answer of each method, every confirmed hang, the full waits summed."""
        learned = [cls.from_wire(w) for w in wires if w]
        if not learned:
            return {}
        out = cls(learned[0].ceiling)
        for d in learned:
            for method, seconds in d._slowest.items():
                out.observe(method, seconds)
            out._confirmed |= d._confirmed
            out.full_waits += d.full_waits
        return out.to_wire()

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Deadlines:
        """The deadlines that :meth:`to_wire` described: the ceiling, the slowest answers
        (to the millisecond, as ``to_wire`` rounds them), the confirmed hangs and the full
        waits. ``deadlines``, ``multiple`` and ``floor`` are derived, and not read back."""
        out = cls(float(wire["ceiling"]), {str(m): float(s) for m, s in wire["slowest"].items()})
        out._confirmed = {str(m) for m in wire["hang_confirmed"]}
        out.full_waits = int(wire["full_waits"])
        return out

