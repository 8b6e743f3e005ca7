"""Huge prompt texts, written small: a mark that stands for a filler of a known size (pure).

A prompt of megabytes cannot be carried around as it is sent: a step is copied into every
``step`` event, the request into an ``acp`` event, the prompt into every model request the
gateway records, and all of it into cassettes (64 MiB at most, ``cassette.Limits``). So a
huge text is written as a **mark**, ``⟪acp-fuzz fill 8388608⟫``: the runner expands every
mark to its **filler** (:func:`filler`, exactly that many characters, the same at every
run) when it sends a request (:func:`expand`), and every recorded text has each whole
filler written back as its mark (:func:`compact`) where it is recorded. The exchange is
lossless (a filler is replaced only where all of it is there, character for character), so
the oracles judge the compact texts exactly as they would the full ones: a block ``⟪mark⟫
canary`` is in a request's compact text if and only if the filler and the canary after it
are in the request. A filler the agent cut short is written as a *cut mark*
(``⟪acp-fuzz fill 8388608 cut at 1048576⟫``): no block's text holds it, so the prompt is
missing from the request, as it is; what else is too long is clipped by the gateway, head
and tail around a marker that gives the length and SHA-256 of the whole.

Only the sizes of :data:`SIZES` have marks, so a cassette (which may come from a stranger)
cannot make acp-fuzz allocate more than :data:`MAX_EXPANDED` characters for one request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["CUT_MIN", "FILLER_HEAD", "LIMIT_SIZE", "MAX_EXPANDED", "SIZES", "compact",
           "compact_value", "cut_mark", "expand", "expand_value", "expanded_length", "filler",
           "mark", "marks_in", "may_hold_fill", "prompt_length", "without_marks"]

_MiB = 1024 * 1024
#: The line limit of the TypeScript SDK (``@agentclientprotocol/sdk`` 2.4.0,
#: ``core/stream-limits.js``: ``DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024``; a longer
#: line fails its ``ndJsonStream`` with ``MessageTooLargeError``). The Python SDK
#: (``agent-client-protocol`` 0.12.1) has none: its ``_read_line`` joins the chunks of an
#: overlong line after ``LimitOverrunError`` (its 50 MiB ``stdio_buffer_limit_bytes`` is a
#: buffer size, not a line limit). 32 MiB is the most a client can send an agent on either.
SDK_LINE_LIMIT = 32 * _MiB
#: The near-limit size: the TypeScript SDK's line limit less 64 KiB for the rest of the
#: line (the JSON-RPC envelope, the ``cwd`` and root paths, decorations, the canary): a
#: ``session/new`` with it fits in one line the SDK reads.
LIMIT_SIZE = SDK_LINE_LIMIT - 64 * 1024
#: The filler sizes a mark may name, by the class name the strategies give them.
SIZES: dict[str, int] = {"huge-1m": _MiB, "huge-8m": 8 * _MiB, "huge-limit": LIMIT_SIZE}
#: The most characters the marks of one request may expand to: one near-limit filler.
MAX_EXPANDED = LIMIT_SIZE

_OPEN, _CLOSE = "\u27ea", "\u27eb"
_MARK_RE = re.compile(_OPEN + r"acp-fuzz fill (\d{1,9})" + _CLOSE)
#: A mark-like text that came from the agent (or a cassette's text) is written with this
#: instead, so that it is never taken for a mark of ours when a history is read back.
_LITERAL = _OPEN + "acp-fuzz literal fill "
#: A filler cut short is written as a cut mark from this many characters on (shorter, it is
#: kept as text: the oracles' loose searches of a missing block read every segment whole).
CUT_MIN = 64 * 1024
#: The start of every filler: what :func:`compact` looks for (and what a reader of bytes can
#: look for before it walks a parsed value).
FILLER_HEAD = _HEAD = "[acp-fuzz filler: "
_HEAD_BYTES, _OPEN_BYTES = _HEAD.encode(), _OPEN.encode()
_UNIT = "lorem ipsum dolor sit amet "
#: Fillers are compared in pieces of this many characters (a whole number of units).
_PIECE = len(_UNIT) * 2048


def mark(n: int) -> str:
    """The mark of a filler of ``n`` characters (``n`` one of :data:`SIZES`)."""
    if n not in SIZES.values():
        raise ValueError(f"no filler of {n} characters (sizes: {sorted(SIZES.values())})")
    return f"{_OPEN}acp-fuzz fill {n}{_CLOSE}"


def _head(n: int) -> str:
    return f"{_HEAD}{n} characters] "


@lru_cache(maxsize=1)
def _piece() -> str:
    return _UNIT * (_PIECE // len(_UNIT))


def filler(n: int) -> str:
    """The text a mark of ``n`` stands for: ``[acp-fuzz filler: N characters] `` and then
    ``lorem ipsum dolor sit amet `` over and over, cut at exactly ``n`` characters (ASCII,
    so as many bytes on the wire)."""
    mark(n)  # only the known sizes
    head = _head(n)
    body = n - len(head)
    return head + _UNIT * (body // len(_UNIT)) + _UNIT[:body % len(_UNIT)]


def marks_in(text: str) -> list[int]:
    """The filler sizes the marks in ``text`` name, in order (known sizes only)."""
    return [int(m.group(1)) for m in _MARK_RE.finditer(text)
            if int(m.group(1)) in SIZES.values()]


def expanded_length(text: str) -> int:
    """How many characters ``text`` is once its marks are expanded."""
    return len(text) + sum(n - len(mark(n)) for n in marks_in(text))


def prompt_length(sp: object) -> int:
    """How many characters the blocks of a ``systemPrompt`` that have a ``text`` hold once
    their marks are expanded (0 for anything that is not such a prompt)."""
    content = sp.get("content") if isinstance(sp, Mapping) else None
    if not isinstance(content, list):
        return 0
    return sum(expanded_length(b["text"]) for b in content
               if isinstance(b, Mapping) and isinstance(b.get("text"), str))


def without_marks(text: str) -> str:
    """``text`` with its marks taken out (what is left of it besides its fillers)."""
    return _MARK_RE.sub("", text) if _OPEN in text else text


def expand(text: str) -> str:
    """``text`` with each mark of a known size replaced by its filler (a text without one is
    returned as it is)."""
    if _OPEN not in text:
        return text
    return _MARK_RE.sub(lambda m: filler(int(m.group(1))) if int(m.group(1)) in SIZES.values()
                        else m.group(0), text)


def _filler_at(text: str, i: int, n: int) -> int:
    """How many characters of :func:`filler` ``(n)`` stand in ``text`` from ``i`` on, its
    head whole (0 without it): ``n`` for all of it. Compared piece by piece, so no copy of
    the filler is made."""
    head = _head(n)
    if not text.startswith(head, i):
        return 0
    piece = _piece()
    at, end = i + len(head), min(i + n, len(text))
    while at < end:
        take = min(len(piece), end - at)
        if text[at:at + take] != piece[:take]:
            # Where the two part, within this piece: halve the span until one character.
            lo, hi = 0, take
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if text[at:at + mid] == piece[:mid]:
                    lo = mid
                else:
                    hi = mid
            return at + lo - i
        at += take
    return end - i


def cut_mark(n: int, kept: int) -> str:
    """How a recorded text writes the first ``kept`` characters of the filler of ``n`` (the
    agent cut the rest): never expanded, and no block's text holds it."""
    return f"{_OPEN}acp-fuzz fill {n} cut at {kept}{_CLOSE}"


def compact(text: str) -> str:
    """``text`` with every whole filler written as its mark, the first :data:`CUT_MIN` or
    more characters of one cut short as its :func:`cut_mark`, and a mark-like text that was
    already there written so that it is not one. The inverse of :func:`expand` on what it
    made: ``compact(expand(t)) == t`` for a text ``t`` whose marks all name known sizes."""
    if _OPEN in text:
        text = text.replace(_OPEN + "acp-fuzz fill ", _LITERAL)
    if _HEAD not in text:
        return text
    out: list[str] = []
    start = 0
    at = text.find(_HEAD)
    while at >= 0:
        n = _size_at(text, at)
        kept = _filler_at(text, at, n) if n is not None else 0
        if n is not None and kept >= min(n, CUT_MIN):
            # All of it: its mark. A filler cut short (an agent that keeps the first
            # megabytes of a prompt) is just as certain a text, and as large: a cut mark.
            out += [text[start:at], mark(n) if kept == n else cut_mark(n, kept)]
            start = at + kept
            at = text.find(_HEAD, start)
        else:
            at = text.find(_HEAD, at + 1)
    return "".join(out) + text[start:] if out else text


def _size_at(text: str, at: int) -> int | None:
    digits = text[at + len(_HEAD): at + len(_HEAD) + 10].split(" ", 1)[0]
    n = int(digits) if digits.isdigit() else None
    return n if n in SIZES.values() else None


def _walk(value: Any, fn: Any) -> Any:
    """``value`` (parsed JSON) with ``fn`` applied to every string; the same object where
    nothing changed, so a request without a mark is not copied."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        items = {k: _walk(v, fn) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in items) else items
    if isinstance(value, (list, tuple)):
        out = [_walk(v, fn) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def expand_value(value: Any) -> Any:
    """Parsed JSON with every string :func:`expand` ed (``value`` itself when none holds a
    mark)."""
    return _walk(value, expand)


def compact_value(value: Any) -> Any:
    """Parsed JSON with every string :func:`compact` ed (``value`` itself when nothing
    changed)."""
    return _walk(value, lambda s: compact(s) if may_hold_fill(s) else s)


def may_hold_fill(data: str | bytes) -> bool:
    """Whether ``data`` may hold a filler, one cut short or a mark-like text, and so is worth
    :func:`compact` (or, raw bytes of a line or a body, worth walking with
    :func:`compact_value`): a text long enough for a cut filler (:data:`CUT_MIN`), bytes that
    long that also hold the filler's head, or either holding a mark's opening bracket. Cheap:
    what cannot hold one is neither walked nor copied."""
    if isinstance(data, bytes):
        return (len(data) >= CUT_MIN and _HEAD_BYTES in data) or _OPEN_BYTES in data
    return len(data) >= CUT_MIN or _OPEN in data
