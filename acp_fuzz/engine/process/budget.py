"""What the stdio transport records of the agent's lines (engine): the recording budgets.

Four kinds of line from the agent are recorded only up to a bound each (see the module docs of
:mod:`acp_fuzz.engine.process.transport`): notifications, the agent's own requests and their
answers, answers to no request in flight, and lines that are not well-formed JSON-RPC. Each
kind has a :class:`_Budget`; :class:`Budgets` holds the four of one process. Every byte budget
weighs a line by what it costs parsed (:func:`line_weight`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "MAX_RECORDED_BAD_BYTES",
    "MAX_RECORDED_BAD_LINES",
    "MAX_RECORDED_CLIENT_REQUESTS",
    "MAX_RECORDED_CLIENT_REQUEST_BYTES",
    "MAX_RECORDED_STRAY_BYTES",
    "MAX_RECORDED_STRAY_RESPONSES",
    "Budgets",
    "line_weight",
]

#: What is recorded of the agent's own requests and of their answers, per process (see the
#: transport module docs). Generous for real agents: a turn asks for a permission or a file or two.
MAX_RECORDED_CLIENT_REQUESTS = 2_000
MAX_RECORDED_CLIENT_REQUEST_BYTES = 8 * 1024 * 1024
#: What is recorded of answers to no request in flight, per process: evidence of a bug after
#: the first one, never a conversation to judge.
MAX_RECORDED_STRAY_RESPONSES = 1_000
MAX_RECORDED_STRAY_BYTES = 4 * 1024 * 1024
#: What is recorded of lines that are not (well-formed) JSON-RPC messages, per process.
MAX_RECORDED_BAD_LINES = 1_000
MAX_RECORDED_BAD_BYTES = 4 * 1024 * 1024


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


class Budgets:
    """The recording budgets of one process: ``notes`` (notifications), ``asks`` (the agent's
    requests and their answers), ``strays`` (answers to no request in flight) and ``bad``
    (lines that are not well-formed JSON-RPC messages), each a ``(limit, limit_bytes)``.

    The reader thread alone uses all but the client requests' one, which the client handler
    shares (under the agent's lock) for the answers. ``capped`` records where recording of a
    kind stopped (the agent's ``-capped`` event)."""

    __slots__ = ("all", "asks", "bad", "capped", "notes", "reported", "strays")

    def __init__(self, *, notes: tuple[int | None, int | None],
                 asks: tuple[int | None, int | None], strays: tuple[int | None, int | None],
                 bad: tuple[int | None, int | None], capped: Callable[[_Budget], None]) -> None:
        self.notes = _Budget("notifications", *notes)
        self.asks = _Budget("client-requests", *asks)
        self.asks.extra.update(answers=0, unanswered=0)
        self.strays = _Budget("stray-responses", *strays)
        self.bad = _Budget("bad-lines", *bad)
        self.all = (self.notes, self.asks, self.strays, self.bad)
        self.capped = capped
        self.reported = False  # the -dropped events were recorded

    def take(self, budget: _Budget, size: int) -> bool:
        """Record one more line of ``budget``'s kind? The first one past it is marked in the
        history (for the client requests' budget, shared with the handler: the caller holds
        the agent's lock and marks it)."""
        if budget.take(size):
            return True
        if budget.dropped == 1 and budget is not self.asks:
            self.capped(budget)
        return False

    def dropped(self) -> dict[str, int]:
        """The counts of :attr:`AgentProcess.dropped`. The caller holds the agent's lock."""
        out = {b.kind: b.dropped for b in self.all}
        out.update(self.asks.extra)
        return out

    def report_once(self) -> list[tuple[_Budget, int, dict[str, int]]]:
        """Each budget with its dropped count and further counts, the first time only (then
        nothing): what the ``-dropped`` events say. The caller holds the agent's lock."""
        if self.reported:
            return []
        self.reported = True
        return [(b, b.dropped, dict(b.extra)) for b in self.all]
