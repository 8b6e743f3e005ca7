"""What an agent advertises holds (pure): ``capability.drift``, an ``initialize`` answer that
advertises other capabilities than the run's first one (a restarted process of the same
command, HOME and offer), and ``capability.refused``, a method its advertised capability
gates answered ``-32601`` Method not found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acp_fuzz.core.builtin.evidence import clip
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import gated
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.sessions import IDS

__all__ = ["GATED", "advertised", "capabilities", "changed_paths", "without_meta"]

#: The methods an advertised capability makes available, and the flags of
#: :class:`acp_fuzz.core.payloads.Capabilities` (as the ``initialize`` verdict records them)
#: that advertise each (v2's resume replaying from the start is its load): read from the ops
#: table, so that a new gated op is judged here without a line of this module.
GATED: dict[str, tuple[str, ...]] = gated(Capabilities.advertised_flags())
METHOD_NOT_FOUND = -32601


@dataclass
class _First:
    """The run's first ``initialize`` answer: its event and what it advertised."""

    seq: int = -1
    caps: Any = None


def advertised(result: Mapping[str, Any]) -> dict[str, Any]:
    """What an ``initialize`` result advertises: its protocol version and capabilities (v1
    ``agentCapabilities``, v2 ``capabilities``), every ``_meta`` left out (vendor data, which
    may change with anything)."""
    return {"protocolVersion": result.get("protocolVersion"),
            "capabilities": without_meta(result.get("agentCapabilities",
                                                     result.get("capabilities")), 0)}


def without_meta(v: Any, depth: int) -> Any:
    if depth > 16:
        return v
    if isinstance(v, Mapping):
        return {k: without_meta(x, depth + 1) for k, x in v.items() if k != "_meta"}
    if isinstance(v, list):
        return [without_meta(x, depth + 1) for x in v]
    return v


def changed_paths(a: Any, b: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    """The paths where ``a`` and ``b`` differ (at most 20): ``capabilities.sessionCapabilities
    .fork`` for a key one has and the other lacks or holds otherwise."""
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b), key=str):
            changed_paths(a.get(k), b.get(k), f"{path}.{k}" if path else str(k), out)
    elif a != b:
        out.append(path or "(the whole answer)")
    return out


@builtin(
    "capability.drift", severity="SHOULD", rule="ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
    summary="a restarted agent process advertises other capabilities than the run's first (same "
            "command, HOME and protocol offer)",
    also=[
        ("capability.refused", "SHOULD", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
         "a method the agent's advertised capability gates answered -32601 Method not found"),
    ],
)
def capabilities(j: Judge, ev: Event) -> None:
    """Judge each answer to ``initialize`` against the run's first, and each error answer to
    a method an advertised capability gates."""
    if ev.kind != "acp" or ev.data.get("dir") == "send" or ev.data.get("error"):
        return
    msg = ev.data.get("msg")
    if not isinstance(msg, Mapping) or not isinstance(msg.get("id"), IDS):
        return
    method = j.tracker.requests.get(msg["id"])
    if method == "initialize" and isinstance(msg.get("result"), Mapping):
        _drift(j, advertised(msg["result"]), ev.seq)
    elif method in GATED and isinstance(msg.get("error"), Mapping):
        _refused(j, method, msg["error"], ev.seq)


def _drift(j: Judge, now: dict[str, Any], seq: int) -> None:
    first = j.memo(_First)
    if first.seq < 0:
        first.seq, first.caps = seq, now
        return
    j.judge_as("capability.drift")
    paths = changed_paths(first.caps, now)
    if paths:
        j.report_as("capability.drift",
                    f"the agent process started at step {j.tracker.index + 1} advertises other "
                    f"capabilities than the run's first: {', '.join(paths[:5])}",
                    acp_event=seq, first_event=first.seq, changed=paths,
                    first=clip(first.caps), now=clip(now))


def _refused(j: Judge, method: str, error: Mapping[str, Any], seq: int) -> None:
    caps = j.tracker.caps
    flags = [f for f in GATED[method] if caps.get(f) is True]
    if not flags:
        return
    j.judge_as("capability.refused")
    if error.get("code") == METHOD_NOT_FOUND:
        handle = j.tracker.args.get("session")
        j.report_as("capability.refused",
                    f"{method} answered -32601 Method not found, though the agent advertised "
                    f"it ({', '.join(flags)})",
                    session=handle if isinstance(handle, str) else None,
                    acp_event=seq, method=method, error=clip(dict(error)))
