"""How the built-in checks quote what they saw (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_fuzz.core.history import ModelExchange

__all__ = ["clip", "said", "slot_of", "where"]


def said(protocol: int, op: Any) -> str:
    """A step op as the run sent it, for messages: v2 sends a load as a resume that replays
    from the start (SP-V2-NOLOAD-DEF)."""
    return "resume (replayFrom start)" if op == "load" and protocol >= 2 else str(op)


def slot_of(x: ModelExchange, text: str) -> str:
    for s in x.segments:
        if text in s.text:
            return s.slot
    return "other"


def where(x: ModelExchange, text: str, seq: int) -> dict[str, Any]:
    for s in x.segments:
        if text in s.text:
            i = s.text.index(text)
            return {"model_event": seq, "path": s.path, "slot": s.slot,
                    "excerpt": clip(s.text[max(0, i - 40): i + len(text) + 40])}
    return {"model_event": seq}


def clip(v: Any, n: int = 300) -> Any:
    if isinstance(v, str):
        return v if len(v) <= n else v[:n] + f"... [{len(v)} chars]"
    if isinstance(v, Mapping):
        return {k: clip(x, n) for k, x in list(v.items())[:20]}
    if isinstance(v, list):
        return [clip(x, n) for x in v[:20]]
    return v
