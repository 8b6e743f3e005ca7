"""A turn whose model request failed must not look like one that succeeded (pure).

``turn.silent-failure`` (SHOULD, ACPFUZZ-FAILURE-VISIBLE-SHOULD): a ``prompt`` step whose
``fault`` the fake model applied, whose turn got no whole answer from the model (no model
request of the turn answered without a fault), ends with the stop reason ``end_turn`` and
not one ``agent_message_chunk`` (v2: ``agent_message``). The client is told the turn "ended
successfully" (the schema's words for ``end_turn``) with nothing to show for it. An error
answer, or any message the agent sends about the failure, is visible: not a finding.

A retry that drops the prompt needs no check here: a retried request carries the turn's
nonce, so it is a turn of its own to :mod:`.turns`, and ``prompt.lost`` judges it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.sessions import Reply

__all__ = ["silent_failure"]

#: The session updates that show the client something the agent said.
_SAID = frozenset({"agent_message_chunk", "agent_message"})


@dataclass
class _Turn:
    """What the current step's turn has shown so far."""

    faulted: int = 0  # its model requests the fake model failed
    answered: int = 0  # its model requests answered whole
    said: int = 0  # agent messages sent to the client


@builtin(
    "turn.silent-failure", severity="SHOULD", rule="ACPFUZZ-FAILURE-VISIBLE-SHOULD",
    summary="a turn whose model request failed, and that never got an answer, ended with end_turn "
            "and nothing said",
)
def silent_failure(j: Judge, ev: Event) -> None:
    """The end of a faulted turn, against what the turn showed (see the module docs)."""
    turn = j.memo(_Turn)
    if ev.kind == "step":
        turn.faulted = turn.answered = turn.said = 0
        return
    args = j.tracker.args
    if args.get("op") != "prompt" or "fault" not in args:
        return
    if ev.kind == "model":
        x = ModelExchange.from_wire(ev.data)
        if x.session == args.get("session") and not x.side:
            if x.fault is not None and x.fault != "slow-first-byte":
                turn.faulted += 1
            elif 200 <= x.status < 300:
                turn.answered += 1
        return
    if ev.kind == "acp" and ev.data.get("dir") == "recv":
        msg = ev.data.get("msg")
        params = msg.get("params") if isinstance(msg, Mapping) else None
        update = params.get("update") if isinstance(params, Mapping) else None
        if isinstance(update, Mapping) and update.get("sessionUpdate") in _SAID:
            turn.said += 1
        return
    r = j.change
    if not isinstance(r, Reply) or not r.answered or not turn.faulted or turn.answered:
        return
    j.judge_as("turn.silent-failure")
    if r.verdict.get("stopReason") == "end_turn" and not turn.said:
        j.report_as("turn.silent-failure",
                    f"session {args.get('session')}: its model request failed "
                    f"({args['fault']}), got no answer, and the turn ended with end_turn "
                    f"and nothing said", session=args.get("session"), fault=args["fault"],
                    faulted=turn.faulted)
