"""The conformance matrix (``acp-fuzz matrix``): which agent follows which rule, as one table
in Markdown and as a self-contained HTML page (pure: builds text, writes nothing).

Rows are the rules the oracles judge (the RFD's and ACP's rule ids, and acp-fuzz's own
``ACPFUZZ-*`` ones, each with its level and the words it rests on in ``docs/rules.md``).
Columns are agents at their versions. A cell is built from one campaign's JSON document
(``target --report json:PATH``, the same data ``matrix`` keeps):

* **fail**: a confirmed MUST or SHOULD finding under that rule, linked to its cassette
  (**flaky** when the confirm runs reproduced it only sometimes, **unconfirmed** when the
  run was interrupted before they ran, or when the rule's oracle failed an example of the
  search whose failure shrank to another one, so that it was never confirmed on its own:
  :meth:`~acp_fuzz.engine.campaign.search.CampaignResult.absorbed`);
* **info**: what the agent chose where the rule leaves the choice to it (a MAY, or a DEF
  that the RFD leaves to the implementation);
* **pass**: the examples gave the rule's oracles something to judge (the cell says how many
  checks) and none failed; where a clock-dependent corpus cassette of the rule replayed
  ``FIXED`` (:mod:`acp_fuzz.reporting.kept`), the cell says so;
* **error**: a corpus cassette of the rule could not be replayed (the cell says why): the
  table cannot say pass where the review says fail and the evidence did not run;
* **not applicable**: the rule does not bind this agent, with why (a systemPrompt rule for
  an agent that does not advertise ``systemPrompt``, an override rule without
  ``mode.override``, a load or resume rule without either), however many cases its oracles
  saw (a probe of an unadvertised capability is judged, and binds nothing);
* **not tested**: no example reached a case the rule speaks about, with why (the default
  instructions too small to judge, an agent that cannot be made to compact, or just not
  drawn).

Besides its campaign, a column takes the replays of the agent's **corpus**: the reviewed
cassettes kept for that agent (``cassettes/real/<profile>/``), replayed against the profile's
agent by ``acp-fuzz matrix`` (:func:`corpus_entry` is one replay as the matrix keeps it,
:func:`corpus_skip` says why a cassette recorded from another agent version does not count).
A cassette that still fails (``FAILED``, or ``FLAKY``) makes its rule **fail** (or **flaky**)
and is linked, whether the campaign drew that failure or not; one that replays ``FIXED`` or
``PASSED`` makes no failure and is listed in the column's notes. Each cell says where its
verdict came from (:attr:`Cell.source`: ``campaign``, ``corpus`` or ``campaign+corpus``).

An agent's text (its name and version from ``initialize``) is a stranger's, and so is every
value of a hand-made ``--from-json`` document: every value is clipped (to :data:`CLIP`
characters, a cell's text to twice that, with a marker saying how long it was) and escaped
for Markdown (in a code span where it names something: a rule, a profile, a command) or
HTML, and links point only at the cassette paths the campaign wrote.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote

from acp_fuzz.core.escaping import clip, html_text, md_code, md_text
from acp_fuzz.core.facts import codes_text
from acp_fuzz.core.findings import Severity, is_reported
from acp_fuzz.core.protocol import agent_info, answered
from acp_fuzz.core.workspace import kept_lines
from acp_fuzz.reporting.campaign import ReportError, codes_from_json, workspace_from_json

__all__ = [
    "CLIP",
    "ROWS",
    "Cell",
    "Column",
    "CorpusNote",
    "cassette_link",
    "cells_to_json",
    "column_facts",
    "column_from_report",
    "column_not_run",
    "corpus_entry",
    "corpus_skip",
    "matrix_html",
    "matrix_markdown",
    "matrix_preamble",
]

_T = TypeVar("_T")
Status = Literal["pass", "fail", "flaky", "unconfirmed", "error", "info", "na", "untested"]
#: Where a cell's verdict came from: the bounded campaign, the replayed corpus, or both.
Source = Literal["campaign", "corpus", "campaign+corpus"]

#: A profile, rule or note longer than this is clipped in the table (a cell's text, and a
#: label of name and version, at twice this): a column must stay a column whatever an agent
#: calls itself.
CLIP = 200
_LABEL = 2 * CLIP + 64

#: The rows, in reading order: the rule id and what it asks, in a few words.
ROWS: tuple[tuple[str, str], ...] = (
    ("SP-AGENT-APPLY-NEW-MUST", "a systemPrompt on session/new reaches the model"),
    ("SP-AGENT-APPEND-MUST", "an advertising agent accepts append"),
    ("SP-AGENT-OVERRIDE-MUST", "an agent advertising override accepts it"),
    ("SP-AGENT-APPEND-ADDITIVE-DEF", "append keeps the agent's default instructions"),
    ("SP-AGENT-OVERRIDE-REPLACES-DEF", "override replaces the default instructions"),
    ("SP-AGENT-OVERRIDE-SCOPE-DEF", "override changes no tool, mode or config option"),
    ("ACPFUZZ-APPEND-SCOPE-SHOULD", "append changes no tool, mode or config option"),
    ("SP-AGENT-APPEND-PLACEMENT-SHOULD", "the prompt goes in the system slot, not a user turn"),
    ("SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
     "a prompt that cannot be applied is an error, with no session left behind"),
    ("SP-AGENT-UNKNOWN-MODE-MUST", "an unknown or unadvertised mode is an error"),
    ("SP-AGENT-UNSUPPORTED-BLOCK-MUST", "an unsupported content block is an error"),
    ("SP-AGENT-EMPTY-MAY", "empty content: accepted or rejected"),
    ("ACPFUZZ-SCHEMA-SHAPE-SHOULD", "a systemPrompt that is not an object is rejected"),
    ("ACPFUZZ-SESSION-ISOLATION-MUST", "one session's prompt never reaches another session"),
    ("ACPFUZZ-REPLAY-NOT-USER-SHOULD", "a session's prompt is never shown as a user message"),
    ("ACPFUZZ-PROMPT-ONCE-SHOULD", "the prompt reaches the model once per request"),
    ("ACPFUZZ-VERBATIM-SHOULD", "the prompt's characters arrive as sent"),
    ("SP-AGENT-APPEND-FORMAT-DEF", "how the prompt is formatted is the agent's (info)"),
    ("ACPFUZZ-STANDARD-ONLY-SHOULD", "a legacy _meta prompt beside the standard one is unused"),
    ("SP-LIFECYCLE-CHANGE-SHOULD", "a changed prompt on load, resume or fork is applied"),
    ("SP-LIFECYCLE-DEFER-MAY", "a changed prompt may wait for the next rebuild"),
    ("SP-LIFECYCLE-OMIT-MAY", "an omitted prompt on load, resume or fork: kept or default"),
    ("ACPFUZZ-KEPT-WHOLE-SHOULD", "a stored prompt kept for an omitted one arrives whole"),
    ("ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD", "a kept prompt is not dropped between two turns"),
    ("ACPFUZZ-RESEND-ACCEPTED-SHOULD", "the session's own prompt re-sent is not refused"),
    ("ACPFUZZ-HUGE-REFUSED-DEF", "a prompt of megabytes: applied, or refused with an error (info)"),
    ("ACPFUZZ-COMPACTION-KEEPS-MUST", "after a compaction the prompt still reaches the model"),
    ("ACPFUZZ-COMPACTION-APPLIES-SHOULD", "a change deferred before a compaction is applied at it"),
    ("ACPFUZZ-CONVERSATION-KEPT-MUST",
     "after an accepted load or resume the model gets the conversation"),
    ("ACPFUZZ-REATTACH-ADVERTISED-SHOULD", "an advertised load or resume works"),
    ("ACPFUZZ-LIST-IDS-SHOULD", "after a cold load, session/list shows the session's own id"),
    ("ACPFUZZ-DELETE-LIVE-MAY", "a deleted session still serves turns, or not (info)"),
    ("ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
     "what initialize advertises holds: in every process, for every advertised method"),
    ("CANCEL-AGENT-STOPREASON-MUST", "a cancelled turn ends with stopReason cancelled"),
    ("CANCEL-AGENT-STOP-SHOULD", "a cancel or close while the model thinks stops the turn"),
    ("SES-AGENT-CLOSE-CANCELS-MUST", "a close while the model thinks still answers the turn"),
    ("CANCELREQ-AGENT-ANSWER-MUST", "a $/cancel_request of a prompt still answers it"),
    ("ACPFUZZ-SETMODE-ANYTIME-SHOULD", "a mode switch while the model thinks is taken"),
    ("ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD",
     "a request cancelled by $/cancel_request and refused leaves nothing (no session, no prompt)"),
    ("ACPFUZZ-SECOND-PROMPT-MAY", "what a second prompt during a turn meets (info)"),
    ("ACPFUZZ-FAILURE-VISIBLE-SHOULD", "a failed model call does not end the turn silently"),
    ("SES-AGENT-BASELINE-MUST", "the agent answers, and does not crash or hang"),
    ("FR-WIRE-NDJSON-MUST", "every message is well-formed JSON-RPC on one line"),
)

#: Rules about the default instructions, which the learned baseline must be large enough
#: to judge (``defaults.too-small``).
_DEFAULTS_RULES = frozenset({"SP-AGENT-APPEND-ADDITIVE-DEF", "SP-AGENT-OVERRIDE-REPLACES-DEF"})
#: Oracles that are not about a rule the agent keeps (a probe of a capability the agent
#: does not advertise, the baseline's size): never a cell of their own.
_NOT_A_CELL = frozenset({"payload.probe", "defaults.too-small"})
_FAILED = {"failed": "fail", "flaky": "flaky", "unconfirmed": "unconfirmed",
           "absorbed": "unconfirmed"}
#: The replay verdicts that make a corpus cassette a failure, and the cell status each gives.
_CORPUS_FAILED = {"FAILED": "failed", "FLAKY": "flaky"}
#: Which failing status wins when a rule has several (a reproduced failure over a flaky one).
_RANK = ("fail", "flaky", "unconfirmed")
#: Rules that bind an agent whether or not it advertises ``systemPrompt``; every other row
#: is about the client's prompt, and does not apply to an agent that does not take one.
_PROMPT_FREE = frozenset({"ACPFUZZ-CONVERSATION-KEPT-MUST", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
                          "ACPFUZZ-LIST-IDS-SHOULD", "ACPFUZZ-DELETE-LIVE-MAY",
                          "ACPFUZZ-FAILURE-VISIBLE-SHOULD", "ACPFUZZ-CAPABILITIES-HOLD-SHOULD",
                          "CANCEL-AGENT-STOPREASON-MUST", "CANCEL-AGENT-STOP-SHOULD",
                          "SES-AGENT-CLOSE-CANCELS-MUST", "CANCELREQ-AGENT-ANSWER-MUST",
                          "ACPFUZZ-SETMODE-ANYTIME-SHOULD", "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD",
                          "ACPFUZZ-SECOND-PROMPT-MAY",
                          "SES-AGENT-BASELINE-MUST", "FR-WIRE-NDJSON-MUST"})
#: Rules about a prompt on load, resume or fork (a changed, re-sent or omitted one).
_LIFECYCLE = frozenset({"SP-LIFECYCLE-CHANGE-SHOULD", "SP-LIFECYCLE-DEFER-MAY",
                        "SP-LIFECYCLE-OMIT-MAY", "ACPFUZZ-COMPACTION-APPLIES-SHOULD",
                        "ACPFUZZ-KEPT-WHOLE-SHOULD", "ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD",
                        "ACPFUZZ-RESEND-ACCEPTED-SHOULD"})


@dataclass(frozen=True)
class Cell:
    """One rule for one agent. ``text`` is plain (escaped when rendered); ``cassette`` is the
    path of the campaign's reproduction a fail cell links to, ``corpus`` the paths of the
    corpus cassettes that still fail under this rule; ``source`` says where the verdict came
    from."""

    status: Status
    text: str
    cassette: str | None = None
    source: Source = "campaign"
    corpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class CorpusNote:
    """One line on a column's corpus: what one replayed or skipped cassette (``cassette``)
    gave, or, without a cassette, the corpus as a whole. ``what`` is one word (``failed``,
    ``flaky``, ``fixed``, ``passed``, ``error``, ``skipped``, ``corpus``)."""

    what: str
    text: str
    cassette: str | None = None


@dataclass(frozen=True)
class Column:
    """One agent: its label (name and version, as it says in ``initialize``), the profile or
    command it ran as, a line on the campaign, its cells by rule, and what its corpus gave."""

    label: str
    profile: str
    note: str
    cells: Mapping[str, Cell] = field(default_factory=dict)
    corpus: tuple[CorpusNote, ...] = ()
    #: Facts, never verdicts (plain text, one line each): which workspace instruction files
    #: reached the model per prompt mode (what override keeps: SP-AGENT-OVERRIDE-CONTEXT-MAY)
    #: and the error codes of refused payloads by class (no rule fixes a code).
    facts: tuple[str, ...] = ()


#: One failure behind a fail cell: (status as the campaign says it: failed, flaky or
#: unconfirmed; severity; oracle; cassette; source).
_Hit = tuple[str, str, str, str | None, str]


def column_from_report(doc: Mapping[str, Any], *, profile: str,
                       corpus: Mapping[str, Any] | None = None) -> Column:
    """The column of one campaign, from its JSON document
    (:func:`acp_fuzz.reporting.campaign.result_to_json`), with the replays of its corpus
    (``corpus``: what ``acp-fuzz matrix --json`` keeps under an agent's ``"corpus"``; ``None``
    or missing in a document from before the corpus: the campaign alone)."""
    init = doc.get("agent")
    info = agent_info(init)
    # Each clipped on its own, so a long name cannot push the version out of the label.
    name = clip(info.get("name") or profile, CLIP)
    version = clip(info.get("version") or "?", CLIP)
    found = doc.get("capabilities")
    caps: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    examples = int(doc.get("examples_run") or 0)

    failed: dict[str, list[_Hit]] = {}
    for f in doc.get("findings") or []:
        if not is_reported(f.get("severity")) or f.get("oracle") in _NOT_A_CELL:
            continue
        failed.setdefault(str(f.get("rule")), []).append(
            (str(f.get("status")), str(f.get("severity")), str(f.get("oracle")),
             f.get("cassette"), "campaign"))
    for f in doc.get("absorbed") or []:
        # Failed an example, shrank to another failure: never confirmed, never a pass.
        if isinstance(f, Mapping) and is_reported(f.get("severity")) \
                and f.get("oracle") not in _NOT_A_CELL:
            failed.setdefault(str(f.get("rule")), []).append(
                ("absorbed", str(f.get("severity")), str(f.get("oracle")), None, "campaign"))
    seen = _corpus_hits(corpus, failed)
    infos: dict[str, list[str]] = {}
    too_small = False
    for i in doc.get("info") or []:
        if i.get("oracle") == "defaults.too-small":
            too_small = True
        if i.get("oracle") in _NOT_A_CELL:
            continue
        choice = (i.get("evidence") or {}).get("choice")
        infos.setdefault(str(i.get("rule")), []).append(
            str(i.get("oracle")) + (f" ({choice})" if choice else ""))
    checks: dict[str, int] = {}
    for j in doc.get("judged") or []:
        if j.get("oracle") in _NOT_A_CELL:
            continue
        checks[str(j.get("rule"))] = checks.get(str(j.get("rule")), 0) + int(j.get("checks", 0))

    rows = [r for r, _ in ROWS]
    extra = set(failed) | set(infos) | set(seen.errors) - set(rows)
    cov = doc.get("coverage")
    first = cov.get("first_example") if isinstance(cov, Mapping) else None
    sent = [str(k) for k in first] if isinstance(first, Mapping) else []
    cells = {rule: _cell(rule, failed, seen, infos, checks.get(rule, 0), caps, too_small,
                         examples, sent) for rule in rows + sorted(extra)}
    note = f"{examples} examples, {int(doc.get('steps_run') or 0)} steps, seed {doc.get('seed')}"
    if doc.get("out_of_time"):
        note += ", stopped at the time budget"
    if doc.get("interrupted"):
        note += ", interrupted"
    # The protocol version is part of what was tested: v2 columns say so.
    proto = " (ACP v2)" if answered(init) >= 2 else ""
    return Column(f"{name} {version}{proto}", profile, note, cells, seen.notes,
                  column_facts(doc))


def column_facts(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """The facts lines of a campaign's JSON document: per prompt mode, the workspace files
    whose canary reached the model (of the turns judged), then the refusal codes by payload
    class. A field that does not read back (an older or hand-made document) is left out:
    facts are never worth an error."""
    out: list[str] = []
    ws = _read(workspace_from_json, doc.get("workspace_files"))
    out += [f"workspace files reaching the model, {line}" for line in kept_lines(ws or {})]
    codes = _read(codes_from_json, doc.get("error_codes"))
    if codes:
        out.append("refusal codes by payload class: " + "; ".join(
            f"{cls} {codes_text(by)}" for cls, by in sorted(codes.items())))
    return tuple(clip(line, 2 * CLIP) for line in out)


def _read(reader: Callable[[Mapping[str, Any]], _T], wire: object) -> _T | None:
    """``reader(wire)``, or ``None`` when ``wire`` is not a mapping or does not read back."""
    if not isinstance(wire, Mapping):
        return None
    try:
        return reader(wire)
    except ReportError:
        return None


def _cell(rule: str, failed: Mapping[str, Sequence[_Hit]], seen: _Seen,
          infos: Mapping[str, Sequence[str]], checks: int, caps: Mapping[str, Any],
          too_small: bool, examples: int, sent: Sequence[str] = ()) -> Cell:
    """One rule's cell (``sent``: the campaign's coverage keys): a failure wins (campaign or
    corpus); then a corpus cassette that could not be replayed (the table cannot say pass
    without its evidence); then a rule that does not bind the agent; then info, pass, and
    not tested, with why."""
    if rule in failed:
        return _fail_cell(failed[rule])
    if rule in seen.errors:
        paths = tuple(dict.fromkeys(p for p, _ in seen.errors[rule]))
        return Cell("error", "corpus replay failed: "
                    + "; ".join(dict.fromkeys(why for _, why in seen.errors[rule])),
                    source="corpus", corpus=paths)
    why_na = _not_applicable(rule, caps)
    if why_na is not None:
        return Cell("na", why_na)
    if rule in infos:
        return Cell("info", "; ".join(sorted(set(infos[rule]))))
    if checks:
        text = f"{checks} check{'s' if checks != 1 else ''}"
        if rule in seen.clocked:
            text += ("; a clock-dependent corpus cassette replayed FIXED ("
                     + "; ".join(dict.fromkeys(seen.clocked[rule])) + ")")
        return Cell("pass", text)
    return Cell("untested", _why_untested(rule, caps, too_small, examples, sent))


def column_not_run(profile: str, why: str, corpus: Mapping[str, Any] | None = None) -> Column:
    """A column for an agent that could not be fuzzed at all (not installed, did not
    start): every cell is not tested, with why, but where a corpus cassette still fails
    (``corpus``, as in :func:`column_from_report`)."""
    failed: dict[str, list[_Hit]] = {}
    seen = _corpus_hits(corpus, failed)
    cells = {rule: Cell("untested", f"not run: {why}") for rule, _ in ROWS}
    cells.update({rule: Cell("error", "corpus replay failed: " + "; ".join(
        dict.fromkeys(w for _, w in errs)), source="corpus",
        corpus=tuple(dict.fromkeys(p for p, _ in errs))) for rule, errs in seen.errors.items()})
    cells.update({rule: _fail_cell(hits) for rule, hits in sorted(failed.items())})
    return Column(profile, profile, f"not run: {why}", cells, seen.notes)


def _fail_cell(hits: Sequence[_Hit]) -> Cell:
    """The cell of a rule with failures: the worst status among them, every oracle, the
    campaign's cassette and the corpus's, and where they came from."""
    statuses = {_FAILED.get(s, "fail") for s, *_ in hits}
    status = next(s for s in _RANK if s in statuses)
    oracles = sorted({o for _, _, o, _, _ in hits})
    severity = Severity.MUST if any(sev == Severity.MUST for _, sev, _, _, _ in hits) \
        else Severity.SHOULD
    cassette = next((c for _, _, _, c, src in hits if c and src == "campaign"), None)
    corpus = tuple(dict.fromkeys(c for _, _, _, c, src in hits if c and src == "corpus"))
    sources = {src for *_, src in hits}
    source = "campaign+corpus" if len(sources) > 1 else sources.pop()
    text = f"{severity}: {', '.join(oracles)}"
    if status == "unconfirmed" and any(s == "absorbed" for s, *_ in hits):
        text += (" (failed in the search; its example shrank to another failure, so it "
                 "was not confirmed on its own)")
    return Cell(status, text, cassette,  # type: ignore[arg-type]
                source, corpus)  # type: ignore[arg-type]


@dataclass
class _Seen:
    """What a column's corpus showed besides its failures: the notes under the column, the
    rules whose cassettes could not be replayed (rule -> (cassette, why)), and those whose
    clock-dependent cassettes replayed FIXED (rule -> why it depends on the clock)."""

    notes: tuple[CorpusNote, ...] = ()
    errors: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    clocked: dict[str, list[str]] = field(default_factory=dict)


def _rules_of(r: Mapping[str, Any]) -> list[str]:
    """The rules a corpus cassette is evidence for: the kept finding's (kept.toml), else
    those its header recorded failing."""
    kept = r.get("kept")
    if isinstance(kept, Mapping) and kept.get("rule"):
        return [str(kept["rule"])]
    return list(dict.fromkeys(str(f.get("rule")) for f in r.get("recorded") or []
                              if is_reported(f.get("severity"))
                              and f.get("oracle") not in _NOT_A_CELL))


def _corpus_hits(corpus: Mapping[str, Any] | None,
                 failed: dict[str, list[_Hit]]) -> _Seen:
    """Add the failures of the corpus replays to ``failed`` (by rule), and say what every
    cassette of the corpus gave: one note on the corpus, then one per cassette and per kept
    finding that cannot exist in this ACP version."""
    seen = _Seen()
    if corpus is None:
        return seen
    where = str(corpus.get("dir") or "?")
    if corpus.get("not_replayed"):
        seen.notes = (CorpusNote("corpus", f"not replayed: {corpus['not_replayed']}", where),)
        return seen
    replayed = list(corpus.get("replayed") or [])
    skipped = list(corpus.get("skipped") or [])
    notes: list[CorpusNote] = []
    tally = {"failed": 0, "flaky": 0, "fixed": 0, "passed": 0, "not replayed": 0}
    for r in replayed:
        what, note = _corpus_one(r, failed, seen)
        tally[what] += 1
        notes.append(note)
    for k in skipped:
        notes.append(CorpusNote("skipped", str(k.get("why")), str(k.get("cassette"))))
    for a in corpus.get("kept_absent") or []:
        notes.append(CorpusNote("kept", f"{a.get('finding')} ({a.get('oracle')}, "
                                        f"{a.get('rule')}): no cassette in this ACP version: "
                                        f"{a.get('why')}"))
    seen.notes = (CorpusNote("corpus", _corpus_head(corpus, replayed, skipped, tally), where),
                  *notes)
    return seen


def _corpus_one(r: Mapping[str, Any], failed: dict[str, list[_Hit]],
                seen: _Seen) -> tuple[str, CorpusNote]:
    """One replayed cassette: its tally key and its note; its failures go to ``failed``,
    an error or a clock-dependent FIXED to ``seen``."""
    path = str(r.get("cassette"))
    verdict = str(r.get("verdict"))
    rate = f"{int(r.get('reproduced') or 0)}/{int(r.get('runs') or 0)} runs"
    found = r.get("kept")
    kept: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    named = f"kept finding {kept.get('finding')}: " if kept else ""
    if verdict in _CORPUS_FAILED:
        status = _CORPUS_FAILED[verdict]
        # The failures the replay saw; a document that names none falls back on what
        # the cassette recorded, so a failing cassette never goes missing from the table.
        hits = [f for f in (r.get("failing") or r.get("recorded") or [])
                if is_reported(f.get("severity")) and f.get("oracle") not in _NOT_A_CELL]
        for f in hits:
            failed.setdefault(str(f.get("rule")), []).append(
                (status, str(f.get("severity")), str(f.get("oracle")), path, "corpus"))
        return status, CorpusNote(status, f"{named}{_findings_text(hits)} ({rate})", path)
    if verdict == "FIXED":
        was = [f for f in r.get("recorded") or [] if is_reported(f.get("severity"))]
        text = f"{named}no longer fails: {_findings_text(was)} ({rate})"
        if kept.get("clock"):
            text += f"; but it depends on the clock ({kept['clock']}): FIXED may be the clock"
            for rule in _rules_of(r):
                seen.clocked.setdefault(rule, []).append(str(kept["clock"]))
        return "fixed", CorpusNote("fixed", text, path)
    if verdict == "PASSED":
        return "passed", CorpusNote("passed", f"{named}recorded no failure and shows none "
                                              f"({rate})", path)
    why = str(r.get("error") or verdict)
    for rule in _rules_of(r):
        seen.errors.setdefault(rule, []).append((path, why))
    return "not replayed", CorpusNote("error", f"{named}not replayed: {why}", path)


def _corpus_head(corpus: Mapping[str, Any], replayed: Sequence[Any], skipped: Sequence[Any],
                 tally: Mapping[str, int]) -> str:
    runs = int(corpus.get("runs") or 1)
    if not replayed and not skipped:
        head = "no cassette"
    else:
        counts = ", ".join(f"{n} {what}" for what, n in tally.items() if n)
        head = (f"{len(replayed)} cassette{'s' if len(replayed) != 1 else ''} replayed "
                f"against the profile's agent ({runs} run{'s' if runs != 1 else ''} each)"
                + (f": {counts}" if counts else ""))
        if skipped:
            head += f"; {len(skipped)} skipped"
    if corpus.get("interrupted"):
        head += "; interrupted"
    return head


def _findings_text(findings: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(dict.fromkeys(
        f"{f.get('severity')} {f.get('oracle')} ({f.get('rule')})" for f in findings)) \
        or "no finding named"


def corpus_skip(recorded: Any, *, pinned: str | None = None, reported: str | None = None,
                agent: str | None = None, protocol: int | None = None) -> str | None:
    """Why a corpus cassette does not count for a column, or ``None`` when it does.

    ``recorded`` is the cassette header's ``initialize`` result (the agent's name, version
    and protocol as it answered then). The cassette counts when it was recorded from the
    column's agent version: the one its profile pins (``pinned``) or the one the agent
    reported in this campaign (``reported``; an agent may number itself apart from its
    package). With neither known, the version is not checked. ``agent`` is the name the
    agent reported and ``protocol`` the ACP version the matrix speaks (each ``None``: not
    checked). A cassette of another version may show a bug that this one fixed, or miss one
    it brought, and one of another ACP version replays in that version: neither is this
    column's evidence."""
    info = agent_info(recorded)
    name, was = info.get("name"), info.get("version")
    known = [v for v in (pinned, reported) if v]
    if known:
        whose = " and ".join(
            [*([f"the profile pins {pinned}"] if pinned else []),
             *([f"the agent reports {reported}"] if reported and reported != pinned else [])])
        if not isinstance(was, str) or not was:
            return f"records no agent version; {whose}"
        if was not in known:
            return f"recorded from version {was}; {whose}"
    if agent is not None and isinstance(name, str) and name and name != agent:
        return f"recorded from agent {name}; this one is {agent}"
    if protocol is not None and answered(recorded) != protocol:
        return f"recorded in ACP v{answered(recorded)}; this matrix speaks v{protocol}"
    return None


def corpus_entry(result: Any, recorded: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One corpus replay as the matrix keeps it in its JSON (``agents[i]["corpus"]
    ["replayed"]``), from an :class:`acp_fuzz.engine.campaign.replay.ReplayResult`: its verdict, in
    how many runs the failure showed, the failures it saw (``failing``: oracle, severity, rule;
    the reported ones among the verdict's oracles) and those the cassette recorded
    (``recorded``, the header's findings)."""
    failing: dict[tuple[str, str, str], None] = {}
    if result.verdict in _CORPUS_FAILED:
        for run in result.findings:
            for f in run:
                if f.oracle in result.oracles and is_reported(f.severity):
                    failing[(f.oracle, f.severity, f.rule)] = None
    return {"cassette": str(result.path), "verdict": result.verdict, "runs": result.runs,
            "reproduced": result.reproduced, "error": result.error,
            "failing": [{"oracle": o, "severity": s, "rule": r} for o, s, r in failing],
            "recorded": [{"oracle": str(f.get("oracle")), "severity": str(f.get("severity")),
                          "rule": str(f.get("rule"))} for f in recorded
                         if isinstance(f, Mapping) and is_reported(f.get("severity"))]}


def cells_to_json(col: Column) -> dict[str, dict[str, Any]]:
    """A column's cells as the matrix's JSON keeps them (``agents[i]["cells"]``): status,
    text, the campaign's cassette, the failing corpus cassettes and the source."""
    return {rule: {"status": c.status, "text": c.text, "cassette": c.cassette,
                   "corpus": list(c.corpus), "source": c.source}
            for rule, c in col.cells.items()}


def _not_applicable(rule: str, caps: Mapping[str, Any]) -> str | None:
    """Why ``rule`` does not bind an agent with these capabilities (``None``: it does). The
    RFD's rules bind an agent that advertises ``systemPrompt`` (its "Capability-gated
    opt-in"); override's, one that advertises ``mode.override``; a rule about a request
    binds an agent that advertises the request."""
    if rule not in _PROMPT_FREE and not caps.get("system_prompt"):
        return "no systemPrompt capability"
    if rule.startswith("SP-AGENT-OVERRIDE") and not caps.get("override"):
        return "override not advertised"
    if rule in ("ACPFUZZ-CONVERSATION-KEPT-MUST", "ACPFUZZ-REATTACH-ADVERTISED-SHOULD") \
            and not any(caps.get(k) for k in ("load", "resume", "replay")):
        return "neither session/load nor session/resume advertised"
    if rule in _LIFECYCLE and not any(caps.get(k) for k in ("load", "resume", "fork", "replay")):
        return "no load, resume or fork advertised"
    if rule == "ACPFUZZ-LIST-IDS-SHOULD" and not (
            caps.get("list") and any(caps.get(k) for k in ("load", "resume", "replay"))):
        return "session/list, or a load or resume, not advertised"
    if rule == "ACPFUZZ-DELETE-LIVE-MAY" and not caps.get("delete"):
        return "session/delete not advertised"
    if rule == "SES-AGENT-CLOSE-CANCELS-MUST" and not caps.get("close"):
        return "session/close not advertised"
    if rule == "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD" and not any(
            caps.get(k) for k in ("list", "load", "resume", "replay")):
        return "neither session/list nor a load or resume advertised"
    if rule == "ACPFUZZ-SETMODE-ANYTIME-SHOULD" and not caps.get("set_mode"):
        return "no session modes offered"
    return None


#: Rules judged only when the agent answers a request one way: where the campaign sent the
#: request (a coverage key with this prefix) and the rule was never judged, the agent
#: answered the other way, and the cell says so instead of "no case drawn".
_SENT_UNJUDGED = {
    "ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD": (
        "cancel-request:", "cancelled requests sent; each answered with a result, so nothing "
        "a refusal could have left to judge"),
}


def _why_untested(rule: str, caps: Mapping[str, Any], too_small: bool, examples: int,
                  sent: Sequence[str] = ()) -> str:
    if rule.startswith("ACPFUZZ-COMPACTION") and not any(
            caps.get(k) for k in ("compact_command", "compact_usage", "compact_overflow")):
        return "cannot be made to compact: no compact command, no [compaction] in its profile"
    if rule in _DEFAULTS_RULES and too_small:
        return "default instructions too small to judge"
    prefix, why = _SENT_UNJUDGED.get(rule, (None, ""))
    if prefix is not None and any(k.startswith(prefix) for k in sent):
        return why
    return f"no case drawn in {examples} examples"


def _counts(col: Column) -> str:
    n = {s: sum(1 for c in col.cells.values() if c.status == s)
         for s in ("fail", "flaky", "unconfirmed", "error", "pass", "info", "na", "untested")}
    return (f"{n['fail']} fail, {n['flaky']} flaky, "
            + (f"{n['unconfirmed']} unconfirmed, " if n["unconfirmed"] else "")
            + f"{n['pass']} pass, {n['info']} info, "
            + (f"{n['error']} error, " if n["error"] else "")
            + f"{n['na']} not applicable, {n['untested']} not tested")


def _grid(columns: Sequence[Column]) -> list[tuple[str, str, list[Cell]]]:
    """Each row's rule, summary and cells (one per column), the fixed rows first and then
    any rule a column reports that they do not name."""
    known = {r for r, _ in ROWS}
    extra = sorted({r for c in columns for r in c.cells} - known)
    missing = Cell("untested", "not judged by this version")
    return [(rule, summary, [c.cells.get(rule) or missing for c in columns])
            for rule, summary in [*ROWS, *((r, "") for r in extra)]]


def cassette_link(cassette: str, base: Path | None) -> str:
    """A cassette's path as a link target from a document in ``base`` (relative, quoted: a
    path from a hand-made ``--from-json`` document is a link target and nothing else)."""
    target = cassette if base is None else os.path.relpath(cassette, base)
    return quote(Path(target).as_posix(), safe="/._-@+")


_MD_MARK = {"pass": "pass", "fail": "**FAIL**", "flaky": "**flaky**",
            "unconfirmed": "**unconfirmed**", "error": "**ERROR**", "info": "info",
            "na": "not applicable", "untested": "not tested"}


def _headers(columns: Sequence[Column]) -> list[str]:
    """Each column's heading (plain text): the agent's name and version, and its profile
    beside it when another column has the same name and version (the reference agent under
    ``reference`` and ``reference-compacting``)."""
    labels = [clip(c.label, _LABEL) for c in columns]
    return [f"{label} ({clip(c.profile, CLIP)})" if labels.count(label) > 1 else label
            for label, c in zip(labels, columns, strict=True)]


def matrix_markdown(columns: Sequence[Column], *, title: str = "Conformance matrix",
                    preamble: Sequence[str] = (), base: Path | None = None) -> str:
    """The matrix as a Markdown document. Cassette links are relative to ``base`` (the
    folder the document is written to), so they work in a repository browser. With no
    column, the title and ``preamble`` only (a matrix of clients)."""
    lines = [f"# {md_text(title)}", ""]
    lines += [*preamble, ""] if preamble else []
    if not columns:
        return "\n".join(lines)
    lines += ["| Rule | What it asks | " + " | ".join(md_text(h, table=True)
                                                  for h in _headers(columns)) + " |",
              "|---|---|" + "---|" * len(columns)]
    for rule, summary, row in _grid(columns):
        cells = []
        for cell in row:
            text = (f"{_MD_MARK[cell.status]}: "
                    f"{md_text(clip(cell.text, 2 * CLIP), table=True)}")
            links = [f"[{label}]({cassette_link(c, base)})" for label, c in _links(cell)]
            if links:
                text += f" ({', '.join(links)})"
            if cell.source != "campaign":
                text += f" ({cell.source})"
            cells.append(text)
        lines.append(f"| {md_code(clip(rule, CLIP), table=True)} | "
                     f"{md_text(clip(summary, CLIP), table=True)} | " + " | ".join(cells) + " |")
    lines += ["", "Per agent:", ""]
    for col in columns:
        lines.append(f"- {md_text(clip(col.label, _LABEL))} "
                     f"({md_code(clip(col.profile, CLIP))}): "
                     f"{md_text(clip(col.note, CLIP))}; {_counts(col)}.")
        for n in col.corpus:
            where = f" {md_code(clip(n.cassette, CLIP))}" if n.cassette else ""
            lines.append(f"  - {md_text(n.what)}{where}: {md_text(clip(n.text, 2 * CLIP))}.")
        lines += [f"  - fact: {md_text(f)}." for f in col.facts]
    return "\n".join(lines) + "\n"


def _links(cell: Cell) -> list[tuple[str, str]]:
    """What a cell links to: the campaign's cassette, then each failing corpus cassette."""
    return ([("cassette", cell.cassette)] if cell.cassette else []) + \
        [("corpus cassette", c) for c in cell.corpus]


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.rule{font-family:monospace;white-space:nowrap}
td.pass{background:#e6f4ea}td.fail{background:#fce8e6;font-weight:bold}
td.flaky,td.unconfirmed{background:#fef7e0}td.info{background:#e8f0fe}
td.untested,td.na{color:#777}td.error{background:#fce8e6}
"""


def matrix_html(columns: Sequence[Column], *, title: str = "Conformance matrix",
                preamble: Sequence[str] = (), base: Path | None = None,
                after: str = "") -> str:
    """The matrix as one self-contained HTML page (inline style, no script, nothing
    fetched). Every text is HTML-escaped; ``preamble`` is plain text, one paragraph each;
    ``after`` is HTML put after the agents (the client table, already escaped:
    :func:`acp_fuzz.reporting.client_matrix.client_matrix_html`). With no agent column, the
    page has no agent table."""
    def esc(v: object, limit: int | None = CLIP) -> str:
        return html_text(v, limit=limit)

    head = "".join(f"<th>{esc(c.label, _LABEL)}<br><small>{esc(c.profile)}</small></th>"
                   for c in columns)
    rows = []
    for rule, summary, row in _grid(columns):
        tds = []
        for cell in row:
            body = f"{esc(_MD_MARK[cell.status].strip('*'))}: {esc(cell.text, 2 * CLIP)}"
            links = [f'<a href="{esc(cassette_link(c, base), None)}">{label}</a>'
                     for label, c in _links(cell)]
            if links:
                body += f" ({', '.join(links)})"
            if cell.source != "campaign":
                body += f" <small>({esc(cell.source)})</small>"
            tds.append(f'<td class="{cell.status}">{body}</td>')
        rows.append(f'<tr><td class="rule">{esc(rule)}</td><td>{esc(summary)}</td>'
                    + "".join(tds) + "</tr>")
    def corpus(col: Column) -> str:
        items = "".join(
            f"<li>{esc(n.what)}"
            + (f" <code>{esc(n.cassette)}</code>" if n.cassette else "")
            + f": {esc(n.text, 2 * CLIP)}.</li>" for n in col.corpus)
        items += "".join(f"<li>fact: {esc(f, 2 * CLIP)}.</li>" for f in col.facts)
        return f"<ul>{items}</ul>" if items else ""

    notes = "".join(f"<li>{esc(c.label, _LABEL)} ({esc(c.profile)}): {esc(c.note)}; "
                    f"{esc(_counts(c), None)}.{corpus(c)}</li>" for c in columns)
    pre = "".join(f"<p>{esc(p, None)}</p>" for p in preamble)
    agents = (f"<table><thead><tr><th>Rule</th><th>What it asks</th>{head}</tr></thead>"
              f"<tbody>{''.join(rows)}</tbody></table><p>Per agent:</p><ul>{notes}</ul>"
              if columns else "")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title, None)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{esc(title, None)}</h1>{pre}{agents}{after}</body></html>\n")


def matrix_preamble(command: str, *, version: str, interrupted: bool = False,
                    corpus_root: str | None = None, plain: bool = False) -> list[str]:
    """The paragraphs above the table, in Markdown (``plain``: as plain text, for the HTML
    page): the command that made it (``command``, shell-quoted), what a cell says, and, when
    the matrix replayed each agent's corpus (``corpus_root``: the folder that holds one
    corpus folder per agent), what the corpus is and how it counts."""
    def code(text: str) -> str:
        return text if plain else md_code(text)

    def bold(text: str) -> str:
        return text if plain else f"**{text}**"

    made = (f"with acp-fuzz {version}"
            + (" (interrupted: agents not run are missing)" if interrupted else "") + ".")
    out = [f"Made by {code(clip(command, 2 * CLIP))} {made}",
           f"Each cell: {bold('FAIL')} (a confirmed finding; the cassette reproduces it with "
           f"{code('acp-fuzz replay')}), flaky, unconfirmed (seen failing, not confirmed: the "
           "run was interrupted first, or the failing example shrank to another failure), "
           "info (a choice the RFD leaves to the agent), pass "
           "(the rule's oracles judged that many cases and none failed), not applicable "
           "(the rule does not bind this agent: a capability it does not advertise), or not "
           "tested (why). Rule ids, their levels and the words they rest on are in "
           "docs/rules.md (ACPFUZZ-* rules are acp-fuzz's own)."]
    if corpus_root is not None:
        folder = code(clip(corpus_root.rstrip("/") + "/<profile>/", CLIP))
        out.append(
            "Besides its campaign, each agent's reviewed corpus is replayed against it: the "
            f"cassettes under {folder} recorded from the same agent version, in the ACP "
            f"version of the table ({code('--corpus DIR')} names another root, "
            f"{code('--no-corpus')} skips it). A corpus cassette that still fails makes its "
            f"rule {bold('FAIL')} (flaky when it failed in some replays only) and is linked, "
            "whether the campaign drew that failure or not; one that no longer fails is "
            "listed as fixed under its agent, and so is one skipped, with why. A cell marked "
            "(corpus) has its verdict from the corpus, (campaign+corpus) from both; an "
            f"unmarked cell, from the campaign. {bold('ERROR')}: a corpus cassette of the "
            "rule could not be replayed. The findings docs/findings.md keeps are "
            f"listed in {code('kept.toml')} there, each with its cassette per ACP version "
            "or why none can exist: the table is refused for a version a kept finding says "
            "nothing about.")
    out.append("Under each agent, facts (never verdicts): which workspace instruction files "
               "(AGENTS.md, CLAUDE.md, GEMINI.md, QWEN.md, each with a canary, written into "
               "every session's folder) reached the model with no prompt, under append and "
               "under override (the RFD lets override keep them, SP-AGENT-OVERRIDE-CONTEXT-MAY, "
               "and asks agents to document what they keep), and the error code of each "
               "refused payload class.")
    out.append("A bounded campaign is a sample: pass means no failure among the cases judged "
               "at this seed and budget, not proof of conformance. Longer campaigns find "
               "more (docs/findings.md).")
    return out
