"""What ``session/delete`` and ``session/list`` say of a session, and what follows (pure).

``session.deleted-usable`` (info): a turn of a session that ``session/delete`` removed was
served. The schema defines delete by the list (DeleteSessionRequest: "deleting an existing
session from ``session/list``") and says nothing of a session live on the connection, where
archive, beside it, spells out that an active session is closed first: what the agent does
is its choice, recorded, never failed (ACPFUZZ-DELETE-LIVE-MAY).

``session.listed-other-id`` (SHOULD): after a session was loaded or resumed in a new agent
process (a cold load the agent accepted), a complete ``session/list`` does not show that
session's id, and shows an id that no request created: the client finds its session under
an id it never made (pi-acp 0.0.34, which restores a session it had not written yet as a new
one). The list is of "existing sessions", each by its "Unique identifier"
(ListSessionsRequest, SessionInfo.sessionId): acp-fuzz's reading is that a session the agent
has just accepted to load exists and is listed by its id (ACPFUZZ-LIST-IDS-SHOULD).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import CREATES, REATTACHES
from acp_fuzz.core.sessions import IDS, Reply

__all__ = ["listing"]


@dataclass
class _Seen:
    """This history's sessions loaded or resumed cold (handle -> the agent's id, and the
    step line that loaded it), the sessions deleted (handle -> the step line), and whether
    the last ``session/list`` answer said more pages follow."""

    cold: dict[str, tuple[str, str]] = field(default_factory=dict)
    deleted: dict[str, str] = field(default_factory=dict)
    more_pages: bool = False


@builtin(
    "session.deleted-usable", severity="info", rule="ACPFUZZ-DELETE-LIVE-MAY",
    summary="a turn of a session was served after session/delete of it succeeded",
    also=[
        ("session.listed-other-id", "SHOULD", "ACPFUZZ-LIST-IDS-SHOULD",
         "after a session was loaded or resumed in a new process, session/list does not show its "
         "id and shows an id no request created"),
    ],
)
def listing(j: Judge, ev: Event) -> None:
    """Judges a turn of a deleted session, and each ``session/list`` after a cold load."""
    seen = j.memo(_Seen)
    c = j.change
    if isinstance(c, Reply) and c.changes:
        _reply(j, seen, c)
    elif ev.kind == "acp" and ev.data.get("dir") != "send" and not ev.data.get("error"):
        msg = ev.data.get("msg")
        if isinstance(msg, Mapping) and isinstance(msg.get("id"), IDS) \
                and j.tracker.requests.get(msg["id"]) == "session/list":
            result = msg.get("result")
            seen.more_pages = isinstance(result, Mapping) and result.get("nextCursor") is not None
    elif ev.kind == "verdict" and ev.data.get("what") == "probe-list" \
            and j.tracker.args.get("op") == "list":
        _listed(j, seen, ev.data.get("sessions"))


def _reply(j: Judge, seen: _Seen, r: Reply) -> None:
    t = j.tracker
    handle = r.args.get("session")
    if not isinstance(handle, str):
        return
    if r.op == "prompt" and t.life.deleted(handle) and r.answered:
        j.judge_as("session.deleted-usable")
        if r.outcome == "ok" and not r.turn_failed:
            j.report_as("session.deleted-usable",
                        f"session {handle}: a turn was served after session/delete of it "
                        "succeeded", session=handle, deleted_by=seen.deleted.get(handle),
                        stopReason=r.verdict.get("stopReason"))
        return
    if r.outcome != "ok":
        return
    if r.op in REATTACHES and t.life.cold(handle) and handle in t.sessions:
        sid = t.sessions[handle].agent_id
        if isinstance(sid, str):
            seen.cold[handle] = (sid, t.line(r.args))
    elif r.op == "delete":
        seen.cold.pop(handle, None)
        seen.deleted[handle] = t.line(r.args)
    elif r.op in CREATES:
        made = r.target
        if made is not None:  # a handle taken again: another session
            seen.cold.pop(made, None)
            seen.deleted.pop(made, None)


def _listed(j: Judge, seen: _Seen, listed: Any) -> None:
    """A complete list (no more pages) after a cold load: the loaded session's id is in it,
    or at least no id that no request created stands in its place."""
    t = j.tracker
    if not isinstance(listed, list) or seen.more_pages:
        return
    unknown = sorted(set(listed) - t.known_ids)
    for handle, (sid, loaded_by) in sorted(seen.cold.items()):
        if not t.life.exists(handle):
            continue
        j.judge_as("session.listed-other-id")
        if sid in listed or not unknown:
            continue
        j.report_as("session.listed-other-id",
                    f"session/list does not show session {handle} ({sid}), loaded in a new "
                    f"process, and shows {len(unknown)} id(s) no request created",
                    session=handle, session_id=sid, loaded_by=loaded_by, listed=listed,
                    unknown=unknown)
