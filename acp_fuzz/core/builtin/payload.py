"""The answer to a ``systemPrompt`` payload, judged on the answer alone (pure).

``payload.invalid-accepted``: an invalid payload got a success; ``payload.probe``: a payload
the agent does not advertise, and what it answered; ``payload.valid-rejected``: a valid one
got an error that can only be about the payload.
"""

from __future__ import annotations

from collections.abc import Mapping

from acp_fuzz.core.builtin.evidence import clip, said
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.fills import marks_in, prompt_length
from acp_fuzz.core.history import Event
from acp_fuzz.core.sessions import Reply
from acp_fuzz.core.steps import elsewhere

__all__ = ["payload"]

#: The rule of a re-sent, unchanged prompt refused on load, resume or fork.
RESEND_RULE = "ACPFUZZ-RESEND-ACCEPTED-SHOULD"
#: The rule of a huge prompt refused with an error: info (docs/rules.md).
HUGE_RULE = "ACPFUZZ-HUGE-REFUSED-DEF"
#: The fields a SystemPrompt has in the schema; anything else at its root is a custom field.
_SCHEMA_FIELDS = frozenset({"mode", "content", "_meta"})


def _huge(sp: object) -> int:
    """How many characters the text blocks of ``sp`` hold once expanded, when one of them
    holds a huge fill (:mod:`acp_fuzz.core.fills`); else 0."""
    content = sp.get("content") if isinstance(sp, Mapping) else None
    if not isinstance(content, list) or not any(
            marks_in(b["text"]) for b in content
            if isinstance(b, Mapping) and isinstance(b.get("text"), str)):
        return 0
    return prompt_length(sp)


def _root_fields(sp: object) -> list[str]:
    """The custom fields at the root of ``sp`` (none when it is not an object)."""
    return sorted(set(sp) - _SCHEMA_FIELDS) if isinstance(sp, Mapping) else []


@builtin(
    "payload.invalid-accepted", severity="MUST", rule="SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
    summary="an invalid payload, or a mode that is not advertised, got a success",
    also=[
        ("payload.probe", "info", "SP-CLIENT-GATE-MUSTNOT",
         "how an agent that does not advertise systemPrompt answered one (robustness)"),
        ("payload.valid-rejected", "MUST", "SP-AGENT-APPEND-MUST",
         "a valid payload for an advertised capability got an error"),
    ],
)
def payload(j: Judge, ev: Event) -> None:
    """The answer to a new, load, resume or fork, by the payload's classification."""
    r = j.change
    if not isinstance(r, Reply) or not r.changes:
        return
    op, args, outcome, cls, kind = r.op, r.args, r.outcome, r.classification, r.kind
    proto = j.tracker.protocol
    sp = args.get("systemPrompt")
    handle = args.get("session")
    if kind == "invalid" and r.answered:
        j.judge_as("payload.invalid-accepted", cls.get("rule"))
        if outcome == "ok":
            j.report_as("payload.invalid-accepted",
                        f"{said(proto, op)} with an invalid systemPrompt ({cls.get('reason')}) "
                        "got a success",
                        severity=cls.get("severity") or "MUST", rule=cls.get("rule"),
                        session=handle, reason=cls.get("reason"), systemPrompt=clip(sp))
    if kind == "probe" and outcome is not None:
        if r.answered:
            j.judge_as("payload.probe")
        j.report_as("payload.probe",
                    f"{said(proto, op)} carried a systemPrompt the agent does not advertise; it "
                    f"answered {outcome}",
                    session=handle)
    if kind == "valid" and r.answered:
        err = r.verdict.get("error") or {}
        code = err.get("code") if isinstance(err, Mapping) else None
        mode = sp.get("mode") if isinstance(sp, Mapping) else None
        rule = "SP-AGENT-OVERRIDE-MUST" if mode == "override" else "SP-AGENT-APPEND-MUST"
        sev = None
        changed = op != "new" and not j.tracker.resends(args, sp)
        if changed:
            # A *changed* prompt on load, resume or fork: applying it is a SHOULD
            # (SP-LIFECYCLE-CHANGE-SHOULD), and an agent that cannot apply it answers
            # with an error instead (SP-AGENT-ERROR-NOSIDEEFFECT-MUST allows exactly
            # that). One score for every honest refusal, whatever the agent's reason (a
            # busy session, one not stored yet: codex's adapter documents both in one
            # sentence): the SHOULD was not followed, and a SHOULD is where reasons live.
            sev, rule = "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD"
        elif op != "new":
            # The session's own prompt re-sent, as the RFD asks clients to: nothing changes,
            # so nothing is there to be unable to apply; but no MUST says a load, resume or
            # fork must succeed, and the error code that pins the refusal on the prompt is
            # the agent's word, not the text's. The harness's SHOULD (issue #31 §3).
            sev, rule = "SHOULD", RESEND_RULE
        if outcome == "error" and args.get("cancel_request"):
            # Its $/cancel_request came right behind it: the error (-32800, say) is the
            # answer the client asked for, not a refusal of the prompt. Not judged.
            return
        if outcome == "error" and _root_fields(sp):
            # acp-fuzz's own decoration (the valid class "unknown-field") puts a field at the
            # root of SystemPrompt, which the ACP docs forbid (EXT-ROOT-FIELDS-MUSTNOT): the
            # harness broke the protocol there, so the agent may refuse it. Not judged.
            return
        size = _huge(sp) if outcome == "error" else 0
        if size:
            # An error for megabytes of prompt is the error the RFD allows in place of
            # applying it: info, with the size (rules.py, ACPFUZZ-HUGE-REFUSED-DEF).
            j.judge_as("payload.valid-rejected", HUGE_RULE)
            j.report_as("payload.valid-rejected",
                        f"{said(proto, op)} with a valid {mode!r} systemPrompt of "
                        f"{size:,} characters got error {code}", severity="info",
                        rule=HUGE_RULE, session=handle, error=clip(err), size=size,
                        systemPrompt=clip(sp))
            return
        j.judge_as("payload.valid-rejected", rule)
        # On load/resume/fork an error may be about the session, not the prompt: only an
        # invalid-params answer is pinned on the payload, and not when the request also
        # moved the session or added roots (the schema lets an agent refuse a load or resume
        # whose cwd is not the session's), nor, for the session's own prompt, when a turn of
        # the session was running (a busy session may refuse a reattach; nothing in it was
        # about the prompt). A changed prompt refused on a busy session is scored as any
        # refused change (above); the turns after judge that the refusal changed nothing.
        if outcome == "error" and (op == "new" or (code == -32602 and not elsewhere(args)
                                                   and (changed or not args.get("busy")))):
            j.report_as("payload.valid-rejected",
                        f"{said(proto, op)} with a valid {mode!r} systemPrompt got error {code}",
                        severity=sev, rule=rule, session=handle, error=clip(err),
                        systemPrompt=clip(sp))
