"""How a system prompt travels on the wire: the standard field and the legacy dialects (pure).

Steps, strategies and oracles always speak the *standard* form (``{"mode", "content"}``): it is
the harness's statement of intent. A dialect only changes the encoding on the wire:

``standard``
    ``params.systemPrompt`` on new, load, resume and fork (the RFD; docs/rules.md).
``claude-meta``
    ``params._meta.systemPrompt`` on ``session/new``: a string replaces the preset (override),
    ``{"append": text}`` appends (claude-agent-acp since v0.6.0; docs/rules.md).
``pi-meta``
    The same shapes, advertised as ``agentCapabilities._meta.piAcp.systemPrompt``
    (``{"replace", "append", "persisted"}``; pi-acp PR #124).
``goose``
    An extension request after ``session/new``:
    ``_goose/unstable/session/system-prompt/set {sessionId, mode: "set"|"append", text}``.

Legacy dialects carry a prompt on ``session/new`` only (none of them defines re-sending on
load, resume or fork), and the RFD's MUSTs do not govern vendor extensions: a payload that is
invalid in the standard form is sent as a robustness probe and scored as info.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from acp_fuzz.core.payloads import Capabilities, blocks_of

__all__ = ["DIALECTS", "GOOSE_METHOD", "capabilities", "detect", "encode_meta", "goose_params",
           "resolve"]

DIALECTS = ("standard", "claude-meta", "pi-meta", "goose")
#: What ``--dialect`` accepts: a dialect, or ``auto`` (detected from ``initialize``).
CHOICES = ("auto", *DIALECTS)
GOOSE_METHOD = "_goose/unstable/session/system-prompt/set"


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def detect(init: Any) -> str:
    """The dialect an agent speaks, from its ``initialize`` result.

    The standard capability wins wherever it is advertised (claude-agent-acp advertises both
    it and its old ``_meta`` form)."""
    caps = _get(init, "agentCapabilities")
    if isinstance(_get(caps, "sessionCapabilities", "systemPrompt"), Mapping):
        return "standard"
    if isinstance(_get(caps, "_meta", "piAcp", "systemPrompt"), Mapping):
        return "pi-meta"
    name = str(_get(init, "agentInfo", "name") or "").lower()
    if "goose" in name:
        return "goose"
    if isinstance(_get(caps, "_meta", "claudeCode"), Mapping):
        return "claude-meta"
    return "standard"


def resolve(choice: str, init: Any) -> str:
    """The dialect to use: ``choice``, or the detected one for ``auto``."""
    if choice == "auto":
        return detect(init)
    if choice not in DIALECTS:
        raise ValueError(f"unknown dialect {choice!r} (known: {', '.join(CHOICES)})")
    return choice


def capabilities(dialect: str, init: Any) -> Capabilities:
    """What the lifecycle machine may draw for ``dialect``: the session capabilities the
    agent advertised, with ``systemPrompt`` support read the dialect's way."""
    base = Capabilities.from_initialize(init)
    if dialect == "standard":
        return base
    supported, override = True, True
    if dialect == "pi-meta":
        # pi-acp advertises its field; where it does not (every npm release up to 0.0.34),
        # a prompt sent that way is a probe, as an unadvertised standard one is, never a
        # prompt the agent owes the model.
        sp = _get(init, "agentCapabilities", "_meta", "piAcp", "systemPrompt")
        supported = isinstance(sp, Mapping) and bool(_get(sp, "append") or _get(sp, "replace"))
        override = supported and bool(_get(sp, "replace"))
    # Everything else is read from initialize as for the standard field.
    return replace(base, system_prompt=supported, override=override)


def not_honoured(dialect: str, init: Any) -> str | None:
    """Why a prompt sent in ``dialect`` is not one the agent says it honours, or None."""
    if dialect == "pi-meta" and not capabilities(dialect, init).system_prompt:
        return ("the agent does not advertise agentCapabilities._meta.piAcp.systemPrompt: "
                "its _meta.systemPrompt is not honoured here, and each prompt sent that way "
                "is a probe (info), not judged as applied")
    return None


def encode_meta(sp: Any) -> Any:
    """The ``_meta.systemPrompt`` value for a standard payload (claude-meta, pi-meta).

    A valid payload becomes a string (override) or ``{"append": text}``; anything else is
    passed through unchanged, as a probe."""
    if not isinstance(sp, Mapping) or sp.get("mode") not in ("append", "override"):
        return sp
    text = "\n\n".join(blocks_of(sp))
    return text if sp["mode"] == "override" else {"append": text}


def goose_params(session_id: str, sp: Any) -> dict[str, Any]:
    """Params of the Goose extension request for a standard payload."""
    if isinstance(sp, Mapping) and sp.get("mode") in ("append", "override"):
        mode = "set" if sp["mode"] == "override" else "append"
        return {"sessionId": session_id, "mode": mode, "text": "\n\n".join(blocks_of(sp))}
    return {"sessionId": session_id, "mode": "append", "text": sp}
