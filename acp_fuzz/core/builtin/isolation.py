"""One session's client text never reaches another session (pure): ``prompt.leak``, in a
model request (a turn, or a side request such as a title or a summary), in a request tied to
no session, and wherever the agent shows the client something of a session: the titles
``session/list`` shows, every ``session/update`` (``session_info_update`` titles, what a load
replays, messages, tool calls), the ``message`` and ``data`` of every error answer, and the
lines of its stderr that name a session (:mod:`acp_fuzz.core.shown` finds those texts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.builtin.evidence import clip, where
from acp_fuzz.core.builtin.needles import Needles
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.payloads import blocks_of
from acp_fuzz.core.sessions import IDS, MIN_SIGNIFICANT, ModelRequest, Tracker
from acp_fuzz.core.shown import StderrLines, error_texts, handles_named, strings, update_of

__all__ = ["MIN_TITLE_PIECE", "foreign_text", "handle_of", "isolation", "own_texts"]

#: A title (or any text the agent shows) this long that is a piece of another session's
#: client text is that text (shorter pieces can match by chance: titles are a few words).
MIN_TITLE_PIECE = 24


@dataclass
class _Sent:
    """Every significant text of every step's prompt (what the tracker's ``all_blocks`` holds,
    and the texts of steps it files under no session): each request, and each text the agent
    shows, is searched for them in one pass, however many there are (:class:`Needles`), then
    judged per session."""

    texts: Needles = field(default_factory=Needles)


@dataclass
class _Seen:
    """What the check remembers of the history: the sessions each request named (by its
    JSON-RPC id), and the stderr of each agent process cut into lines."""

    holders: dict[Any, tuple[str, ...]] = field(default_factory=dict)
    stderr: StderrLines = field(default_factory=StderrLines)


@builtin(
    "prompt.leak", severity="MUST", rule="ACPFUZZ-SESSION-ISOLATION-MUST",
    summary="a session's model request contains another session's client text",
)
def isolation(j: Judge, ev: Event) -> None:
    """``prompt.leak`` in each model request and in everything the agent shows the client."""
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
    elif ev.kind == "acp" and not ev.data.get("error"):
        _frame(j, ev)
    elif ev.kind == "stderr" and isinstance(ev.data.get("text"), str):
        _stderr(j, ev)


def _frame(j: Judge, ev: Event) -> None:
    msg = ev.data.get("msg")
    if not isinstance(msg, Mapping):
        return
    if ev.data.get("dir") == "send":
        _note_request(j, msg)
        return
    shown = update_of(msg)
    if shown is not None:
        _update(j, *shown, ev.seq)
        return
    rid = msg.get("id")
    if not isinstance(rid, IDS):
        return
    if "result" in msg and j.tracker.requests.get(rid) == "session/list":
        _titles(j, msg["result"], ev.seq)
    elif "error" in msg:
        _error(j, rid, msg["error"], ev.seq)


def handle_of(t: Tracker, session_id: Any) -> str | None:
    """The handle of the session the agent calls ``session_id`` (``None``: not one the
    tracker knows)."""
    if not isinstance(session_id, str):
        return None
    return next((h for h, m in t.sessions.items() if m.agent_id == session_id), None)


def own_texts(t: Tracker, holders: Iterable[str]) -> set[str]:
    """Every block the sessions ``holders`` may show as their own: what they hold (a
    fork, its source's too) and every client text sent for them, accepted or not (a
    refused prompt quoted back in its own error is the session's own text)."""
    own: set[str] = set()
    for h in holders:
        if h in t.sessions:
            own |= t.sessions[h].own
        own |= t.all_blocks.get(h, set())
    return own


def foreign_text(t: Tracker, holders: Iterable[str], text: str, own: set[str],
                 sent: Needles) -> tuple[str, str] | None:
    """``(other session, its block)`` when ``text``, shown for the sessions ``holders``,
    holds another session's client text: a significant block of it, or is a piece of one
    at least :data:`MIN_TITLE_PIECE` characters long. A block the holders may hold
    themselves (``own``: theirs, or a fork source's) proves nothing, nor a piece one of
    them holds too. ``sent`` holds every block of ``t.all_blocks`` (and may hold more): the
    blocks in ``text``, and those ``text`` is a piece of, are found through it, so the cost
    does not grow with the blocks sent so far."""
    text = text.strip()
    mine = set(holders)
    piece = len(text) >= MIN_TITLE_PIECE and not any(text in o for o in own)
    found = sent.found_in(text) | (sent.holding(text) if piece else set())
    found = {b for b in found if not (b in own or any(b in o for o in own))}
    if not found:
        return None
    for other, texts in sorted(t.all_blocks.items()):
        hit = min(texts & found, default=None) if other not in mine else None
        if hit is not None:
            return other, hit
    return None


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
    titles a session from the wrong prompt has mixed their state)."""
    listed = result.get("sessions") if isinstance(result, Mapping) else None
    if not isinstance(listed, list):
        return
    for entry in listed:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("title"), str):
            continue
        handle = handle_of(j.tracker, entry.get("sessionId"))
        if handle is not None:
            title = entry["title"]
            _shown(j, (handle,), [("title", title)], seq, "title in session/list",
                   acp_event=seq, title=clip(title.strip()))


def _shown(j: Judge, holders: tuple[str, ...], texts: list[tuple[str, str]], seq: int,
           what: str, **evidence: Any) -> None:
    """``prompt.leak`` in ``texts`` (path, text) the agent showed for the sessions
    ``holders`` (the first of them is the one reported): one case judged when another
    session has client text."""
    t = j.tracker
    if not holders or not any(o not in holders for o in t.all_blocks):
        return
    j.judge_as("prompt.leak")
    own, sent = own_texts(t, holders), j.memo(_Sent).texts
    for path, text in texts:
        hit = foreign_text(t, holders, text, own, sent)
        if hit is not None:
            other, block = hit
            j.report_as("prompt.leak", f"session {holders[0]}'s {what} holds session "
                        f"{other}'s client text", session=holders[0], foreign_session=other,
                        path=path, shown=clip(text), block=clip(block), **evidence)
            return


def _note_request(j: Judge, msg: Mapping[str, Any]) -> None:
    """Remember which sessions a request names: its ``sessionId``, and for the step's
    ``session/new`` or ``session/fork`` the handles the step makes (their ids come only
    with the answer)."""
    rid, method = msg.get("id"), msg.get("method")
    if not isinstance(rid, IDS) or not isinstance(method, str):
        return
    t = j.tracker
    params = msg.get("params")
    named = {handle_of(t, params.get("sessionId"))} if isinstance(params, Mapping) else set()
    args = t.args
    if method == f"session/{args.get('op')}" and method in ("session/new", "session/fork"):
        named |= {args.get("session"), args.get("new")}
    j.memo(_Seen).holders[rid] = tuple(sorted(h for h in named if isinstance(h, str)))


def _error(j: Judge, rid: Any, error: Any, seq: int) -> None:
    """``prompt.leak`` in an error answer: its ``message`` and ``data`` hold the client
    text of a session the request did not name."""
    holders = j.memo(_Seen).holders.get(rid, ())
    method = j.tracker.requests.get(rid, "request")
    _shown(j, holders, error_texts(error), seq, f"error answer to {method}", acp_event=seq)


def _update(j: Judge, session_id: str, update: Mapping[str, Any], seq: int) -> None:
    """``prompt.leak`` in a ``session/update`` of a session the tracker knows: a title
    (``session_info_update``), a replayed or echoed message, a tool call, a plan."""
    handle = handle_of(j.tracker, session_id)
    if handle is None:
        return
    kind = update.get("sessionUpdate")
    _shown(j, (handle,), strings(update, "update"), seq, f"session/update ({clip(kind, 40)})",
           acp_event=seq)


def _stderr(j: Judge, ev: Event) -> None:
    """``prompt.leak`` in a line of the agent's stderr that names a session by its id: the
    line holds the client text of a session it does not name. The sessions of the step in
    flight count as named too until its answer: a line may name a session whose id that
    answer has not brought yet (a fork's)."""
    t = j.tracker
    gen = ev.data.get("generation")
    lines = j.memo(_Seen).stderr.feed(ev.data["text"], gen if isinstance(gen, int) else 0)
    ids = [(m.agent_id, h) for h, m in t.sessions.items() if m.agent_id is not None]
    # Until the step's answer is applied (its outcome is None till then).
    step = {h for h in (t.args.get("session"), t.args.get("new"))
            if isinstance(h, str) and t.outcome is None}
    for line in lines:
        named = handles_named(line, ids)
        if named:
            _shown(j, tuple(sorted(named)) + tuple(sorted(step - named)), [("stderr", line)],
                   ev.seq, "stderr line", stderr_event=ev.seq)
