"""The conformance matrix (``acp-fuzz matrix``): which agent follows which rule, as one table
in Markdown and as a self-contained HTML page (pure: builds text, writes nothing).

Rows are the rules the oracles judge (the RFD's and ACP's rule ids from
``docs/acp-reference.md``, and acp-fuzz's own ``ACPFUZZ-*`` ones, argued in
``docs/oracles.md``). Columns are agents at their versions. A cell is built from one
campaign's JSON document (``target --report json:PATH``, the same data ``matrix`` keeps):

* **fail**: a confirmed MUST or SHOULD finding under that rule, linked to its cassette
  (**flaky** when the confirm runs reproduced it only sometimes, **unconfirmed** when the
  run was interrupted before they ran);
* **info**: what the agent chose where the rule leaves the choice to it (a MAY, or a DEF
  that the RFD leaves to the implementation);
* **pass**: the examples gave the rule's oracles something to judge (the cell says how many
  checks) and none failed;
* **not tested**: no example reached a case the rule speaks about, with why (a capability
  not advertised, the default instructions too small to judge, or just not drawn).

An agent's text (its name and version from ``initialize``) is a stranger's, and so is every
value of a hand-made ``--from-json`` document: every value is clipped (to :data:`CLIP`
characters, a cell's text to twice that, with a marker saying how long it was) and escaped
for Markdown (in a code span where it names something: a rule, a profile, a command) or
HTML, and links point only at the cassette paths the campaign wrote.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from acp_fuzz.core.escaping import clip, md_code, md_text, terminal
from acp_fuzz.core.protocol import agent_info, answered

__all__ = ["CLIP", "ROWS", "Cell", "Column", "column_from_report", "column_not_run", "matrix_html",
           "matrix_markdown"]

Status = Literal["pass", "fail", "flaky", "unconfirmed", "info", "untested"]

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
    ("SP-AGENT-APPEND-PLACEMENT-SHOULD", "the prompt goes in the system slot, not a user turn"),
    ("SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
     "a prompt that cannot be applied is an error, with no session left behind"),
    ("SP-AGENT-UNKNOWN-MODE-MUST", "an unknown or unadvertised mode is an error"),
    ("SP-AGENT-UNSUPPORTED-BLOCK-MUST", "an unsupported content block is an error"),
    ("SP-AGENT-EMPTY-MAY", "empty content: accepted or rejected"),
    ("ACPFUZZ-SCHEMA-SHAPE-SHOULD", "a systemPrompt that is not an object is rejected"),
    ("ACPFUZZ-SESSION-ISOLATION-MUST", "one session's prompt never reaches another session"),
    ("ACPFUZZ-PROMPT-ONCE-SHOULD", "the prompt reaches the model once per request"),
    ("ACPFUZZ-VERBATIM-SHOULD", "the prompt's characters arrive as sent"),
    ("SP-LIFECYCLE-CHANGE-SHOULD", "a changed prompt on load, resume or fork is applied"),
    ("SP-LIFECYCLE-DEFER-MAY", "a changed prompt may wait for the next rebuild"),
    ("SP-LIFECYCLE-OMIT-MAY", "an omitted prompt on load, resume or fork: kept or default"),
    ("SES-AGENT-LOAD-REPLAY-MUST", "after session/load the model gets the conversation"),
    ("SES-AGENT-RESUME-NOREPLAY-MUST", "after session/resume the model gets the conversation"),
    ("ACPFUZZ-REATTACH-ADVERTISED-SHOULD", "an advertised load or resume works"),
    ("CANCEL-AGENT-STOPREASON-MUST", "a cancelled turn ends with stopReason cancelled"),
    ("SES-AGENT-BASELINE-MUST", "the agent answers, and does not crash or hang"),
    ("FR-WIRE-NDJSON-MUST", "every message is well-formed JSON-RPC on one line"),
)

#: Rules about the default instructions, which the learned baseline must be large enough
#: to judge (``defaults.too-small``).
_DEFAULTS_RULES = frozenset({"SP-AGENT-APPEND-ADDITIVE-DEF", "SP-AGENT-OVERRIDE-REPLACES-DEF"})
#: Oracles that are not about a rule the agent keeps (a probe of a capability the agent
#: does not advertise, the baseline's size): never a cell of their own.
_NOT_A_CELL = frozenset({"payload.probe", "defaults.too-small"})
_FAILED = {"failed": "fail", "flaky": "flaky", "unconfirmed": "unconfirmed"}


@dataclass(frozen=True)
class Cell:
    """One rule for one agent. ``text`` is plain (escaped when rendered); ``cassette`` is the
    path of the reproduction a fail cell links to."""

    status: Status
    text: str
    cassette: str | None = None


@dataclass(frozen=True)
class Column:
    """One agent: its label (name and version, as it says in ``initialize``), the profile or
    command it ran as, a line on the campaign, and its cells by rule."""

    label: str
    profile: str
    note: str
    cells: Mapping[str, Cell] = field(default_factory=dict)


def column_from_report(doc: Mapping[str, Any], *, profile: str) -> Column:
    """The column of one campaign, from its JSON document
    (:func:`acp_fuzz.reporting.campaign.result_to_json`)."""
    init = doc.get("agent")
    info = agent_info(init)
    # Each clipped on its own, so a long name cannot push the version out of the label.
    name = clip(info.get("name") or profile, CLIP)
    version = clip(info.get("version") or "?", CLIP)
    found = doc.get("capabilities")
    caps: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    examples = int(doc.get("examples_run") or 0)

    failed: dict[str, list[tuple[str, str, str, str | None]]] = {}
    for f in doc.get("findings") or []:
        if f.get("severity") not in ("MUST", "SHOULD") or f.get("oracle") in _NOT_A_CELL:
            continue
        failed.setdefault(str(f.get("rule")), []).append(
            (str(f.get("status")), str(f.get("severity")), str(f.get("oracle")),
             f.get("cassette")))
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

    cells: dict[str, Cell] = {}
    for rule in [r for r, _ in ROWS] + sorted(set(failed) | set(infos) - {r for r, _ in ROWS}):
        if rule in failed:
            hits = failed[rule]
            status = "fail" if any(s == "failed" for s, *_ in hits) else \
                _FAILED.get(hits[0][0], "fail")
            oracles = sorted({o for _, _, o, _ in hits})
            severity = "MUST" if any(sev == "MUST" for _, sev, _, _ in hits) else "SHOULD"
            cassette = next((c for *_, c in hits if c), None)
            cells[rule] = Cell(status, f"{severity}: {', '.join(oracles)}",  # type: ignore[arg-type]
                               cassette)
        elif rule in infos:
            cells[rule] = Cell("info", "; ".join(sorted(set(infos[rule]))))
        elif checks.get(rule):
            n = checks[rule]
            cells[rule] = Cell("pass", f"{n} check{'s' if n != 1 else ''}")
        else:
            cells[rule] = Cell("untested", _why_untested(rule, caps, too_small, examples))
    note = f"{examples} examples, {int(doc.get('steps_run') or 0)} steps, seed {doc.get('seed')}"
    if doc.get("out_of_time"):
        note += ", stopped at the time budget"
    if doc.get("interrupted"):
        note += ", interrupted"
    # The protocol version is part of what was tested: v2 columns say so.
    proto = " (ACP v2)" if answered(init) >= 2 else ""
    return Column(f"{name} {version}{proto}", profile, note, cells)


def column_not_run(profile: str, why: str) -> Column:
    """A column for an agent that could not be fuzzed at all (not installed, did not
    start): every cell is not tested, with why."""
    return Column(profile, profile, f"not run: {why}",
                  {rule: Cell("untested", f"not run: {why}") for rule, _ in ROWS})


def _why_untested(rule: str, caps: Mapping[str, Any], too_small: bool, examples: int) -> str:
    if rule.startswith(("SP-", "ACPFUZZ-SCHEMA", "ACPFUZZ-PROMPT", "ACPFUZZ-VERBATIM",
                        "ACPFUZZ-SESSION")) and not caps.get("system_prompt"):
        return "no systemPrompt capability"
    if rule.startswith("SP-AGENT-OVERRIDE") and not caps.get("override"):
        return "override not advertised"
    if rule in _DEFAULTS_RULES and too_small:
        return "default instructions too small to judge"
    if rule == "SES-AGENT-LOAD-REPLAY-MUST" and not (caps.get("load") or caps.get("replay")):
        return "session/load not advertised"
    if rule == "SES-AGENT-RESUME-NOREPLAY-MUST" and not caps.get("resume"):
        return "session/resume not advertised"
    if rule == "ACPFUZZ-REATTACH-ADVERTISED-SHOULD" and not (caps.get("load")
                                                             or caps.get("resume")
                                                             or caps.get("replay")):
        return "neither session/load nor session/resume advertised"
    if rule.startswith("SP-LIFECYCLE") and not any(caps.get(k) for k in
                                                   ("load", "resume", "fork")):
        return "no load, resume or fork advertised"
    return f"no case drawn in {examples} examples"


def _counts(col: Column) -> str:
    n = {s: sum(1 for c in col.cells.values() if c.status == s)
         for s in ("fail", "flaky", "pass", "info", "untested")}
    return (f"{n['fail']} fail, {n['flaky']} flaky, {n['pass']} pass, {n['info']} info, "
            f"{n['untested']} not tested")


def _grid(columns: Sequence[Column]) -> list[tuple[str, str, list[Cell]]]:
    """Each row's rule, summary and cells (one per column), the fixed rows first and then
    any rule a column reports that they do not name."""
    known = {r for r, _ in ROWS}
    extra = sorted({r for c in columns for r in c.cells} - known)
    missing = Cell("untested", "not judged by this version")
    return [(rule, summary, [c.cells.get(rule) or missing for c in columns])
            for rule, summary in [*ROWS, *((r, "") for r in extra)]]


def _link(cassette: str, base: Path | None) -> str:
    target = cassette if base is None else os.path.relpath(cassette, base)
    return quote(Path(target).as_posix(), safe="/._-@+")


_MD_MARK = {"pass": "pass", "fail": "**FAIL**", "flaky": "**flaky**",
            "unconfirmed": "**unconfirmed**", "info": "info", "untested": "not tested"}


def matrix_markdown(columns: Sequence[Column], *, title: str = "Conformance matrix",
                    preamble: Sequence[str] = (), base: Path | None = None) -> str:
    """The matrix as a Markdown document. Cassette links are relative to ``base`` (the
    folder the document is written to), so they work in a repository browser."""
    lines = [f"# {md_text(title)}", ""]
    lines += [*preamble, ""] if preamble else []
    lines += ["| Rule | What it asks | " + " | ".join(md_text(clip(c.label, _LABEL), table=True)
                                                  for c in columns) + " |",
              "|---|---|" + "---|" * len(columns)]
    for rule, summary, row in _grid(columns):
        cells = []
        for cell in row:
            text = (f"{_MD_MARK[cell.status]}: "
                    f"{md_text(clip(cell.text, 2 * CLIP), table=True)}")
            if cell.cassette:
                text += f" ([cassette]({_link(cell.cassette, base)}))"
            cells.append(text)
        lines.append(f"| {md_code(clip(rule, CLIP), table=True)} | "
                     f"{md_text(clip(summary, CLIP), table=True)} | " + " | ".join(cells) + " |")
    lines += ["", "Per agent:", ""]
    for col in columns:
        lines.append(f"- {md_text(clip(col.label, _LABEL))} "
                     f"({md_code(clip(col.profile, CLIP))}): "
                     f"{md_text(clip(col.note, CLIP))}; {_counts(col)}.")
    return "\n".join(lines) + "\n"


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.rule{font-family:monospace;white-space:nowrap}
td.pass{background:#e6f4ea}td.fail{background:#fce8e6;font-weight:bold}
td.flaky,td.unconfirmed{background:#fef7e0}td.info{background:#e8f0fe}
td.untested{color:#777}
"""


def matrix_html(columns: Sequence[Column], *, title: str = "Conformance matrix",
                preamble: Sequence[str] = (), base: Path | None = None) -> str:
    """The matrix as one self-contained HTML page (inline style, no script, nothing
    fetched). Every text is HTML-escaped; ``preamble`` is plain text, one paragraph each."""
    def esc(v: object, limit: int | None = CLIP) -> str:
        # The terminal policy too: no bidi override reorders a cell, no control character.
        return html.escape(terminal(clip(v, limit) if limit else v), quote=True)

    head = "".join(f"<th>{esc(c.label, _LABEL)}<br><small>{esc(c.profile)}</small></th>"
                   for c in columns)
    rows = []
    for rule, summary, row in _grid(columns):
        tds = []
        for cell in row:
            body = f"{esc(_MD_MARK[cell.status].strip('*'))}: {esc(cell.text, 2 * CLIP)}"
            if cell.cassette:
                body += f' (<a href="{esc(_link(cell.cassette, base), None)}">cassette</a>)'
            tds.append(f'<td class="{cell.status}">{body}</td>')
        rows.append(f'<tr><td class="rule">{esc(rule)}</td><td>{esc(summary)}</td>'
                    + "".join(tds) + "</tr>")
    notes = "".join(f"<li>{esc(c.label, _LABEL)} ({esc(c.profile)}): {esc(c.note)}; "
                    f"{esc(_counts(c), None)}.</li>" for c in columns)
    pre = "".join(f"<p>{esc(p, None)}</p>" for p in preamble)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title, None)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{esc(title, None)}</h1>{pre}<table><thead><tr><th>Rule</th>"
            f"<th>What it asks</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f"<p>Per agent:</p><ul>{notes}</ul></body></html>\n")
