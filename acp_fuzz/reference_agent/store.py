"""Sessions on disk for the reference agent: one JSON file per session, plus a logical clock.

Layout under ``$HOME/.acp-fuzz-reference-agent/``::

    counter                 the logical clock (a decimal integer), shared by every process
    counter.lock            serialises updates of the counter between processes
    sessions/sess-<n>.json  one file per session

Every file is written atomically (temporary file in the same directory, flush, fsync,
``os.replace``), so a crash mid-write leaves the previous version intact, never half a file.

Nothing here reads the wall clock: session ids and ``updatedAt`` values both come from the
counter, so two runs that send the same requests from a fresh ``HOME`` see the same ids and the
same timestamps. Because the counter lives on disk, a restarted process never reuses an id.

Only the standard library is used, so this package can be copied out of acp-fuzz as is.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if sys.platform != "win32":
    import fcntl

# updatedAt = EPOCH + <counter> seconds: a valid ISO 8601 time that orders like the counter.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# Session ids are used as file names; anything else a client sends is simply "not found",
# which also rules out path traversal ("../../etc/passwd").
_SESSION_ID = re.compile(r"sess-[0-9]{1,18}")


@dataclass(frozen=True)
class SystemPrompt:
    """A validated client system prompt: the mode and the text of each content block."""

    mode: str  # "append" or "override"; validation rejects every other value
    texts: tuple[str, ...]

    def client_text(self) -> str:
        """The blocks joined with a blank line, verbatim (nothing is stripped)."""
        return "\n\n".join(self.texts)

    def to_json(self) -> dict[str, Any]:
        """The wire shape, minus ``_meta`` and unknown keys (they are never stored)."""
        return {"mode": self.mode, "content": [{"type": "text", "text": t} for t in self.texts]}

    @classmethod
    def from_json(cls, obj: Any) -> SystemPrompt | None:
        """Read what :meth:`to_json` wrote; ``None`` for a session without a client prompt."""
        if not isinstance(obj, dict):
            return None
        return cls(str(obj["mode"]), tuple(str(b["text"]) for b in obj["content"]))


@dataclass
class Session:
    """One conversation: where it runs, its client prompt and its history."""

    session_id: str
    cwd: str
    system_prompt: SystemPrompt | None
    created: int  # the counter value at creation; session/list orders by it
    updated_at: str
    # Each entry is {"role": "user" | "assistant", "content": <text>}, the Chat Completions shape;
    # an entry written by an ACP v2 turn also keeps its message id ({"id": "m<n>"}), which
    # never reaches the model.
    history: list[dict[str, str]] = field(default_factory=list)
    mode: str = "code"  # the session mode (session/set_mode); see agent.MODES
    model: str = "reference-model"  # the "model" config option (session/set_config_option)
    title: str | None = None  # set by the client (session/set_title), never generated
    # --variant defer-until-compaction: a changed prompt is held back until the next
    # compaction, across restarts too; ``held_prompt`` is the prompt still sent meanwhile.
    held: bool = False
    held_prompt: SystemPrompt | None = None
    # --variant compacting: a model reply reported the context nearly full, so the session
    # is compacted before its next turn; and how many compactions it had (their ids).
    compact_due: bool = False
    compactions: int = 0
    # --bug load-erases-session: gemini-cli refuses (and erases) a load only within the
    # minute the session was made; here the first load is that minute, every later one not.
    minute_passed: bool = False

    def to_json(self) -> dict[str, Any]:
        """The on-disk document."""
        return {
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "systemPrompt": self.system_prompt.to_json() if self.system_prompt else None,
            "history": self.history,
            "created": self.created,
            "updatedAt": self.updated_at,
            "mode": self.mode,
            "model": self.model,
            "title": self.title,
            "held": ({"systemPrompt": self.held_prompt.to_json() if self.held_prompt else None}
                     if self.held else None),
            "compactDue": self.compact_due,
            "compactions": self.compactions,
            "minutePassed": self.minute_passed,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Session:
        """Read what :meth:`to_json` wrote (raises on a malformed document)."""
        return cls(
            session_id=str(obj["sessionId"]),
            cwd=str(obj["cwd"]),
            system_prompt=SystemPrompt.from_json(obj.get("systemPrompt")),
            created=int(obj["created"]),
            updated_at=str(obj["updatedAt"]),
            history=[
                {"role": str(m["role"]), "content": str(m["content"]),
                 **({"id": str(m["id"])} if "id" in m else {})}
                for m in obj["history"]
            ],
            mode=str(obj.get("mode", "code")),
            model=str(obj.get("model", "reference-model")),
            title=str(obj["title"]) if obj.get("title") is not None else None,
            held=isinstance(obj.get("held"), dict),
            held_prompt=SystemPrompt.from_json(obj["held"].get("systemPrompt"))
            if isinstance(obj.get("held"), dict) else None,
            compact_due=obj.get("compactDue") is True,
            compactions=int(obj.get("compactions", 0)),
            minute_passed=obj.get("minutePassed") is True,
        )


def timestamp(tick: int) -> str:
    """The deterministic ``updatedAt`` for a counter value."""
    return (EPOCH + timedelta(seconds=tick)).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Leave no stray temporary file behind; the original file is untouched.
        Path(tmp).unlink(missing_ok=True)
        raise


class Store:
    """The sessions persisted under one directory (normally ``$HOME/.acp-fuzz-reference-agent``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sessions_dir = root / "sessions"

    def tick(self) -> int:
        """Advance the on-disk logical clock and return its new value (1, 2, 3, …)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "counter"
        with (self.root / "counter.lock").open("a") as lock:
            # Two agents sharing a HOME must not hand out the same id (POSIX only).
            if sys.platform != "win32":
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = int(path.read_text(encoding="utf-8").strip() or "0")
            except FileNotFoundError:
                current = 0
            write_atomically(path, f"{current + 1}\n")
            return current + 1

    def create(
        self, cwd: str, system_prompt: SystemPrompt | None, history: list[dict[str, str]]
    ) -> Session:
        """Create, persist and return a new session with a never-used id."""
        tick = self.tick()
        session = Session(f"sess-{tick}", cwd, system_prompt, tick, timestamp(tick), history)
        self._write(session)
        return session

    def save(self, session: Session) -> None:
        """Persist a changed session; its ``updatedAt`` moves forward."""
        session.updated_at = timestamp(self.tick())
        self._write(session)

    def load(self, session_id: str) -> Session | None:
        """The stored session, or ``None`` if there is none (or its file is unreadable)."""
        if not _SESSION_ID.fullmatch(session_id):
            return None
        try:
            text = (self.sessions_dir / f"{session_id}.json").read_text(encoding="utf-8")
            return Session.from_json(json.loads(text))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def delete(self, session_id: str) -> bool:
        """Remove a stored session; ``False`` if there was none."""
        if not _SESSION_ID.fullmatch(session_id):
            return False
        try:
            (self.sessions_dir / f"{session_id}.json").unlink()
        except FileNotFoundError:
            return False
        return True

    def all(self) -> list[Session]:
        """Every readable stored session, oldest first (by creation counter)."""
        if not self.sessions_dir.is_dir():
            return []
        found = (self.load(p.stem) for p in self.sessions_dir.glob("sess-*.json"))
        return sorted((s for s in found if s is not None), key=lambda s: s.created)

    def _write(self, session: Session) -> None:
        path = self.sessions_dir / f"{session.session_id}.json"
        write_atomically(path, json.dumps(session.to_json(), indent=1) + "\n")
