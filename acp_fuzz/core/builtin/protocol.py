"""The agent answers, stays up, and speaks JSON-RPC and the ACP schema (pure).

``agent.hang`` and ``agent.crash`` judge every answered step; ``protocol.malformed`` every
line the agent wrote (and the harness's own complaint about an answer); ``cancel.error`` the
prompt a ``session/cancel`` cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.builtin.evidence import clip, said
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.sessions import IDS, Reply
from acp_fuzz.core.steps import ENDING

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

__all__ = ["protocol"]


@cache
def _schemas() -> dict[str, Any]:
    """The validators of a JSON-RPC message, a ``session/update``'s params and each method's
    result (v1 and v2), built once, when the first frame is judged: jsonschema costs about
    0.1 s to import, which a command that judges nothing (``--help``, an error) need not pay."""
    from jsonschema import Draft202012Validator

    _MESSAGE = Draft202012Validator({
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {"jsonrpc": {"const": "2.0"}},
        "oneOf": [
            {"required": ["method"], "properties": {"method": {"type": "string"}}},
            {"required": ["id", "result"], "not": {"required": ["error"]}},
            {"required": ["id", "error"], "not": {"required": ["result"]},
             "properties": {"error": {"type": "object", "required": ["code", "message"],
                                      "properties": {"code": {"type": "integer"},
                                                     "message": {"type": "string"}}}}},
        ],
    })
    _UPDATE = Draft202012Validator({
        "type": "object", "required": ["sessionId", "update"],
        "properties": {"sessionId": {"type": "string"},
                       "update": {"type": "object", "required": ["sessionUpdate"],
                                  "properties": {"sessionUpdate": {"type": "string"}}}},
    })
    _RESULTS = {
        "session/new": Draft202012Validator({"type": "object", "required": ["sessionId"],
                                             "properties": {"sessionId": {"type": "string"}}}),
        "session/fork": Draft202012Validator({"type": "object", "required": ["sessionId"],
                                              "properties": {"sessionId": {"type": "string"}}}),
        "session/prompt": Draft202012Validator({
            "type": "object", "required": ["stopReason"],
            "properties": {"stopReason": {"enum": ["end_turn", "max_tokens", "max_turn_requests",
                                                   "refusal", "cancelled"]}}}),
        "session/load": Draft202012Validator({"type": "object"}),
        "session/resume": Draft202012Validator({"type": "object"}),
        "initialize": Draft202012Validator({
            "type": "object", "required": ["protocolVersion"],
            "properties": {"protocolVersion": {"type": "integer"}}}),
    }
    #: v2 answers a prompt once its message is inserted, with the message's id; the stop reason
    #: comes later, in the idle ``state_update`` (docs/rules.md).
    _RESULTS_V2 = {**_RESULTS, "session/prompt": Draft202012Validator({
        "type": "object", "required": ["messageId"],
        "properties": {"messageId": {"type": "string"}}})}
    return {"message": _MESSAGE, "update": _UPDATE, "results": _RESULTS,
            "results_v2": _RESULTS_V2}


#: The history's mark on an answer that came after the harness gave up waiting for it
#: (:mod:`acp_fuzz.engine.process.transport`): recorded, never a bad line.
LATE = "late"


@builtin(
    "agent.hang", severity="MUST", rule="SES-AGENT-BASELINE-MUST",
    summary="the agent gave no answer within the timeout",
    also=[
        ("agent.crash", "MUST", "SES-AGENT-BASELINE-MUST",
         "the agent process died"),
        ("protocol.malformed", "MUST", "FR-WIRE-NDJSON-MUST",
         "a malformed JSON-RPC message, or one that breaks the schema"),
        ("cancel.error", "MUST", "CANCEL-AGENT-STOPREASON-MUST",
         "a prompt cancelled mid-turn was answered with an error, not a stop reason"),
    ],
)
def protocol(j: Judge, ev: Event) -> None:
    """A step's answer (:func:`_answer`) and every frame the agent wrote (:func:`_frame`)."""
    if isinstance(j.change, Reply):
        _answer(j, j.change)
    elif ev.kind == "acp":
        _frame(j, ev)


def _answer(j: Judge, r: Reply) -> None:
    """A step's answer: it came (``agent.hang``), the agent lived (``agent.crash``), the
    harness could read it (``protocol.malformed``), a cancelled prompt stopped as cancelled
    (``cancel.error``)."""
    op, args, outcome, proto = r.op, r.args, r.outcome, j.tracker.protocol
    if outcome is not None:
        j.judge_as("agent.hang")
        j.judge_as("agent.crash")
    if outcome == "timeout" and (args.get("during") == "cancel-request"
                                 or args.get("cancel_request")):
        # A request its $/cancel_request left unanswered: cancel-request.unanswered (a
        # prompt), cancel-request.new-unanswered (a session/new) or
        # cancel-request.lifecycle-unanswered (a load, resume or fork).
        return
    if outcome == "timeout":
        beside = " (or to the turn running beside it)" if args.get("busy") else (
            f" (or to the turn of {args['while']} it was sent during)" if args.get("while")
            else "")
        what = said(proto, op)
        if args.get("during") in ENDING:
            # The step's answer is the close's or the delete's, sent while the turn ran.
            what = f"the session/{args['during']} sent during a turn"
        j.report_as("agent.hang", f"no answer to {what}{beside} within the timeout",
                    session=args.get("session"))
        return
    if outcome == "exited" and op != "restart":
        j.report_as("agent.crash", f"the agent process died during {said(proto, op)}",
                    session=args.get("session"))
        return
    if outcome == "exited":
        j.report_as("agent.crash", "the agent did not come back after a restart")
        return
    d = r.verdict
    if outcome == "error" and isinstance(d.get("error"), Mapping) and "harness" in d["error"]:
        j.report_as("protocol.malformed", f"{op}: {d['error']['harness']}",
                    rule="FR-WIRE-NDJSON-MUST", session=args.get("session"))
    cancelled = op == "cancel" or args.get("during") in ("cancel", "cancel-request")
    if cancelled and r.live and r.answered and not _refused_before(j, args):
        # Only a session this agent process has open: after a restart (not loaded again) or
        # a close, the prompt is about an unknown session and an error is the right answer.
        j.judge_as("cancel.error")
        if outcome == "error":
            j.report_as("cancel.error", "the prompt cancelled mid-turn got an error instead of a "
                        "stop reason", session=args.get("session"), error=clip(d.get("error")))
        elif proto >= 2 and d.get("stopReason") == "error":
            # v2: the turn's end is its idle state_update; "error" there is v1's error answer.
            j.report_as("cancel.error", "the prompt cancelled mid-turn ended its turn with stop "
                        "reason error instead of cancelled", session=args.get("session"))


def _refused_before(j: Judge, args: Mapping[str, Any]) -> bool:
    """Was a load or resume of this session refused since its last turn? Then a failing
    turn is that refusal's side effect, ``reject.side-effect``'s to judge: the cancel is
    written right behind the prompt, and a prompt on a session the refusal unloaded fails
    before any cancel can reach it (a planted bug once shrank to a false ``cancel.error``)."""
    handle = args.get("session")
    m = j.tracker.sessions.get(handle) if isinstance(handle, str) else None
    return m is not None and m.rejected_change is not None


def _frame(j: Judge, ev: Event) -> None:
    """``protocol.malformed``: every line the agent wrote is a JSON-RPC message of the ACP
    schema (a result of the shape its request's method owes)."""
    d = ev.data
    if d.get("dir") == "send":
        return
    msg = d.get("msg")
    j.judge_as("protocol.malformed")
    # ``late``: the answer to a request the harness stopped waiting for. It is a JSON-RPC
    # message like any other (its id is one the harness sent, once); the wait it outlasted is
    # ``agent.hang``'s to judge, or the bound's that gave up (a busy machine can outlast a
    # held turn's or a probe's bound). Its shape is still judged below.
    if d.get("error") and d["error"] != LATE:
        j.report_as("protocol.malformed", f"the agent wrote a bad line ({d['error']})",
                    evidence_event=ev.seq, raw=clip(d.get("raw", ""), 200), problem=d["error"])
        return
    if not isinstance(msg, Mapping):
        return
    problem = _first_error(_schemas()["message"], msg)
    if problem is None and msg.get("method") == "session/update":
        problem = _first_error(_schemas()["update"], msg.get("params"))
    if problem is None and "result" in msg:
        rid = msg.get("id")
        method = j.tracker.requests.get(rid) if isinstance(rid, IDS) else None
        validator = _schemas()["results_v2" if j.tracker.protocol >= 2 else "results"].get(
            method or "")
        if validator is not None:
            problem = _first_error(validator, msg["result"])
    if problem is not None:
        j.report_as("protocol.malformed", f"a message from the agent breaks the schema: {problem}",
                    evidence_event=ev.seq, offending=clip(dict(msg), 200))


def _first_error(v: Draft202012Validator, obj: Any) -> str | None:
    err = next(iter(v.iter_errors(obj)), None)
    if err is None:
        return None
    path = "/".join(str(p) for p in err.absolute_path)
    return f"{path or '<root>'}: {err.message}"[:200]
