"""Workspace instruction files (pure): which of them reach the model, per prompt mode.

The RFD lets override keep "Context the agent supplies from the workspace or environment —
project instruction files such as AGENTS.md, environment details, skill listings" (MAY) and
says "agents SHOULD document what they keep" (SP-AGENT-OVERRIDE-CONTEXT-MAY,
SP-AGENT-OVERRIDE-DOC-SHOULD). So the runner writes :data:`FILES` into every session's working
directory, each holding a canary of its folder and name (:func:`canary_for`; a folder can be
shared by sessions, so the canary is the folder's, not a session's), and records it in a
``workspace`` verdict; :func:`workspace_facts` counts, per prompt mode (``none``, ``append``,
``override``) and file, the turn requests that held the file's canary. Facts, never
verdicts: keeping a file under override is allowed, and so is dropping it.

Which pinned agent reads which: ``AGENTS.md`` (codex-acp, pi-acp, and the reference agent),
``CLAUDE.md`` (claude-agent-acp), ``GEMINI.md`` (gemini-cli), ``QWEN.md`` (qwen-code).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from acp_fuzz.core.builtin.scope import prompt_mode
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.sessions import SEP, ModelRequest, Tracker

__all__ = ["FILES", "Facts", "add_facts", "canary_for", "facts_to_wire", "file_text",
           "kept_lines", "workspace_facts"]

#: The instruction files written into every session's working directory.
FILES = ("AGENTS.md", "CLAUDE.md", "GEMINI.md", "QWEN.md")
#: mode -> file -> [turn requests that held its canary, turn requests judged].
Facts = dict[str, dict[str, list[int]]]


def canary_for(folder: str, name: str) -> str:
    """The canary of instruction file ``name`` in working directory ``folder`` (its name in
    the run's work folder): ``acpfuzz_ws_`` and 10 hex digits."""
    return "acpfuzz_ws_" + hashlib.sha256(f"ws:{folder}:{name}".encode()).hexdigest()[:10]


def file_text(folder: str, name: str) -> str:
    """What the file holds: one line, with its canary (so no line of it is the same in two
    folders, and calibration never learns it as the agent's own instructions)."""
    return (f"Workspace note {canary_for(folder, name)} from {name}: no special rules for "
            "this project.\n")


def workspace_facts(events: Iterable[Event]) -> Facts:
    """Per prompt mode and file, how many turn requests of a session whose prompt is settled
    held the file's canary from the session's working directory, of how many."""
    t = Tracker()
    folder: dict[str, dict[str, str]] = {}  # handle -> file -> canary
    out: Facts = {}
    for ev in events:
        change = t.plan(ev)
        if ev.kind == "verdict" and ev.data.get("what") == "workspace":
            _note(folder, ev.data)
        elif isinstance(change, ModelRequest) and change.route == "turn" \
                and change.session is not None and change.x.session in folder:
            mode = prompt_mode(change.session)
            if mode is not None:
                text = _text(change.x)
                for name, canary in folder[change.x.session].items():
                    n = out.setdefault(mode, {}).setdefault(name, [0, 0])
                    n[0] += canary in text
                    n[1] += 1
        t.apply(ev, change)
    return out


def _note(folder: dict[str, dict[str, str]], d: Mapping[str, Any]) -> None:
    handle, files = d.get("session"), d.get("files")
    if isinstance(handle, str) and isinstance(files, Mapping):
        folder[handle] = {str(k): v for k, v in files.items()
                          if isinstance(v, str) and k in FILES}


def _text(x: ModelExchange) -> str:
    return SEP.join(s.text for s in x.segments)


def add_facts(into: Facts, more: Mapping[str, Mapping[str, Any]]) -> None:
    """Add ``more``'s counts to ``into``."""
    for mode, files in more.items():
        for name, (shown, turns) in files.items():
            n = into.setdefault(mode, {}).setdefault(name, [0, 0])
            n[0] += shown
            n[1] += turns


def facts_to_wire(facts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """JSON's shape (``workspace_files`` of the campaign report)::

        {"files": ["AGENTS.md", ...],
         "by_mode": {"none": {"AGENTS.md": {"shown": 3, "turns": 3}, ...},
                     "append": {...}, "override": {...}}}

    ``turns``: the turn requests of sessions with that prompt mode (settled, in a folder the
    runner wrote the files into); ``shown``: how many of them held the file's canary. A mode
    no session had is absent."""
    return {"files": list(FILES), "by_mode": {
        mode: {name: {"shown": n[0], "turns": n[1]} for name, n in sorted(files.items())}
        for mode, files in sorted(facts.items())}}


def kept_lines(facts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per prompt mode: which files reached the model, and in how many turns."""
    out = []
    for mode in ("none", "append", "override"):
        files = facts.get(mode)
        if not files:
            continue
        seen = [f"{name} {n[0]}/{n[1]}" for name, n in sorted(files.items()) if n[0]]
        out.append(f"{mode}: " + (", ".join(seen) if seen else
                                  f"none of {', '.join(FILES)}"))
    return out
