"""What a request sent while the model is thinking must do to the turn (pure).

A ``prompt`` step with ``during`` (:data:`acp_fuzz.core.steps.DURING`) has the fake model
hold the turn's first model request open, writes a ``session/cancel``, a ``session/close``,
a ``$/cancel_request`` of the turn's ``session/prompt``, a ``session/set_mode``, a second
``session/prompt``, a ``session/fork``, a ``session/set_config_option`` or a
``session/delete`` of the session, then lets the model answer. Its ``during`` verdict says
whether the request was held (a turn that never asked the model is not judged: nothing was
sent during it), whether the prompt was still unanswered when the request went out, and how
the turn (and the close, the set_mode or the second turn) ended:

- ``cancel.turn-kept`` (SHOULD, CANCEL-AGENT-STOP-SHOULD): after a held ``session/cancel``
  the turn ended with another stop reason than ``cancelled``. An error answer is
  ``cancel.error``'s (:mod:`.protocol`), judged for the step's answer as for every cancel.
- ``close.turn-kept`` (SHOULD, CANCEL-AGENT-STOP-SHOULD) and ``close.turn-unanswered``
  (MUST, SES-AGENT-CLOSE-CANCELS-MUST): after a ``session/close`` the agent accepted, the
  turn ended with another stop reason than ``cancelled``, or never answered. A refused close
  leaves the session open, and its turn may run on: not judged.
- ``cancel-request.unanswered`` (MUST, CANCELREQ-AGENT-ANSWER-MUST): the prompt, unanswered
  when its ``$/cancel_request`` went out, never answered. A result of any kind, or
  ``-32800``, holds; in v2 the prompt is answered once its message is inserted, before the
  model is asked, so its cancel owes nothing.

- ``set-mode.unanswered`` (MUST, SES-AGENT-BASELINE-MUST): a ``session/set_mode`` of the
  session (to another of the modes it offered), or its control, never answered. The turn's
  own answer is ``agent.hang``'s, as any turn's.
- ``set-mode.refused-mid-turn`` (SHOULD, ACPFUZZ-SETMODE-ANYTIME-SHOULD): that set_mode,
  sent while the prompt was unanswered, answered with an error, and the same switch sent
  again once the turn had ended (its ``control``) accepted: the schema says the method
  "can be called at any time during a session, whether the Agent is idle or actively
  generating a response" (acp-fuzz's reading, and its level: no MUST or SHOULD is written).
  A switch refused the second time too is the mode's refusal, not the time's: not judged.
- ``second-prompt.unanswered`` (MUST, SES-AGENT-BASELINE-MUST): a second ``session/prompt``
  of the session, sent while its turn ran, never answered (neither a result nor an error).
- ``second-prompt.handling`` (info, ACPFUZZ-SECOND-PROMPT-MAY): what the agent did with it:
  refused it, stopped the first turn for it (cancelled, or failed with an error), ran it
  beside the first, or queued it. Nothing
  in v1 or v2 says which it must do. The second turn's model requests carry its own nonce,
  and the prompt oracles judge them as any turn's.
- ``fork.unanswered`` (MUST, SES-AGENT-BASELINE-MUST): a ``session/fork`` of the session
  (with no ``systemPrompt``), sent while its turn ran, never answered. A refused fork is
  not judged (an agent may refuse to fork a session mid-turn: nothing says it may not); a
  fork made is a session of its own, whose turns the prompt oracles judge as any fork's
  (it inherits its source's prompt: the tracker registers it as a fork step's copy).

- ``set-config.unanswered`` (MUST, SES-AGENT-BASELINE-MUST): a
  ``session/set_config_option`` of the session (another value of one of its select options),
  sent while its turn ran, never answered. A refusal is not judged: unlike set_mode, nothing
  says the method may be called while the agent is generating (the tracker reads the
  session's requests from the moment it was sent as after a switch, undone if refused).
- ``delete.turn-unanswered`` (MUST, SES-AGENT-BASELINE-MUST): a ``session/delete`` of the
  session, accepted while its turn ran, and the turn's ``session/prompt`` never answered.
  The step's answer is the delete's (a delete never answered is ``agent.hang``'s); once
  accepted the session is gone, as after a ``delete`` step.
- ``delete.handling`` (info, ACPFUZZ-DELETE-LIVE-MAY): how that turn ended (stopped as
  cancelled, ran on, or an error): delete is defined by ``session/list``, and nothing says
  a deletion stops a live session's work (archive says so, delete does not).

A ``new``, ``load``, ``resume`` or ``fork`` step with ``cancel_request`` writes its request
and a ``$/cancel_request`` of it in one write (the agent reads the cancel while the request
is still unanswered):

- ``cancel-request.new-unanswered`` (MUST, CANCELREQ-AGENT-ANSWER-MUST): the
  ``session/new`` never answered, neither a result nor an error. A result makes a session as
  any ``session/new`` does (the tracker follows it, its turns are judged as usual).
- ``cancel-request.lifecycle-unanswered`` (MUST, the same rule): the same of a
  ``session/load``, ``session/resume`` or ``session/fork``. A result is that op's as any
  (the session reattached, the copy made); an error reattaches nothing (the tracker takes
  it as any refused load or resume: the prompt it re-sent is not in force) and makes no
  copy.
- ``cancel-request.session-left`` (SHOULD, ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD): a new or
  fork answered with an error (``-32800``, or another), after which the ``session/list``
  probe (where the agent lists sessions) shows a session no successful request created.
  (Not ``reject.side-effect``: the MUST of SP-AGENT-ERROR-NOSIDEEFFECT-MUST speaks of
  prompts the agent cannot apply, not of a cancelled request.)

A turn that errs after a failure of the agent's own (its process died) is ``agent.crash``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import CREATES
from acp_fuzz.core.sessions import Reply

__all__ = ["cancelled_request", "during"]

#: How each request sent during a turn is named in a message.
_SENT = {"cancel": "session/cancel", "close": "session/close",
         "cancel-request": "$/cancel_request of its session/prompt",
         "set-mode": "session/set_mode", "prompt": "second session/prompt",
         "fork": "session/fork", "set-config": "session/set_config_option",
         "delete": "session/delete"}


@builtin(
    "cancel.turn-kept", severity="SHOULD", rule="CANCEL-AGENT-STOP-SHOULD",
    summary="a session/cancel sent while the model was thinking, and the turn ended with another "
            "stop reason than cancelled",
    also=[
        ("close.turn-kept", "SHOULD", "CANCEL-AGENT-STOP-SHOULD",
         "a session/close accepted while the model was thinking, and the session's turn ended "
         "with another stop reason than cancelled"),
        ("close.turn-unanswered", "MUST", "SES-AGENT-CLOSE-CANCELS-MUST",
         "a session/close accepted while the model was thinking, and the session's "
         "session/prompt never answered"),
        ("cancel-request.unanswered", "MUST", "CANCELREQ-AGENT-ANSWER-MUST",
         "a $/cancel_request of a session/prompt still unanswered, and the prompt never answered "
         "(neither a result nor -32800)"),
        ("set-mode.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
         "a session/set_mode to one of the session's advertised modes, sent while the model was "
         "thinking, never answered"),
        ("set-mode.refused-mid-turn", "SHOULD", "ACPFUZZ-SETMODE-ANYTIME-SHOULD",
         "a session/set_mode to one of the session's advertised modes, sent while the model was "
         "thinking, refused"),
        ("second-prompt.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
         "a second session/prompt of a session, sent while its turn ran, never answered"),
        ("second-prompt.handling", "info", "ACPFUZZ-SECOND-PROMPT-MAY",
         "what the agent did with a second session/prompt of a session whose turn ran: refused "
         "it, stopped the first turn, ran both, or queued it"),
        ("fork.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
         "a session/fork of the session, sent while the model was thinking, never answered"),
        ("set-config.unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
         "a session/set_config_option of the session, sent while the model was thinking, never "
         "answered"),
        ("delete.turn-unanswered", "MUST", "SES-AGENT-BASELINE-MUST",
         "a session/delete accepted while the model was thinking, and the session's "
         "session/prompt never answered"),
        ("delete.handling", "info", "ACPFUZZ-DELETE-LIVE-MAY",
         "how a turn ended whose session was deleted while the model was thinking"),
    ],
)
def during(j: Judge, ev: Event) -> None:
    """A ``during`` verdict, against what the turn and the close answered."""
    d = ev.data
    if ev.kind != "verdict" or d.get("what") != "during" or not d.get("held"):
        return
    what, handle = d.get("during"), j.tracker.args.get("session")
    turn = _mapping(d.get("turn"))
    said = f"session {handle}: a {_SENT.get(str(what), what)} sent while the model was thinking"
    if what == "cancel-request":
        _cancel_request(j, d, turn, said)
    elif what == "set-mode":
        _set_mode(j, d, said)
    elif what == "prompt":
        _second_prompt(j, turn, _mapping(d.get("second")), said)
    elif what == "fork":
        _fork(j, _mapping(d.get("fork")), said)
    elif what == "set-config":
        _set_config(j, _mapping(d.get("set_config")), said)
    elif what == "delete":
        _delete(j, turn, _mapping(d.get("delete")), said)
    elif what == "close":
        if _mapping(d.get("close")).get("outcome") != "ok":
            return  # refused (or never answered: agent.hang's): the session may run on
        j.judge_as("close.turn-unanswered")
        j.judge_as("close.turn-kept")
        if turn.get("outcome") == "timeout":
            j.report_as("close.turn-unanswered", f"{said} was accepted, and the turn's "
                        "session/prompt was never answered", session=handle)
        else:
            _kept(j, "close.turn-kept", turn, f"{said} was accepted", handle)
    elif what == "cancel":
        j.judge_as("cancel.turn-kept")
        _kept(j, "cancel.turn-kept", turn, said, handle)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _cancel_request(j: Judge, d: Mapping[str, Any], turn: Mapping[str, Any], said: str) -> None:
    if not d.get("pending"):
        return  # answered before the cancel went out: nothing is owed
    j.judge_as("cancel-request.unanswered")
    if turn.get("outcome") == "timeout":
        j.report_as("cancel-request.unanswered", f"{said}, and the prompt was never answered "
                    "(neither a result nor -32800)", session=j.tracker.args.get("session"))


def _set_mode(j: Judge, d: Mapping[str, Any], said: str) -> None:
    answer = d.get("set_mode")
    if not isinstance(answer, Mapping):
        return  # the session offered no other mode: nothing was sent
    handle, mode = j.tracker.args.get("session"), answer.get("modeId")
    control = _mapping(answer.get("control"))
    j.judge_as("set-mode.unanswered")
    if answer.get("outcome") == "timeout" or control.get("outcome") == "timeout":
        again = " sent again once the turn had ended" if control else ""
        j.report_as("set-mode.unanswered", f"{said} (to its advertised mode {mode!r}){again} "
                    "was never answered", session=handle, modeId=mode)
        return
    if not d.get("pending") or (answer.get("outcome") == "error"
                                and control.get("outcome") != "ok"):
        # The turn was over (not a switch while the agent was generating), or the switch
        # was refused once the turn had ended too (the mode, not the time, was refused).
        return
    j.judge_as("set-mode.refused-mid-turn")
    if answer.get("outcome") == "error":
        j.report_as("set-mode.refused-mid-turn", f"{said} (to its advertised mode {mode!r}) "
                    f"was refused (error {answer.get('code')}) while the turn ran, and "
                    "accepted once it had ended", session=handle, modeId=mode,
                    code=answer.get("code"))


def _fork(j: Judge, fork: Mapping[str, Any], said: str) -> None:
    if fork.get("outcome") not in ("ok", "error", "timeout"):
        return  # never sent, or the agent died (agent.crash's)
    j.judge_as("fork.unanswered")
    if fork.get("outcome") == "timeout":
        j.report_as("fork.unanswered", f"{said} (as {fork.get('new')}) was never answered",
                    session=j.tracker.args.get("session"), new=fork.get("new"))


def _set_config(j: Judge, answer: Mapping[str, Any], said: str) -> None:
    if answer.get("outcome") not in ("ok", "error", "timeout"):
        return  # the session offered no option (nothing sent), or the agent died
    j.judge_as("set-config.unanswered")
    if answer.get("outcome") == "timeout":
        j.report_as("set-config.unanswered", f"{said} (option {answer.get('configId')!r} to "
                    f"{answer.get('value')!r}) was never answered",
                    session=j.tracker.args.get("session"), configId=answer.get("configId"),
                    value=answer.get("value"))


def _delete(j: Judge, turn: Mapping[str, Any], answer: Mapping[str, Any], said: str) -> None:
    """A ``session/delete`` of the running session. Refused (or never answered:
    ``agent.hang``'s, the step's answer being the delete's), the session is as it was; accepted,
    the turn must still be answered, and how it ended is recorded: nothing says a deletion
    stops the work of a live session (ACPFUZZ-DELETE-LIVE-MAY)."""
    if answer.get("outcome") != "ok":
        return
    handle = j.tracker.args.get("session")
    j.judge_as("delete.turn-unanswered")
    if turn.get("outcome") == "timeout":
        j.report_as("delete.turn-unanswered", f"{said} was accepted, and the turn's "
                    "session/prompt was never answered", session=handle)
        return
    reason = turn.get("stopReason")
    how = ("stopped (cancelled)" if reason == "cancelled" or turn.get("code") == -32800
           else f"ran on to stop reason {reason!r}" if turn.get("outcome") == "ok"
           else f"ended with an error ({turn.get('code')})" if turn.get("outcome") == "error"
           else None)
    if how is not None:
        j.judge_as("delete.handling")
        j.report_as("delete.handling", f"{said} was accepted, and the turn {how}",
                    session=handle, turn=dict(turn))


def _second_prompt(j: Judge, turn: Mapping[str, Any], second: Mapping[str, Any],
                   said: str) -> None:
    handle = j.tracker.args.get("session")
    if second.get("outcome") not in ("ok", "error", "timeout"):
        return  # never sent, or the agent died (agent.crash's)
    j.judge_as("second-prompt.unanswered")
    if second.get("outcome") == "timeout" and not second.get("answered"):
        j.report_as("second-prompt.unanswered", f"{said} was never answered (neither a "
                    "result nor an error)", session=handle)
        return
    how = _handling(turn, second)
    if how is not None:
        j.judge_as("second-prompt.handling")
        j.report_as("second-prompt.handling", f"{said}: {how}", session=handle,
                    first=dict(turn), second=dict(second))


def _handling(turn: Mapping[str, Any], second: Mapping[str, Any]) -> str | None:
    """What the agent did with a second prompt of a session whose turn ran (``None``: the
    first turn never ended, which is ``agent.hang``'s)."""
    if second.get("outcome") == "error":
        return f"refused (error {second.get('code')}) while the first turn ran"
    if turn.get("stopReason") == "cancelled" or turn.get("code") == -32800:
        return "the first turn stopped (cancelled) for it"
    if turn.get("outcome") == "error":
        # qwen-code 0.24.4 aborts the running turn and answers it -32603 ("Request was
        # aborted."): the client sees the end, as an error, not a stop reason.
        return f"the first turn ended with an error ({turn.get('code')}) when it came"
    if turn.get("outcome") != "ok":
        return None
    if second.get("overlapped"):
        return "run beside the first turn, ending while the first waited for the model"
    return "queued: it ended after the first turn"


def _kept(j: Judge, oracle: str, turn: Mapping[str, Any], said: str, handle: Any) -> None:
    """The turn answered with a stop reason other than ``cancelled``: the work went on."""
    reason = turn.get("stopReason")
    if turn.get("outcome") == "ok" and isinstance(reason, str) and reason != "cancelled":
        j.report_as(oracle, f"{said}, and the turn ended with stop reason {reason!r}, not "
                    "'cancelled'", session=handle, stopReason=reason)


#: What a ``new``, ``load``, ``resume`` or ``fork`` step with ``cancel_request`` sends, and
#: the oracle of its answer.
_CANCELLED = {"new": ("session/new", "cancel-request.new-unanswered"),
              "load": ("session/load", "cancel-request.lifecycle-unanswered"),
              "resume": ("session/resume", "cancel-request.lifecycle-unanswered"),
              "fork": ("session/fork", "cancel-request.lifecycle-unanswered")}


@builtin(
    "cancel-request.new-unanswered", severity="MUST", rule="CANCELREQ-AGENT-ANSWER-MUST",
    summary="a session/new with its $/cancel_request right behind it never answered (neither a "
            "result nor -32800)",
    also=[
        ("cancel-request.session-left", "SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD",
         "a session/new (or session/fork) cancelled by its $/cancel_request and answered with an "
         "error, after which session/list shows a session no successful request created; or a load "
         "or resume so cancelled whose prompt then reaches the model"),
        ("cancel-request.lifecycle-unanswered", "MUST", "CANCELREQ-AGENT-ANSWER-MUST",
         "a session/load, session/resume or session/fork with its $/cancel_request right behind "
         "it never answered (neither a result nor -32800)"),
    ],
)
def cancelled_request(j: Judge, ev: Event) -> None:
    """A ``session/new``, ``session/load``, ``session/resume`` or ``session/fork`` with its
    ``$/cancel_request`` right behind it: its answer, and (a new or fork) the
    ``session/list`` probe after a refusal."""
    t, c = j.tracker, j.change
    op = t.args.get("op")
    if not t.args.get("cancel_request") or op not in _CANCELLED:
        return
    handle = t.args.get("session")
    method, oracle = _CANCELLED[op]
    if op == "load" and t.protocol >= 2:
        method = "session/resume (replayFrom start)"
    if isinstance(c, Reply) and c.outcome is not None and c.outcome != "exited":
        j.judge_as(oracle)
        if c.outcome == "timeout":
            j.report_as(oracle, f"session {handle}: a {method} with its $/cancel_request "
                        "right behind it was never answered (neither a result nor -32800)",
                        session=handle)
        return
    listed = ev.data.get("sessions") if ev.kind == "verdict" \
        and ev.data.get("what") == "probe-list" else None
    if not isinstance(listed, list) or t.outcome != "error" or op not in CREATES:
        return
    j.judge_as("cancel-request.session-left")
    extra = sorted(set(listed) - t.known_ids)
    if extra:
        j.report_as("cancel-request.session-left", f"session {t.args.get('new', handle)}: "
                    f"a {method} cancelled by its $/cancel_request was answered with an "
                    f"error, and session/list then shows {len(extra)} session(s) that no "
                    "successful request created", session=t.args.get("new", handle),
                    listed=listed, unexpected=extra)
