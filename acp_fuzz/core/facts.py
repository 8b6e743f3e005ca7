"""Facts about an agent that a maintainer wants beside the findings, never verdicts (pure).

:func:`refusal_codes` counts the JSON-RPC error code of every refused request that carried a
``systemPrompt``, by the payload's class (the classifier's reason: ``mode-unknown``,
``content-empty``, ...; ``valid`` for a valid payload refused). No rule fixes a code
(SP-ERROR-CODE-DEF: the RFD says "return an error", the reference names -32602 for invalid
params, qwen-code answers -32023, codex-acp 1001), so the table is information: no oracle
reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from acp_fuzz.core.history import Event

__all__ = ["COMPARABLE", "Codes", "add_codes", "codes_text", "codes_to_wire", "refusal_codes",
           "version_differences"]

#: payload class -> error code -> how many refused requests answered it.
Codes = dict[str, dict[int, int]]


def refusal_codes(events: Iterable[Event]) -> Codes:
    """The error codes of a history's refused ``session/new``, load, resume and fork that
    carried a prompt, by the class the runner recorded for the step (``kind`` ``valid``, or
    the invalid or probe ``reason``); steps with no prompt, steps whose ``$/cancel_request``
    went right behind them (refused for the cancel, not for the prompt), and failures that
    are no JSON-RPC error (a timeout, a dead process), are left out."""
    out: Codes = {}
    classes: dict[int, str] = {}
    for ev in events:
        d = ev.data
        args = d.get("args") if ev.kind == "step" else None
        if isinstance(args, Mapping) and args.get("cancel_request"):
            continue
        if ev.kind == "step" and isinstance(d.get("class"), Mapping) \
                and isinstance(d.get("index"), int):
            c = d["class"]
            kind, reason = c.get("kind"), c.get("reason")
            if kind == "valid":
                classes[d["index"]] = "valid"
            elif kind in ("invalid", "probe") and isinstance(reason, str):
                classes[d["index"]] = reason[:64]
        elif ev.kind == "verdict" and d.get("what") == "reply" and d.get("outcome") == "error":
            cls = classes.get(d.get("step"))  # type: ignore[arg-type]
            err = d.get("error")
            code = err.get("code") if isinstance(err, Mapping) else None
            if cls is not None and isinstance(code, int) and not isinstance(code, bool):
                by = out.setdefault(cls, {})
                by[code] = by.get(code, 0) + 1
    return out


def add_codes(into: Codes, more: Mapping[str, Mapping[int, int]]) -> None:
    """Add ``more``'s counts to ``into``."""
    for cls, by in more.items():
        mine = into.setdefault(cls, {})
        for code, n in by.items():
            mine[code] = mine.get(code, 0) + n


def codes_text(by: Mapping[int, int]) -> str:
    """One class's codes as plain text, lowest code first: ``-32602 x4, 1001 x1``."""
    return ", ".join(f"{code} x{n}" for code, n in sorted(by.items()))


def codes_to_wire(codes: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """JSON's shape: ``{"mode-unknown": {"-32602": 3}}``, classes and codes sorted."""
    return {cls: {str(c): n for c, n in sorted(by.items())} for cls, by in sorted(codes.items())}


#: The capabilities (:class:`acp_fuzz.core.payloads.Capabilities` flags) that ACP v1 and v2
#: advertise alike, as markers: the rest differ by design (v2's ``session`` object commits an
#: agent to list, resume and close, and v2 has no ``session/load``).
COMPARABLE = ("system_prompt", "override", "fork", "delete", "title", "additional_directories")


def version_differences(v1: Mapping[str, object], v2: Mapping[str, object]) -> list[str]:
    """The :data:`COMPARABLE` flags that a v1 and a v2 campaign of the same agent (their JSON
    reports' ``capabilities``) advertise differently: ``"fork: v1 yes, v2 no"``. Facts for the
    matrix, never a verdict: an agent may offer another feature set in another version."""
    def said(v: object) -> str:
        return "yes" if v is True else "no"

    return [f"{k}: v1 {said(v1.get(k))}, v2 {said(v2.get(k))}" for k in COMPARABLE
            if (v1.get(k) is True) != (v2.get(k) is True)]
