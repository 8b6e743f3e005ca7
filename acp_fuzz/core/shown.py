"""What an agent shows the client beside its model requests (pure): the texts of a
``session/update``, of an error answer, and the lines of its stderr. A client prompt can
surface on each of them (``prompt.leak``, ``prompt.replayed-as-user``): this module only
finds the texts, the checks in :mod:`acp_fuzz.core.builtin` judge them.

Everything here reads what an agent chose to send, so it expects anything: every walk is
bounded in depth, in count and in length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_LINE", "USER_MESSAGES", "StderrLines", "error_texts", "handles_named",
           "strings", "update_of", "user_texts"]

#: The ``sessionUpdate`` kinds that show the client a user message: v1's chunks (a load's
#: replay), v2's whole messages (a replay, or a turn's echo).
USER_MESSAGES = ("user_message_chunk", "user_message")
#: How many strings one walk collects, and how deep it goes.
_MAX_STRINGS = 64
_MAX_DEPTH = 8
#: A stderr line longer than this is judged in pieces of this size (a log line that never
#: ends must not grow without bound).
MAX_LINE = 64 * 1024
#: What may stand next to a session id in a log line without being part of it.
_ID_CHAR = r"[A-Za-z0-9_\-]"


def strings(v: Any, path: str = "", *, depth: int = 0,
            out: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """Every string in ``v`` with its path (``update.content.text``), at most
    :data:`_MAX_STRINGS` of them, no deeper than :data:`_MAX_DEPTH`."""
    out = [] if out is None else out
    if depth > _MAX_DEPTH or len(out) >= _MAX_STRINGS:
        return out
    if isinstance(v, str):
        out.append((path, v))
    elif isinstance(v, Mapping):
        for k, x in list(v.items())[:_MAX_STRINGS]:
            strings(x, f"{path}.{k}" if path else str(k), depth=depth + 1, out=out)
    elif isinstance(v, list):
        for i, x in enumerate(v[:_MAX_STRINGS]):
            strings(x, f"{path}[{i}]", depth=depth + 1, out=out)
    return out


def update_of(msg: Any) -> tuple[str, Mapping[str, Any]] | None:
    """``(sessionId, update)`` of a ``session/update`` notification, else ``None``."""
    if not isinstance(msg, Mapping) or msg.get("method") != "session/update" or "id" in msg:
        return None
    params = msg.get("params")
    if not isinstance(params, Mapping):
        return None
    sid, update = params.get("sessionId"), params.get("update")
    if not isinstance(sid, str) or not isinstance(update, Mapping):
        return None
    return sid, update


def user_texts(update: Mapping[str, Any]) -> list[str]:
    """The texts of a user message the update shows (its text content blocks), or ``[]``
    for any other update."""
    if update.get("sessionUpdate") not in USER_MESSAGES:
        return []
    content = update.get("content")
    blocks = content if isinstance(content, list) else [content]
    return [b["text"] for b in blocks[:_MAX_STRINGS]
            if isinstance(b, Mapping) and isinstance(b.get("text"), str)]


def error_texts(error: Any) -> list[tuple[str, str]]:
    """The texts of a JSON-RPC error object: its ``message`` and every string of its
    ``data``."""
    if not isinstance(error, Mapping):
        return []
    out = [("error.message", error["message"])] if isinstance(error.get("message"), str) else []
    return strings(error.get("data"), "error.data", out=out)


@dataclass
class StderrLines:
    """Cuts the stderr chunks of each agent process (``generation``) into whole lines, so
    that what a check reads does not depend on how the pipe split the text."""

    pending: dict[int, str] = field(default_factory=dict)

    def feed(self, text: str, generation: int) -> list[str]:
        """The lines ``text`` completes for its process (a line longer than
        :data:`MAX_LINE` comes out in pieces)."""
        buf = self.pending.get(generation, "") + text
        *lines, rest = buf.split("\n")
        while len(rest) > MAX_LINE:
            lines.append(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        self.pending[generation] = rest
        return lines


def handles_named(line: str, ids: Iterable[tuple[str, str]]) -> set[str]:
    """The session handles whose agent session id stands in ``line`` as a word of its own
    (``sess-1`` is not named by ``sess-10``). ``ids``: (agent id, handle) pairs."""
    out = set()
    for sid, handle in ids:
        if sid and sid in line and re.search(
                rf"(?<!{_ID_CHAR}){re.escape(sid)}(?!{_ID_CHAR})", line):
            out.add(handle)
    return out
