"""A session's own prompt is not shown to the client as a user message (pure):
``prompt.replayed-as-user``, in every user message a ``session/update`` shows (v1's
``user_message_chunk``, what a load replays; v2's ``user_message``, a replay or a turn's
echo). Another session's prompt anywhere the agent shows it is ``prompt.leak``
(:mod:`.isolation`).
"""

from __future__ import annotations

from acp_fuzz.core.builtin.evidence import clip
from acp_fuzz.core.builtin.isolation import MIN_TITLE_PIECE, handle_of
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.shown import update_of, user_texts

__all__ = ["replayed"]


@builtin(
    "prompt.replayed-as-user", severity="SHOULD", rule="ACPFUZZ-REPLAY-NOT-USER-SHOULD",
    summary="a session's own client prompt shown to the client as a user message (what a load "
            "replays, or a turn's echo)",
)
def replayed(j: Judge, ev: Event) -> None:
    """Judge each user message shown for a session that holds a client prompt: a
    significant block of the prompt in it, or a piece of one at least
    :data:`~acp_fuzz.core.builtin.isolation.MIN_TITLE_PIECE` characters long (a replay may
    stream it in chunks), is a finding."""
    if ev.kind != "acp" or ev.data.get("dir") == "send" or ev.data.get("error"):
        return
    shown = update_of(ev.data.get("msg"))
    if shown is None:
        return
    sid, update = shown
    texts = user_texts(update)
    t = j.tracker
    handle = handle_of(t, sid)
    if not texts or handle is None or not t.sessions[handle].own:
        return
    j.judge_as("prompt.replayed-as-user")
    own = sorted(t.sessions[handle].own)
    for text in texts:
        s = text.strip()
        block = next((b for b in own if b in s or (len(s) >= MIN_TITLE_PIECE and s in b)),
                     None)
        if block is not None:
            op = t.args.get("op")
            j.report_as("prompt.replayed-as-user",
                        f"session {handle}'s own client prompt was shown to the client as a "
                        f"user message ({update.get('sessionUpdate')}, during {op})",
                        session=handle, acp_event=ev.seq, shown=clip(s), block=clip(block))
            return
