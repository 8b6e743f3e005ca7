"""Each turn carries the prompt its session owes (pure).

A turn's request is judged against the session's candidates (:mod:`acp_fuzz.core.sessions`):
none fits, and the prompt is ``prompt.lost`` or ``prompt.altered``; the old prompt after a
change is ``prompt.change-deferred`` (``prompt.change-ignored`` after a rebuild); either
choice for an omitted prompt is ``lifecycle.omitted-fallback`` (and a second, different one
``lifecycle.omitted-inconsistent``). The prompt that fits is then judged for where it sits
(``prompt.misplaced``), how often (``prompt.duplicated``), what came with it
(``prompt.altered`` for a vendor text beside it) and what it did to the defaults
(``override.not-applied``, ``append.replaced-default``, ``defaults.too-small``).
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.baseline import (
    DEFAULT_ABSENT,
    DEFAULT_PRESENT,
    MIN_BASELINE_CHARS,
    MIN_BASELINE_LINES,
)
from acp_fuzz.core.builtin.evidence import clip, said, slot_of, where
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.findings import CATALOG, Severity, is_reported
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.sessions import (
    MIN_SIGNIFICANT,
    SEP,
    Candidate,
    ModelRequest,
    Prompt,
    SessionModel,
)

__all__ = ["IGNORED_AFTER", "turns"]

#: How many turns after a rebuild may still show the old prompt before a deferred change
#: counts as ignored. One turn of slack: an agent may rebuild at the end of the turn that
#: triggered it (a compaction forced by the usage a reply reported lands before the *next*
#: request), so only a second turn on the old prompt shows the rebuild did not apply it.
#: Shrinking keeps both turns: with one, the finding is gone.
IGNORED_AFTER = 2

_CHOICE = {"kept": "kept the stored prompt", "default": "fell back to its defaults"}


@dataclass
class _Memory:
    """What the check remembers of its own verdicts in one history."""

    #: ``prompt.change-deferred`` findings to withdraw when the change shows up after all,
    #: by session model (:attr:`SessionModel.uid`).
    deferred: dict[int, list[tuple[str, str | None, int]]] = field(default_factory=dict)
    #: The first choice seen for an omitted prompt, per situation: (choice, session, steps).
    omitted_choices: dict[tuple[str, bool], tuple[str, str, list[str]]] = field(
        default_factory=dict)
    too_small_reported: bool = False


#: The rules of a prompt lost at a compaction, and of a deferred change a compaction did not
#: apply: their own rows in the matrix (docs/oracles.md, "Rules of acp-fuzz's own").
KEEPS_RULE = "ACPFUZZ-COMPACTION-KEEPS-MUST"
APPLIES_RULE = "ACPFUZZ-COMPACTION-APPLIES-SHOULD"
#: The rule of a stored prompt kept for a request that omitted it, and not delivered whole:
#: the omission allows keeping it or the defaults (SP-LIFECYCLE-OMIT-MAY, a MAY a SHOULD
#: finding cannot cite), part of it is neither (docs/rules.md).
KEPT_RULE = "ACPFUZZ-KEPT-WHOLE-SHOULD"
#: The rule of a kept prompt dropped for the defaults between two plain turns (no rebuild).
OMIT_HOLDS_RULE = "ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD"
#: The rule of a change still not applied when ``--strict`` reports a deferral: the SHOULD
#: that the deferral (SP-LIFECYCLE-DEFER-MAY) is the exception to.
CHANGE_RULE = "SP-LIFECYCLE-CHANGE-SHOULD"


def _rule_after(m: SessionModel, primary: Candidate) -> str:
    """The rule a missing prompt breaks: the candidate's own, or, while no turn has shown the
    prompt since a compaction of the session, the compaction's (for a prompt owed as a MUST:
    a kept prompt after an omitted one stays a SHOULD, :data:`KEPT_RULE`)."""
    if m.compacted and primary.severity == Severity.MUST:
        return KEEPS_RULE
    return {"kept": KEPT_RULE, "deferred": CHANGE_RULE}.get(primary.label, primary.rule)


def _ignored_rule(m: SessionModel) -> str:
    """The rule of a deferred change still not applied after the session's rebuild: the
    compaction's when a compaction rebuilt it, else the lifecycle rule's (a cold load)."""
    rebuilt = m.rebuilt or ""
    return APPLIES_RULE if rebuilt.startswith("the compaction") else CATALOG[
        "prompt.change-ignored"].rule


@builtin(
    "prompt.lost", severity="MUST", rule="SP-AGENT-APPLY-NEW-MUST",
    summary="an accepted prompt (new, re-sent or changed) is missing from the session's model "
            "request, and it is not the old one kept back either",
    also=[
        ("prompt.altered", "MUST", "SP-AGENT-APPLY-NEW-MUST",
         "the prompt arrives, but not verbatim (truncated, a block dropped, mangled)"),
        ("prompt.misplaced", "SHOULD", "SP-AGENT-APPEND-PLACEMENT-SHOULD",
         "the prompt sits in user or history content instead of the system slot"),
        ("prompt.duplicated", "SHOULD", "ACPFUZZ-PROMPT-ONCE-SHOULD",
         "the prompt appears more than once in one model request"),
        ("prompt.change-deferred", "info", "SP-LIFECYCLE-DEFER-MAY",
         "a changed prompt on load, resume or fork was accepted but not (yet) applied"),
        ("prompt.change-ignored", "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD",
         "a changed prompt is still not applied two turns after the agent rebuilt its prompt (a "
         "compaction; for an agent that cannot be made to compact, a load or resume in a new "
         "process)"),
        ("lifecycle.omitted-fallback", "info", "SP-LIFECYCLE-OMIT-MAY",
         "which behaviour the agent chose for an omitted prompt (kept or default)"),
        ("lifecycle.omitted-inconsistent", "info", "SP-LIFECYCLE-OMIT-MAY",
         "with the prompt omitted, one session kept its stored prompt and another, in the same "
         "situation, fell back to the defaults"),
        ("override.not-applied", "MUST", "SP-AGENT-OVERRIDE-REPLACES-DEF",
         "override mode, yet the agent's default instructions are still present"),
        ("append.replaced-default", "MUST", "SP-AGENT-APPEND-ADDITIVE-DEF",
         "append mode, yet the agent's default instructions are gone"),
        ("defaults.too-small", "info", "SP-AGENT-OVERRIDE-REPLACES-DEF",
         "override and append are not judged: the learned default instructions are too small to "
         "tell kept from replaced"),
    ],
)
def turns(j: Judge, ev: Event) -> None:
    """A turn's request against the session's candidates (see the module's docstring)."""
    c = j.change
    if not isinstance(c, ModelRequest) or c.route != "turn" or not c.judged:
        return
    m, x, seq, everything = c.session, c.x, ev.seq, c.everything
    handle = x.session
    assert m is not None and handle is not None
    mem = j.memo(_Memory)
    candidates = c.candidates
    primary = candidates[0]
    if primary.prompt is not None and primary.prompt.significant:
        rule = _rule_after(m, primary)
        j.judge_as("prompt.lost", rule)
        j.judge_as("prompt.altered", rule)
        j.judge_as("prompt.altered", "ACPFUZZ-VERBATIM-SHOULD")
    if any(o.label == "deferred" for o in candidates):
        if m.rebuilt:
            j.judge_as("prompt.change-ignored", _ignored_rule(m))
        else:
            j.judge_as("prompt.change-deferred")
    if len(candidates) > 1 and any(o.label in ("kept", "default") for o in candidates):
        j.judge_as("lifecycle.omitted-fallback")
    matched = c.matched
    if matched is None:
        _report_missing(j, m, handle, primary, x, seq, everything)
        return
    if matched.label in ("applied", "kept"):
        # The change shows (a kept prompt is the last one applied): a deferral before it was
        # the agent's right, not a finding.
        for key in mem.deferred.pop(m.uid, []):
            j.withdraw(key)
    if matched.label == "applied" or len(candidates) == 1:
        pass  # settled, or nothing to choose between (a session made without a prompt)
    elif matched.label == "deferred" and _altered_change(c):
        # The new prompt is in use, altered: what happened to it is the finding, not an old
        # prompt still in use (that sends the maintainer looking for the wrong bug).
        _report_missing(j, m, handle, primary, x, seq, everything)
        return
    elif matched.label == "deferred":
        _report_deferred(j, mem, m, handle, c, seq)
    elif primary.label == "applied" and primary.origin == "kept" and m.compacted:
        _report_late_fallback(j, m, handle, primary, seq)
    elif primary.label == "applied" and primary.origin == "kept":
        _report_unprompted_fallback(j, m, handle, primary, seq)
    else:
        _report_choice(j, mem, m, handle, matched, seq)
    p = matched.prompt
    if p is None:
        return
    system = SEP.join(x.texts("system"))
    if p.significant:
        j.judge_as("prompt.misplaced")
        j.judge_as("prompt.duplicated")
    for b in p.significant:
        if b not in system:
            j.report_as("prompt.misplaced",
                        f"session {handle}: the prompt is in the {slot_of(x, b)} content, "
                        "not the system slot", session=handle, **where(x, b, seq))
            break
    default_text = "\n".join(sorted(j.baseline.lines))
    for b in p.significant:
        expected = sum(o.count(b) for o in p.blocks) + default_text.count(b)
        seen = sum(s.text.count(b) for s in x.segments)
        if seen > max(expected, 1):
            j.report_as("prompt.duplicated",
                        f"session {handle}: a prompt block appears {seen} times in one request",
                        session=handle, model_event=seq, count=seen, block=clip(b),
                        paths=[s.path for s in x.segments if b in s.text])
            break
    _judge_vendor_also(j, m, handle, x, seq, everything)
    if not m.mode_switched:
        _judge_defaults(j, mem, handle, p, matched.origin, system, seq)


def _judge_vendor_also(j: Judge, m: SessionModel, handle: str, x: ModelExchange, seq: int,
                       everything: str) -> None:
    """``prompt.altered`` (SHOULD, ACPFUZZ-STANDARD-ONLY-SHOULD): the standard prompt
    reached the model, and so did the text of a legacy ``_meta`` carrier sent beside it.
    (The vendor text *instead* of the standard one is ``prompt.lost``, MUST.)"""
    texts = {path: t.strip() for path, t in m.vendor.items()
             if len(t.strip()) >= MIN_SIGNIFICANT
             and not any(t.strip() in o or o in t.strip() for o in m.own)}
    if not texts:
        return
    j.judge_as("prompt.altered", "ACPFUZZ-STANDARD-ONLY-SHOULD")
    for path, text in sorted(texts.items()):
        if text in everything:
            j.report_as("prompt.altered",
                        f"session {handle}: the standard prompt reached the model, and so did "
                        f"the text of the vendor field {path} sent with it", severity="SHOULD",
                        rule="ACPFUZZ-STANDARD-ONLY-SHOULD", session=handle, also=path,
                        vendor_text=clip(text), **where(x, text, seq))
            return


def _judge_defaults(j: Judge, mem: _Memory, handle: str, p: Prompt, origin: str, system: str,
                    seq: int) -> None:
    """``override.not-applied`` and ``append.replaced-default``, judged only on a substantial
    baseline. Their severity follows how the prompt arrived: MUST for one from ``session/new``
    or accepted on a lifecycle request, info for one the agent kept when a later request
    omitted it (keeping it at all was the agent's choice, SP-LIFECYCLE-OMIT-MAY)."""
    bl = j.baseline
    if not bl.lines or p.mode not in ("override", "append"):
        return
    if not bl.substantial:
        if not mem.too_small_reported:
            mem.too_small_reported = True
            j.report_as("defaults.too-small",
                        f"{p.mode} not judged: the learned default instructions are too small to "
                        f"judge ({bl.size_lines} instruction line(s), {bl.size_chars} characters; "
                        f"at least {MIN_BASELINE_LINES} lines and {MIN_BASELINE_CHARS} characters "
                        "are needed)", session=handle, model_event=seq,
                        baseline_lines=bl.size_lines, baseline_chars=bl.size_chars,
                        baseline=[clip(ln, 200) for ln in bl.to_wire()],
                        kept=[clip(ln, 200) for ln in bl.kept_in(system)])
        return
    sev = "info" if origin == "kept" else None
    j.judge_as("override.not-applied" if p.mode == "override" else "append.replaced-default")
    share = bl.share_in(system)
    if p.mode == "override" and share >= DEFAULT_PRESENT:
        j.report_as("override.not-applied",
                    f"session {handle}: override mode, yet {share:.0%} of the default "
                    "instruction lines are in the system slot", severity=sev, session=handle,
                    model_event=seq, share=round(share, 3), origin=origin)
    if p.mode == "append" and share <= DEFAULT_ABSENT:
        j.report_as("append.replaced-default",
                    f"session {handle}: append mode, yet only {share:.0%} of the default "
                    "instruction lines are in the system slot", severity=sev, session=handle,
                    model_event=seq, share=round(share, 3), origin=origin)


def _short_blocks_delivered(j: Judge, m: SessionModel, handle: str, p: Prompt,
                            everything: str) -> list[str]:
    """The prompt's short blocks (too short to be evidence of a bug) that are in the request
    and could come from nowhere else: not from the defaults, nor from another candidate
    prompt of the session, nor from another session's prompt.

    Used only to *name* a failure that is already certain (every significant block is
    missing): with these there, a block was dropped (``prompt.altered``), not the whole
    prompt (``prompt.lost``). E.g. ``["[]", "Be a teacher... [canary]"]`` with its last
    block dropped."""
    elsewhere = "\n".join(j.baseline.lines)
    others = "\n".join([b for c in m.candidates if c.prompt is not None and c.prompt is not p
                        for b in c.prompt.blocks]
                       + [b for h, texts in j.tracker.short_blocks.items() if h != handle
                          for b in texts])
    out: list[str] = []
    for b in dict.fromkeys(b.strip() for b in p.blocks):
        if 2 <= len(b) < MIN_SIGNIFICANT and b in everything and b not in elsewhere \
                and b not in others:
            out.append(b)
    return out


def _report_missing(j: Judge, m: SessionModel, handle: str, primary: Candidate,
                    x: ModelExchange, seq: int, everything: str) -> None:
    """No candidate fits: the session's prompt is lost or altered. Reported against the first
    candidate, the prompt the session must be using (for a lifecycle request: NEW)."""
    p = primary.prompt
    if p is None:
        return
    sig = p.significant
    present = [b for b in sig if b in everything]
    missing = [b for b in sig if b not in present]
    reformatted: dict[str, tuple[str, str]] = {}
    for b in missing:
        found = _loose_find(b, x)
        if found is not None:
            reformatted[b] = found
    cut = [b for b in missing if b not in reformatted and _truncated(b, everything)]
    sev = primary.severity if is_reported(primary.severity) else Severity.SHOULD
    rule = _rule_after(m, primary)
    won = {path: text for path, text in m.vendor.items()
           if len(text.strip()) >= MIN_SIGNIFICANT and text.strip() in everything}
    # A vendor field's text in place of every significant block: the prompt was replaced,
    # and a short block still found ('[]') is a coincidence of the request's other text, not
    # a block delivered (claude-agent-acp's finding 5 was named prompt.altered so, 2026-12-04).
    partial = _short_blocks_delivered(j, m, handle, p, everything) \
        if not present and not won else []
    extra: dict[str, Any] = {}
    note = ""
    if m.compacted:
        # No turn since the compaction showed the prompt: lost (or altered) there.
        extra["compaction"] = m.compacted
        note = f", after {m.compacted}"
    if won:
        path = next(iter(won))
        extra = {"won": path, "vendor_text": clip(won[path])}
        note += f"; the text of the vendor field {path} is there instead"
    if present or reformatted or cut or partial:
        if reformatted and len(reformatted) == len(missing):
            # Only the form changed (SP-AGENT-APPEND-FORMAT-DEF): never MUST.
            spacing = all(kind == "whitespace" for kind, _ in reformatted.values())
            sev, rule = ("info", "SP-AGENT-APPEND-FORMAT-DEF") if spacing \
                else ("SHOULD", "ACPFUZZ-VERBATIM-SHOULD")
            extra["received"] = [{"sent": clip(b), "as": kind, "received": got}
                                 for b, (kind, got) in reformatted.items()]
        j.report_as("prompt.altered",
               f"session {handle}: {len(missing)} of {len(sig)} block(s) of the prompt "
               f"from step {p.step + 1} are not in the request verbatim"
               + (f" (its short block(s) {', '.join(repr(clip(b)) for b in partial)} "
                  "are)" if partial else "") + note,
               severity=sev, rule=rule, session=handle, model_event=seq,
               missing=[clip(b) for b in missing], **extra)
    elif sig:
        j.report_as("prompt.lost",
               f"session {handle}: the prompt from step {p.step + 1} is not in the request"
               + note, severity=sev, rule=rule, session=handle, model_event=seq,
               expected=clip(sig[0]), system_slot=clip(SEP.join(x.texts("system"))),
               steps=list(m.trail), **extra)


def _altered_change(c: ModelRequest) -> bool:
    """Whether a turn that fits an older candidate shows the changed prompt (NEW) after all,
    altered: a block of NEW that no older candidate holds is not in the request verbatim,
    yet a block of NEW's own arrived, verbatim, in another form (:func:`_loose_find`) or cut
    short (:func:`_truncated`). An older candidate can fit such a request when it holds
    no text of its own there (the defaults alone) or only text NEW shares with it."""
    new = c.candidates[0]
    if new.label != "applied" or new.prompt is None:
        return False
    older = [b for o in c.candidates[1:] if o.prompt is not None for b in o.prompt.blocks]
    fresh = [b for b in new.prompt.significant if not any(b in o for o in older)]
    missing = [b for b in fresh if b not in c.everything]
    if not missing:
        return False
    # A block whose first half an older prompt already holds (drawn texts repeat "lorem
    # ipsum ...") proves nothing cut short: the older prompt alone explains that text. A
    # deferring agent whose old prompt shared such a prefix was a false MUST here.
    shown = [b for b in missing if not any(_truncated(b, o) for o in older)]
    return len(missing) < len(fresh) or any(
        _loose_find(b, c.x) is not None or _truncated(b, c.everything) for b in shown)


def _report_deferred(j: Judge, mem: _Memory, m: SessionModel, handle: str, c: ModelRequest,
                     seq: int) -> None:
    assert c.matched is not None
    new = c.candidates[0].prompt
    matched = c.matched
    evidence: dict[str, Any] = {
        "model_event": seq, "steps": list(m.trail),
        "requested": clip(new.significant[0]) if new and new.significant else None,
        "in_use": clip(matched.prompt.significant[0])
        if matched.prompt and matched.prompt.significant else "(the default instructions)"}
    after = ""
    if m.rebuilt:
        turns = len(c.old_turns)
        evidence.update(rebuilt_by=m.rebuilt, turns_after=sorted(i + 1 for i in c.old_turns))
        if turns >= IGNORED_AFTER:
            why = (" (acp-fuzz's reading of a rebuild, for an agent that cannot be made to "
                   "compact)") if m.rebuilt.startswith("the cold load") else ""
            j.report_as("prompt.change-ignored",
                        f"session {handle}: the changed prompt was accepted, and the old one is "
                        f"still in use {turns} turns after {m.rebuilt}{why}", session=handle,
                        rule=_ignored_rule(m),
                        **evidence)
            return
        after = f" ({turns} turn after {m.rebuilt})"
    key = j.report_as("prompt.change-deferred",
                      f"session {handle}: the changed prompt was accepted but the old one is "
                      f"still in use{after}", severity="SHOULD" if j.strict else "info",
                      rule=CHANGE_RULE if j.strict else None, session=handle, **evidence)
    mem.deferred.setdefault(m.uid, []).append(key)


def _report_late_fallback(j: Judge, m: SessionModel, handle: str, kept: Candidate,
                          seq: int) -> None:
    """The defaults, on a session whose turns showed the stored prompt kept after an omitted
    one: the fallback the omission allowed, landing late (both pinned agents do it at their
    next compaction). The result of an omitted prompt is the agent's (SP-LIFECYCLE-OMIT-MAY:
    record, do not fail, and check it is consistent): ``lifecycle.omitted-inconsistent``,
    info, never a lost prompt."""
    j.judge_as("lifecycle.omitted-inconsistent")
    assert kept.prompt is not None
    when = f", after {m.compacted}" if m.compacted else ""
    evidence: dict[str, Any] = {"first": {"session": handle, "choice": "kept"},
                                "now": {"session": handle, "choice": "default"},
                                "steps": list(m.trail)}
    if m.compacted:
        evidence["compaction"] = m.compacted
    j.report_as("lifecycle.omitted-inconsistent",
                f"session {handle}: with the prompt omitted, the agent first kept the stored "
                f"prompt (from step {kept.prompt.step + 1}), then fell back to its defaults"
                f"{when}", session=handle, model_event=seq, **evidence)


def _report_unprompted_fallback(j: Judge, m: SessionModel, handle: str, kept: Candidate,
                                seq: int) -> None:
    """The defaults, on a session whose turns showed the stored prompt kept after an omitted
    one, with no rebuild since (no compaction, no other reattach): ``prompt.lost`` at SHOULD
    (ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD). The omission allowed either prompt, and the agent
    showed which it chose; a later fallback is allowed as a change deferred to the next
    rebuild (SP-LIFECYCLE-DEFER-MAY), and between two plain turns there was none. SHOULD,
    not MUST: the defaults were a result the omission allowed."""
    j.judge_as("prompt.lost", OMIT_HOLDS_RULE)
    assert kept.prompt is not None
    j.report_as("prompt.lost",
                f"session {handle}: with the prompt omitted, the agent kept the stored prompt "
                f"(from step {kept.prompt.step + 1}), then dropped it for its defaults with no "
                "rebuild in between (no compaction, no reattach)", severity="SHOULD",
                rule=OMIT_HOLDS_RULE, session=handle, model_event=seq,
                first={"session": handle, "choice": "kept"},
                now={"session": handle, "choice": "default"}, steps=list(m.trail))


def _report_choice(j: Judge, mem: _Memory, m: SessionModel, handle: str, matched: Candidate,
                   seq: int) -> None:
    j.report_as("lifecycle.omitted-fallback",
                f"session {handle}: with the prompt omitted, the agent {_CHOICE[matched.label]}",
                session=handle, model_event=seq, choice=matched.label)
    sit = m.omit_situation  # the tracker clears it once this turn is applied
    if sit is None:
        return
    if sit in mem.omitted_choices:
        j.judge_as("lifecycle.omitted-inconsistent")
    first = mem.omitted_choices.setdefault(sit, (matched.label, handle, list(m.omit_trail)))
    if first[0] != matched.label:
        op, cold = sit
        proto = j.tracker.protocol
        where_ = f"{said(proto, op)} after a restart" if cold else said(proto, op)
        j.report_as("lifecycle.omitted-inconsistent",
                    f"session {handle}: with the prompt omitted on {where_}, the agent "
                    f"{_CHOICE[matched.label]}, but for session {first[1]} in the same "
                    f"situation it {_CHOICE[first[0]]}",
                    session=handle, model_event=seq,
                    first={"session": first[1], "choice": first[0], "steps": first[2]},
                    now={"session": handle, "choice": matched.label,
                         "steps": list(m.omit_trail)})


#: A block counts as truncated (altered, not lost) when at least its first half arrived, and
#: that half is long enough not to match by chance.
MIN_TRUNCATED_PREFIX = 256


def _truncated(block: str, everything: str) -> bool:
    half = block[: len(block) // 2]
    return len(half) >= MIN_TRUNCATED_PREFIX and half in everything


_INVISIBLE = re.compile(r"[\u0000-\u0008\u000b-\u001f\u007f\u200b-\u200f\u2060\ufeff]")
#: One unit of escaped text: an HTML entity, a JSON escape, or any one character.
_ESCAPE = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z]{2,8});|\\u[0-9a-fA-F]{4}"
                     r"|\\[nrt\"\\/']|.", re.DOTALL)
_JSON_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _squeeze(s: str, *, unescape: bool) -> tuple[str, list[tuple[int, int]]]:
    """``s`` without whitespace (and, with ``unescape``, NFC-normalised, without invisible
    characters, with HTML entities and JSON escapes decoded), and for each character kept the
    span of ``s`` it came from."""
    if unescape:
        s = unicodedata.normalize("NFC", s)
    out: list[str] = []
    where: list[tuple[int, int]] = []
    for tok in _ESCAPE.finditer(s):
        t = tok.group()
        if unescape and len(t) > 1:
            if t.startswith("&"):
                t = html.unescape(t)
            elif t.startswith("\\u"):
                t = chr(int(t[2:], 16))
            else:
                t = _JSON_ESCAPES.get(t[1], t[1])
        for ch in t:
            if ch.isspace() or ch == "\x00" or (unescape and _INVISIBLE.match(ch)):
                continue
            out.append(ch)
            where.append(tok.span())
    return "".join(out), where


def _loose_find(block: str, x: ModelExchange) -> tuple[str, str] | None:
    """Where a block that is not in the request verbatim arrived in another form: with other
    whitespace or split across neighbouring segments (two system blocks): ``"whitespace"``;
    escaped (HTML entities, JSON quoting), with invisible characters removed or in another
    Unicode normalisation: ``"escaped"``. Returns (that kind, the text as received), or
    ``None``. Only the form is forgiven: every other character must be there, in order."""
    texts = [s.text for s in x.segments]
    # Each segment alone, then each pair of neighbours (a block split in two).
    spans = texts + [texts[i] + SEP + texts[i + 1] for i in range(len(texts) - 1)]
    for kind, unescape in (("whitespace", False), ("escaped", True)):
        want, _ = _squeeze(block, unescape=unescape)
        if not want:
            return None
        for hay in spans:
            squeezed, where = _squeeze(hay, unescape=unescape)
            i = squeezed.find(want)
            if i >= 0:
                if unescape:
                    hay = unicodedata.normalize("NFC", hay)
                got = hay[where[i][0]: where[i + len(want) - 1][1]]
                return kind, clip(got.replace(SEP, " | "))
    return None


