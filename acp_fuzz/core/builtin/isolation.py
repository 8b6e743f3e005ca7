"""One session's client text never reaches another session (pure): ``prompt.leak``, in a
model request (a turn, or a side request such as a title or a summary), in a request tied to
no session, and in the titles ``session/list`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.builtin.evidence import clip, where
from acp_fuzz.core.builtin.needles import Needles
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.payloads import blocks_of
from acp_fuzz.core.sessions import IDS, MIN_SIGNIFICANT, ModelRequest

__all__ = ["MIN_TITLE_PIECE", "isolation"]

#: A title this long that is a piece of another session's client text is that text (shorter
#: pieces can match by chance: titles are a few words).
MIN_TITLE_PIECE = 24


@dataclass
class _Sent:
    """Every significant text of every step's prompt (what the tracker's ``all_blocks`` holds,
    and the texts of steps it files under no session): each request is searched for them in
    one pass, however many there are (:class:`Needles`), then judged per session."""

    texts: Needles = field(default_factory=Needles)


@builtin("prompt.leak")
def isolation(j: Judge, ev: Event) -> None:
    """``prompt.leak`` in each model request and each ``session/list`` result."""
    c = j.change
    if ev.kind == "step":
        # The texts the tracker files under the step's session once it applies the step.
        args = ev.data.get("args")
        sp = args.get("systemPrompt") if isinstance(args, Mapping) else None
        j.memo(_Sent).texts.add(t for t in (b.strip() for b in blocks_of(sp))
                                if len(t) >= MIN_SIGNIFICANT)
    elif isinstance(c, ModelRequest):
        if c.route == "untied":
            _mixed(j, c, ev.seq)
        else:
            _foreign(j, c, ev.seq)
    elif ev.kind == "acp" and ev.data.get("dir") != "send" and not ev.data.get("error"):
        msg = ev.data.get("msg")
        if isinstance(msg, Mapping) and "result" in msg and isinstance(msg.get("id"), IDS) \
                and j.tracker.requests.get(msg["id"]) == "session/list":
            _titles(j, msg["result"], ev.seq)


def _foreign(j: Judge, c: ModelRequest, seq: int) -> None:
    """Another session's own text in this session's request, turn or side request (a title
    or a suggestion made from the wrong session's prompt leaks it as surely)."""
    m, x, handle = c.session, c.x, c.x.session
    assert m is not None
    all_blocks = j.tracker.all_blocks
    if not any(other != handle for other in all_blocks):
        return
    j.judge_as("prompt.leak")
    found = j.memo(_Sent).texts.found_in(c.everything)
    for other, texts in all_blocks.items():
        if other == handle:
            continue
        for b in sorted(texts & found):
            if b in m.own or any(b in own for own in m.own):
                continue
            kind = "side request" if x.side else "model request"
            j.report_as("prompt.leak",
                        f"session {handle}'s {kind} holds session {other}'s client text",
                        session=handle, foreign_session=other, **where(x, b, seq))
            break


def _mixed(j: Judge, c: ModelRequest, seq: int) -> None:
    """A request tied to no session: no prompt is owed there, but it must not hold the
    client texts of two sessions where neither may hold the other's (a fork holds its
    source's)."""
    t = j.tracker
    if len(t.all_blocks) < 2:
        return
    j.judge_as("prompt.leak")
    held = j.memo(_Sent).texts.found_in(c.everything)
    found = {h: sorted(texts & held) for h, texts in t.all_blocks.items()}
    found = {h: bs for h, bs in found.items() if bs}
    if len(found) < 2:
        return

    def holds(h: str, b: str) -> bool:
        own = t.sessions[h].own if h in t.sessions else t.all_blocks.get(h, set())
        return b in own or any(b in o for o in own)

    every = [b for bs in found.values() for b in bs]
    if any(all(holds(h, b) for b in every) for h in found):
        return
    first, second = sorted(found)[:2]
    j.report_as("prompt.leak",
                f"a model request tied to no session holds the client texts of sessions "
                f"{first} and {second}", session=first, foreign_session=second,
                **where(c.x, found[second][0], seq))


def _titles(j: Judge, result: Any, seq: int) -> None:
    """``prompt.leak`` in ``session/list``: a session's title made from another session's
    client text (a title is shown to the user beside every session, and an agent that
    titles a session from the wrong prompt has mixed their state). A title counts when it
    holds a significant block of the other session, or is a long piece of one; a block the
    titled session may hold itself (its own, or its fork source's) proves nothing."""
    t = j.tracker
    listed = result.get("sessions") if isinstance(result, Mapping) else None
    if not isinstance(listed, list) or len(t.all_blocks) < 2:
        return
    by_id = {m.agent_id: h for h, m in t.sessions.items() if m.agent_id is not None}
    for entry in listed:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("title"), str):
            continue
        handle = by_id.get(entry.get("sessionId"))  # type: ignore[arg-type]
        if handle is None:
            continue
        title = entry["title"].strip()
        own = t.sessions[handle].own
        j.judge_as("prompt.leak")
        for other, texts in sorted(t.all_blocks.items()):
            if other == handle:
                continue
            hit = next((b for b in sorted(texts)
                        if not (b in own or any(b in o for o in own))
                        and (b in title or (len(title) >= MIN_TITLE_PIECE and title in b
                                            and not any(title in o for o in own)))), None)
            if hit is not None:
                j.report_as("prompt.leak",
                            f"session {handle}'s title in session/list holds session {other}'s "
                            "client text", session=handle, foreign_session=other,
                            acp_event=seq, title=clip(title), block=clip(hit))
                return
