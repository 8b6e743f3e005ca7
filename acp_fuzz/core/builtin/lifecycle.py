"""What a refused request, an accepted prompt and a load or resume owe the session (pure).

``reject.side-effect``: a refused request changes nothing (its text never reaches the
model, it creates no session, a live session's turns still work); ``session.turn-failed``:
the first turn after an accepted prompt works; ``session.reattach-failed``: an advertised
load or resume of a session with a conversation works; ``session.history-lost``: the first
turn after it carries the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.builtin.evidence import clip, said, where
from acp_fuzz.core.builtin.needles import Needles
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import CREATES, REATTACHES
from acp_fuzz.core.sessions import ModelRequest, Reply
from acp_fuzz.core.steps import elsewhere

__all__ = ["lifecycle"]


@builtin(
    "reject.side-effect", severity="MUST", rule="SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
    summary="a rejected request still created, forked or changed a session",
    also=[
        ("session.turn-failed", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
         "the first turn after an accepted prompt (new, load, resume or fork) fails, though the "
         "fake model answered and the agent runs other turns: the prompt was accepted and cannot "
         "be used"),
        ("session.reattach-failed", "SHOULD", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
         "an advertised session/load or session/resume failed for a session the agent created "
         "and has a conversation for, with nothing in the request to refuse"),
        ("session.history-lost", "MUST", "ACPFUZZ-CONVERSATION-KEPT-MUST",
         "after an accepted session/load or session/resume, the session's next model request "
         "holds none of its last completed turn: the conversation is gone"),
        ("session.history-destroyed", "MUST", "ACPFUZZ-CONVERSATION-KEPT-MUST",
         "a load or resume the agent refused destroyed the session's conversation: after a later "
         "accepted one the model request lacks the turns before it"),
    ],
)
def lifecycle(j: Judge, ev: Event) -> None:
    """Judges a step's answer, the ``session/list`` probe after it, and each model request."""
    c = j.change
    if isinstance(c, Reply):
        if not c.changes or not c.answered:
            return
        if c.op == "prompt":
            _turn_answered(j, c)
        if c.op in REATTACHES:
            _reattach_answered(j, c)
    elif isinstance(c, ModelRequest):
        _rejected_text(j, c, ev.seq)
        if c.route == "turn" and c.reattached is not None:
            _history(j, c, ev)
    elif ev.kind == "verdict" and ev.data.get("what") == "probe-list":
        _probe_list(j, ev.data)


def _probe_list(j: Judge, d: Mapping[str, Any]) -> None:
    """``reject.side-effect``: after a refused new or fork, ``session/list`` shows no session
    that no successful request created."""
    t = j.tracker
    listed = d.get("sessions")
    if isinstance(listed, list) and t.args.get("op") in CREATES \
            and t.outcome == "error" and not t.args.get("cancel_request"):
        # (A cancelled new's or fork's probe is cancel-request.session-left's: the request
        # was not refused for its prompt.)
        j.judge_as("reject.side-effect")
        extra = sorted(set(listed) - t.known_ids)
        if extra:
            j.report_as("reject.side-effect",
                        f"session/list shows {len(extra)} session(s) that no successful request "
                        "created, after a rejected request",
                        session=t.args.get("session"), listed=listed, unexpected=extra)


def _turn_answered(j: Judge, r: Reply) -> None:
    """A turn's answer, judged against what came before it on the session.

    ``session.turn-failed`` (MUST, SP-AGENT-ERROR-NOSIDEEFFECT-MUST): the first turn after
    an accepted new, load, resume or fork that carried a valid prompt fails (an error
    answer; in v2 an ``error`` stop reason). An agent that cannot apply a prompt must refuse
    the request instead, so accepting it and then failing the turn that would use it breaks
    that MUST (a large prompt accepted and refused only at turn time). Judged only when the
    agent ran a turn in this run (so it can), and not when the fake model answered one of
    the turn's requests with an error (a forced overflow, say).

    ``reject.side-effect`` (MUST, the same rule): a load or resume refused on a session this
    process had open changes nothing, so the session's next turn, after turns of its own
    that completed, must not fail either (refused after its ``$/cancel_request``, the
    refusal is the cancel's: ``cancel-request.session-left``, SHOULD).

    Neither is judged for a session that is not open in this agent process (after a restart
    with no load or resume it accepted since, or after a close): there an error is the right
    answer to the turn, and a refused reattach is ``session.reattach-failed``'s to judge. A
    refused load after a restart, then a failing turn, was once a false MUST here."""
    t = j.tracker
    handle = r.args.get("session")
    m = t.sessions.get(handle) if isinstance(handle, str) else None
    if m is None or not r.live:
        return
    failed = r.turn_failed
    err = r.verdict.get("error")
    harness = isinstance(err, Mapping) and "harness" in err  # protocol.malformed has it
    # A turn a second prompt of its session met may end as the agent chose for the pair
    # (ACPFUZZ-SECOND-PROMPT-MAY): stopped, or failed, for the second.
    blamed = handle in t.model_failed or harness or m.tainted \
        or r.args.get("during") == "prompt"
    fresh, rejected = m.fresh_prompt, m.rejected_change
    if fresh is not None and t.turns_ok and not blamed:
        j.judge_as("session.turn-failed")
        if failed:
            j.report_as("session.turn-failed",
                        f"session {handle}: the first turn after the accepted prompt of step "
                        f"{fresh.split(':', 1)[0]} failed", session=handle, accepted_by=fresh,
                        error=clip(err), stopReason=r.verdict.get("stopReason"),
                        steps=list(m.trail))
    if rejected is not None and m.turned and not blamed:
        # A refusal after the request's $/cancel_request is the cancel's (its rule's SHOULD).
        number = rejected.split(":", 1)[0]  # the trail line's step number (Tracker.line)
        cancelled = int(number) - 1 in t.cancelled
        oracle = "cancel-request.session-left" if cancelled else "reject.side-effect"
        j.judge_as(oracle)
        if failed:
            j.report_as(oracle,
                        f"session {handle}: its turn fails after the "
                        f"{'cancelled' if cancelled else 'refused'} request of step "
                        f"{number}, though its turns before it completed",
                        session=handle, rejected_by=rejected, error=clip(err),
                        steps=list(m.trail))


def _reattach_answered(j: Judge, r: Reply) -> None:
    """``session.reattach-failed``: an advertised load or resume refused a session that the
    agent created, that holds a completed turn and is not closed, in its own ``cwd``, with
    no prompt or the session's own prompt re-sent: nothing in the request to refuse.

    ACP does not say a load must succeed, so this is the harness's SHOULD
    (ACPFUZZ-REATTACH-ADVERTISED-SHOULD): advertising the method promises it works for such
    a session. A session without a turn is not judged (an agent may persist a session only
    once it has a conversation), nor one closed since, nor a changed or tainted prompt
    (``payload.valid-rejected`` judges a refused prompt)."""
    t = j.tracker
    op, args = r.op, r.args
    handle = args.get("session")
    m = t.sessions.get(handle) if isinstance(handle, str) else None
    if m is None or t.life.closed(handle) or m.tainted or not m.conversation:
        return
    # A load is a resume that replays from the start in v2 (SP-V2-NOLOAD-DEF).
    if not (t.caps.get("resume") if op == "resume"
            else t.caps.get("load") or t.caps.get("replay")):
        return
    kind = r.kind
    sp = args.get("systemPrompt")
    if not (kind in ("omitted", "null") or (kind == "valid" and t.resends(args, sp))):
        return
    if args.get("extra"):
        return  # a vendor extension's fields, which the agent may refuse
    if elsewhere(args):
        return  # another directory: a load or resume may require the session's own
    if args.get("busy"):
        return  # sent while a turn of the session ran: a busy session may refuse it
    if args.get("cancel_request"):
        return  # its $/cancel_request came right behind it: -32800 is the answer it asked for
    j.judge_as("session.reattach-failed")
    if r.outcome != "error":
        return
    err = r.verdict.get("error")
    if isinstance(err, Mapping) and "harness" in err:
        return  # a malformed answer: protocol.malformed has it
    if j.found("payload.valid-rejected"):
        return
    cold = t.life.cold(handle)
    turns = len(m.conversation)
    j.report_as("session.reattach-failed",
                f"session/{said(t.protocol, op)} of session {handle} ({turns} completed turn(s)"
                f"{', after a restart' if cold else ''}) failed, though the agent advertises it",
                session=handle, error=clip(err), completed_turns=turns,
                after_restart=cold, steps=list(m.trail))


@dataclass
class _Refused:
    """The tracker's refused texts (``Tracker.rejected``, which only grows), read once each:
    every request is searched for all of them in one pass (:class:`Needles`), and only the
    refused steps whose text it holds are judged."""

    texts: Needles = field(default_factory=Needles)
    read: int = 0  # how many of ``Tracker.rejected`` are in ``texts``
    #: text -> the places in ``Tracker.rejected`` of the refused steps that sent it
    where: dict[str, list[int]] = field(default_factory=dict)
    #: refused texts found inside an accepted block (which stay accepted: it only grows)
    accepted: set[str] = field(default_factory=set)
    #: how many of those read were refused after their $/cancel_request (Tracker.cancelled)
    cancelled: int = 0

    def catch_up(self, rejected: list[tuple[int, tuple[str, ...]]],
                 cancelled: set[int]) -> None:
        for i in range(self.read, len(rejected)):
            self.cancelled += rejected[i][0] in cancelled
            blocks = rejected[i][1]
            self.texts.add(blocks)
            for b in blocks:
                self.where.setdefault(b, []).append(i)
        self.read = len(rejected)


def _rejected_text(j: Judge, c: ModelRequest, seq: int) -> None:
    """``reject.side-effect``: a rejected request's text never reaches the model afterwards."""
    t = j.tracker
    mem = j.memo(_Refused)
    mem.catch_up(t.rejected, t.cancelled)
    if not len(mem.texts):
        return
    # Each refusal judged under its own rule: the cancel's refusals under
    # cancel-request.session-left, the others under reject.side-effect.
    if mem.cancelled < len(t.rejected):
        j.judge_as("reject.side-effect")
    if mem.cancelled:
        j.judge_as("cancel-request.session-left")
    held = mem.texts.found_in(c.everything)
    for i in sorted({i for b in held for i in mem.where[b]}):
        step_idx, blocks = t.rejected[i]
        for b in blocks:
            # Text an accepted payload also carries (the same block, or a piece of one: a
            # refused change may reuse the session's own text) proves nothing.
            if b in c.everything and not _accepted(b, t.accepted_blocks, mem.accepted):
                _refused_text_reached(j, c, step_idx, where(c.x, b, seq))
                break


def _refused_text_reached(j: Judge, c: ModelRequest, step_idx: int,
                          found: Mapping[str, Any]) -> None:
    """The prompt text of refused step ``step_idx`` in a model request: ``reject.side-effect``
    (MUST), or, for a request refused after its ``$/cancel_request`` (the refusal was the
    cancel's, not the prompt's), ``cancel-request.session-left`` (SHOULD,
    ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD): the cancelled load or resume left its prompt in
    force."""
    if step_idx in j.tracker.cancelled:
        j.report_as("cancel-request.session-left",
                    f"text from the systemPrompt of step {step_idx + 1}, cancelled by its "
                    "$/cancel_request and answered with an error, reached the model: the "
                    "cancelled request left its prompt in force", step=step_idx,
                    session=c.x.session, **found)
        return
    j.report_as("reject.side-effect", f"text from the systemPrompt of rejected step "
                f"{step_idx + 1} reached the model", step=step_idx, session=c.x.session,
                **found)


def _accepted(text: str, accepted: set[str], known: set[str]) -> bool:
    """Whether ``text`` is, or is inside, a block an accepted payload carried (``known``
    remembers the texts found inside one, so that each is looked for only until found)."""
    if text in accepted or text in known:
        return True
    if any(text in a for a in accepted):
        known.add(text)
        return True
    return False


def _history(j: Judge, c: ModelRequest, ev: Event) -> None:
    """``session.history-lost``: the first turn after an accepted load or resume must carry
    the session's conversation: every completed turn, recognised by its nonce (load replays
    "the whole conversation"). A compaction replaces the turns before it by a summary (the
    tracker empties the conversation): only the turns after it are owed.

    ``session.history-destroyed``: the same loss, where every lost turn came before a load
    or resume the agent *refused*, and a turn after that refusal is still there: the
    refusal is what erased them (gemini-cli 0.61.0 clears the stored chat, then fails the
    load). Its own finding, so that the report names the refused request as the cause, not
    the load that later succeeded. A loss that takes the turns after the refusal too stays
    ``session.history-lost``, naming the refusal in its evidence."""
    m, x, everything = c.session, c.x, c.everything
    assert m is not None and c.reattached is not None
    handle = x.session
    op, line = c.reattached
    if isinstance(x.body, Mapping) and x.body.get("previous_response_id"):
        return  # the conversation is held by the provider (OpenAI Responses): not visible
    if not m.conversation:
        return
    rule = "ACPFUZZ-CONVERSATION-KEPT-MUST"
    missing = [n for n in m.conversation if n not in everything]
    kept = set(m.conversation) - set(missing)
    destroyed = bool(missing) and any(set(missing) <= set(before) and kept - set(before)
                                      for before in m.refused_with)
    j.judge_as("session.history-lost", rule)
    if m.refused_with:
        j.judge_as("session.history-destroyed", rule)
    if not missing:
        return
    oracle = "session.history-destroyed" if destroyed else "session.history-lost"
    which = ("none of its last turn" if missing[-1] == m.conversation[-1]
             else f"{len(missing)} of its earlier turn(s), though not the last")
    refused = ", ".join(m.failed_reattach)
    failed = (f"; the refused {refused} destroyed it" if destroyed
              else f"; after a refused reattach ({refused})" if refused else "")
    extra: dict[str, Any] = {"failed_reattach": list(m.failed_reattach)} \
        if m.failed_reattach else {}
    j.report_as(oracle,
                f"session {handle}: after {said(j.tracker.protocol, op)}, the model request "
                f"holds {which} ({len(m.conversation)} turn(s) completed){failed}",
                rule=rule, session=handle, model_event=ev.seq, reattached_by=line,
                missing_turn_nonce=missing[-1], missing=missing,
                present=[n for n in m.conversation if n in everything],
                trail=list(m.trail), **extra)
