"""NDJSON framing (pure): bytes as they come off a pipe in, complete lines out.

ACP is one JSON message per line (FR-WIRE-NDJSON-MUST). An agent is a stranger, so its
stdout may hold a line of gigabytes, half a line before it dies, or bytes that are not UTF-8.
:class:`LineAssembler` keeps memory bounded whatever it is fed: a line longer than
``max_line_bytes`` is never held whole (a head is kept and the rest only counted), and a
line cut off by the end of the stream is handed back by :meth:`LineAssembler.finish`.
:func:`parse_line` turns one line into a JSON object or names what is wrong with it.

The transport (:class:`acp_fuzz.engine.process.transport.AgentProcess`) feeds it from its reader
thread; ``tests/cover/test_lines.py`` feeds it directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["BAD_LINE_MAX", "OVERSIZE_HEAD", "LineAssembler", "parse_line"]

#: How much of an oversize line is kept to show (the rest is only counted).
OVERSIZE_HEAD = 4 * 1024
#: How much of a bad (unparsable) or cut-off line is kept to show.
BAD_LINE_MAX = 64 * 1024


class LineAssembler:
    """Assemble lines from chunks. ``on_line(line)`` gets each complete line of at most
    ``max_line_bytes`` (without its ``\\n``, nor the ``\\r`` of a CRLF line end);
    ``on_oversize(head, size)`` each longer one: its
    first :data:`OVERSIZE_HEAD` bytes and its full length. Both are called from
    :meth:`feed`, in stream order."""

    def __init__(self, max_line_bytes: int, on_line: Callable[[bytes], None],
                 on_oversize: Callable[[bytes, int], None]) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self._on_line = on_line
        self._on_oversize = on_oversize
        self._parts: list[bytes] = []
        self._part_len = 0
        self._discarding = False
        self._discard_head = b""
        self._discard_size = 0

    def feed(self, data: bytes) -> None:
        start = 0
        end = len(data)
        cap = self.max_line_bytes
        while start < end:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._append(data[start:])
                return
            if not self._part_len and not self._discarding:
                # The common case, a whole line in one chunk: no copy into the buffer.
                if nl - start <= cap:
                    self._on_line(_chomp(data[start:nl]))
                else:
                    self._on_oversize(data[start:min(nl, start + OVERSIZE_HEAD)], nl - start)
            else:
                self._append(data[start:nl])
                self._finish_line()
            start = nl + 1

    def finish(self) -> tuple[bytes, int] | None:
        """The end of the stream: the line it cut off, if any (its head, at most
        :data:`BAD_LINE_MAX` bytes, and its length), and the assembler is empty again."""
        if self._discarding:
            head, size = self._discard_head, self._discard_size
        elif self._part_len:
            joined = b"".join(self._parts)
            head, size = joined[:BAD_LINE_MAX], len(joined)
        else:
            return None
        self._reset()
        return head, size

    @property
    def pending(self) -> int:
        """Bytes of the line being assembled (counted, for an oversize one)."""
        return self._discard_size if self._discarding else self._part_len

    def _reset(self) -> None:
        self._parts = []
        self._part_len = 0
        self._discarding = False
        self._discard_head = b""
        self._discard_size = 0

    def _append(self, piece: bytes) -> None:
        if self._discarding:
            self._discard_size += len(piece)
            return
        if self._part_len + len(piece) <= self.max_line_bytes:
            self._parts.append(piece)
            self._part_len += len(piece)
            return
        # Too long: keep only a head and count the rest, never the whole line.
        head = bytearray()
        for part in (*self._parts, piece):
            head += part[: OVERSIZE_HEAD - len(head)]
            if len(head) >= OVERSIZE_HEAD:
                break
        size = self._part_len + len(piece)
        self._reset()
        self._discarding = True
        self._discard_head = bytes(head)
        self._discard_size = size

    def _finish_line(self) -> None:
        if self._discarding:
            head, size = self._discard_head, self._discard_size
            self._reset()
            self._on_oversize(head, size)
            return
        line = b"".join(self._parts)
        self._reset()
        self._on_line(_chomp(line))


def _chomp(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def _reject_constant(name: str) -> Any:
    # NaN / Infinity are not JSON (RFC 8259) although Python's parser accepts them.
    raise ValueError(f"{name} is not valid JSON")


DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """One line (as :class:`LineAssembler` hands it over) as a JSON object, or
    ``(None, problem)``: ``invalid-utf8``, ``invalid-json`` (NaN and Infinity included) or
    ``not-object``."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid-utf8"
    try:
        obj = DECODER.decode(text)
    except (ValueError, RecursionError):
        return None, "invalid-json"
    if not isinstance(obj, dict):
        return None, "not-object"
    return obj, None
