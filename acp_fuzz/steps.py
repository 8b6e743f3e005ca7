"""Lifecycle steps: the client side of a run, as data (pure).

A step is a small msgpack-friendly mapping such as ``{"op": "new", "session": "A",
"systemPrompt": {...}}``. Sessions are *logical handles* (``A``, ``B``, ...) that the runner maps
to the agent's own session ids, so the same steps drive any agent, and a recorded run can be
re-driven against a new build of the agent (replay).

The ``systemPrompt`` key follows the wire: absent means the field is omitted from the request,
``None`` means an explicit ``null``. A load, new, resume or fork may carry ``extra``: more
request params sent as they are beside the prompt (a vendor ``_meta`` with a legacy prompt,
a field of an old draft), recorded in the step so that the oracles know what was sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp_fuzz.history import Event

__all__ = ["OPS", "describe", "elsewhere", "nonce_for", "prompt_text", "steps_of",
           "validate_step"]

#: The most ``additionalDirectories`` a load, resume or fork step asks for.
MAX_ROOTS = 4

OPS = ("new", "prompt", "load", "resume", "fork", "close", "delete", "set_mode",
       "set_config_option", "set_title", "list", "cancel", "restart", "invalid")


def nonce_for(session: str, turn: int, salt: str = "") -> str:
    """The nonce the harness puts into turn ``turn`` of ``session``.

    It is derived from the logical handle, the turn number and the run's ``salt`` (random per
    run, see :class:`acp_fuzz.runner.Run`), so the gateway can tie each model request to its
    turn, and another process cannot compute the nonce of a turn to forge a request for it.
    Comparisons across runs replace it with ``<nonce>`` (``replay.normalize_transcript``).
    """
    digest = hashlib.sha256(f"{salt}:{session}:{turn}".encode()).hexdigest()[:12]
    return f"acpfuzz-{digest}"


def prompt_text(session: str, turn: int, salt: str = "") -> str:
    """The text of the harness's ``session/prompt`` for this turn, nonce included."""
    nonce = nonce_for(session, turn, salt)
    return f"Reply with ok. This is turn {turn} of session {session}. [{nonce}]"


def validate_step(step: Any) -> dict[str, Any]:
    """Check that ``step`` is a well-formed step and return it as a plain dict.

    Steps come from cassettes, which may come from strangers: a malformed one raises
    ``ValueError`` with a one-line reason instead of failing later in the runner.
    """
    if not isinstance(step, Mapping):
        raise ValueError(f"a step must be a map, got {type(step).__name__}")
    op = step.get("op")
    if op not in OPS:
        raise ValueError(f"unknown step op {op!r}")
    needs_session = op not in ("list", "restart", "invalid")
    if needs_session and not isinstance(step.get("session"), str):
        raise ValueError(f"step {op!r} needs a string 'session'")
    if op == "fork" and not isinstance(step.get("new"), str):
        raise ValueError("step 'fork' needs a string 'new'")
    if op == "invalid" and not isinstance(step.get("method"), str):
        raise ValueError("step 'invalid' needs a string 'method'")
    for key in ("pick", "option"):
        if op in ("set_mode", "set_config_option") and (
                not isinstance(step.get(key, 0), int) or isinstance(step.get(key, 0), bool)):
            raise ValueError(f"step {op!r}: {key!r} must be an integer")
    if op in ("load", "resume", "fork"):
        if step.get("cwd", "same") not in ("same", "moved"):
            raise ValueError(f"step {op!r}: 'cwd' must be 'same' or 'moved'")
        roots = step.get("roots", 0)
        if not isinstance(roots, int) or isinstance(roots, bool) or not 0 <= roots <= MAX_ROOTS:
            raise ValueError(f"step {op!r}: 'roots' must be an integer from 0 to {MAX_ROOTS}")
    if op in ("load", "resume") and not isinstance(step.get("busy", False), bool):
        raise ValueError(f"step {op!r}: 'busy' must be true or false")
    if op == "set_title" and not isinstance(step.get("title", ""), str):
        raise ValueError("step 'set_title': 'title' must be a string")
    if "extra" in step and not isinstance(step["extra"], Mapping):
        raise ValueError(f"step {op!r}: 'extra' must be a map of request params")
    return dict(step)


def describe(step: Mapping[str, Any], protocol: int = 1) -> str:
    """One human line for a step (used by ``show``, reports and progress), as the
    ``protocol`` version sends it (v2 sends a load as a resume that replays from the start)."""
    op = step.get("op")
    if op == "load" and protocol >= 2:
        return f"session/resume {step['session']} (replayFrom start){_sp_dirs(step)}"
    sp = _sp_dirs(step)
    if op == "new":
        return f"session/new {step['session']}{sp}"
    if op == "fork":
        return f"session/fork {step['session']} -> {step['new']}{sp}"
    if op in ("load", "resume"):
        return f"session/{op} {step['session']}{sp}"
    if op == "prompt":
        return f"session/prompt {step['session']}"
    if op in ("close", "delete"):
        return f"session/{op} {step['session']}"
    if op == "set_mode":
        return (f"session/set_mode {step['session']} (another of its modes, "
                f"choice {step.get('pick', 0)})")
    if op == "set_config_option":
        return (f"session/set_config_option {step['session']} (option {step.get('option', 0)}, "
                f"another of its values, choice {step.get('pick', 0)})")
    if op == "set_title":
        return f"session/set_title {step['session']} ({len(str(step.get('title', '')))} chars)"
    if op == "cancel":
        return f"session/prompt {step['session']} + session/cancel"
    if op == "list":
        return "session/list"
    if op == "restart":
        return "restart the agent process"
    if op == "invalid":
        return f"{step.get('method')} (invalid request: {step.get('why', '')})"
    return str(op)


def elsewhere(step: Mapping[str, Any]) -> bool:
    """Whether a load, resume or fork step runs its session in a new directory or with
    additional roots (``"cwd": "moved"``, ``"roots"``)."""
    return step.get("op") in ("load", "resume", "fork") and (
        step.get("cwd") == "moved" or bool(step.get("roots")))


def _dirs_label(step: Mapping[str, Any]) -> str:
    if step.get("op") not in ("load", "resume", "fork"):
        return ""
    out = " in a new directory" if step.get("cwd") == "moved" else ""
    roots = step.get("roots", 0)
    out += f" with {roots} additional root(s)" if roots else ""
    return out + (" while a turn of it runs" if step.get("busy") else "")


def _sp_dirs(step: Mapping[str, Any]) -> str:
    return _sp_label(step) + _dirs_label(step)


def _sp_label(step: Mapping[str, Any]) -> str:
    extra = step.get("extra")
    if isinstance(extra, Mapping) and extra:
        return _sp_label({k: v for k, v in step.items() if k != "extra"})[:-1] \
            + f"; also {', '.join(sorted(map(str, extra)))})"
    if "systemPrompt" not in step:
        return " (systemPrompt omitted)"
    sp = step["systemPrompt"]
    if sp is None:
        return " (systemPrompt null)"
    if isinstance(sp, Mapping):
        mode = sp.get("mode")
        content = sp.get("content")
        n = len(content) if isinstance(content, list) else "?"
        return f" (systemPrompt {mode!r}, {n} block(s))"
    return f" (systemPrompt {type(sp).__name__})"


def steps_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The steps a recorded history ran, in order (what a cassette replays)."""
    return [dict(e.data["args"]) for e in events if e.kind == "step"]
