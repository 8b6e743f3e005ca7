"""The client table of ``docs/matrix.md``: which client follows which client rule (pure).

Rows are the client oracles (:data:`acp_fuzz.core.client_oracles.CLIENT_CATALOG`, with
``client.capability-unadvertised`` split by its two rules), columns are clients, and each
column is read from the JSON reports of one or more ``acp-fuzz client`` runs of that client
(``--report json:PATH``; docs/clients.md, "Reading the result"). A cell is the worst finding of
its oracle and rule in any of the column's runs (**FAIL** MUST or SHOULD, or info: a report's
``findings`` and ``info``), else
``pass: N checks`` when the oracle judged N cases and none failed, else ``not judged`` (no
case: a client that never sends the standard field is not judged on its shape).

``scripts/client-matrix`` runs the campaigns and writes :func:`client_matrix_markdown` into
``docs/matrix.md`` between :data:`BEGIN` and :data:`END`, leaving the agent table alone
(:func:`replace_section`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_fuzz.core.client_oracles import CLIENT_CATALOG
from acp_fuzz.core.escaping import clip, html_text, md_code, md_text
from acp_fuzz.core.findings import is_reported
from acp_fuzz.reporting.matrix import cassette_link

__all__ = ["BEGIN", "END", "ClientCell", "ClientColumn", "client_matrix_html",
           "client_matrix_markdown", "client_rows", "column_from_reports", "column_not_run",
           "replace_section"]

BEGIN = "<!-- client-matrix: begin (scripts/client-matrix writes this section) -->"
END = "<!-- client-matrix: end -->"
_RANK = {"MUST": 3, "SHOULD": 2, "info": 1}
CLIP = 200


def client_rows() -> list[tuple[str, str, str]]:
    """``(oracle, severity, rule)`` per row, in catalog order; the capability oracle's prompt
    block rule gets a row of its own beside its method rule."""
    rows = []
    for o in CLIENT_CATALOG.values():
        rows.append((o.id, o.severity, o.rule))
        if o.id == "client.capability-unadvertised":
            rows.append((o.id, o.severity, "PROMPT-CLIENT-CAP-MUSTNOT"))
    return rows


@dataclass(frozen=True)
class ClientCell:
    """One cell: ``status`` (``fail``, ``info``, ``pass``, ``not judged``, ``not run``), its
    text (a severity, a count of checks) and the links of the cassettes that show it."""

    status: str
    text: str = ""
    links: tuple[str, ...] = ()

    def markdown(self) -> str:
        mark = {"fail": "**FAIL**: ", "pass": "pass: "}.get(self.status, self.status)
        links = ", ".join(f"[cassette]({link})" for link in self.links)
        return mark + md_text(self.text, table=True) + (f" ({links})" if links else "")

    def html(self) -> str:
        mark = {"fail": "FAIL: ", "pass": "pass: "}.get(self.status, self.status)
        links = ", ".join(f'<a href="{html_text(link)}">cassette</a>' for link in self.links)
        return html_text(mark + self.text) + (f" ({links})" if links else "")


@dataclass
class ClientColumn:
    """One client's cells: ``(oracle, rule)`` -> :class:`ClientCell`; ``note`` says why it
    was not run, when it was not."""

    title: str
    cells: dict[tuple[str, str], ClientCell] = field(default_factory=dict)
    runs: int = 0
    note: str = ""


def column_from_reports(title: str, reports: Sequence[Mapping[str, Any]], *,
                        corpus: Sequence[tuple[str, Sequence[str]]] = (),
                        base: Path | None = None) -> ClientColumn:
    """A column from ``acp-fuzz client`` JSON reports. A FAIL cell links the cassette of each
    finding of its oracle (relative to ``base``, the folder of the document), and each kept
    cassette of this client that recorded its oracle (``corpus``: ``(link, oracles)`` per
    cassette)."""
    worst: dict[tuple[str, str], str] = {}
    checks: dict[tuple[str, str], int] = {}
    found: dict[tuple[str, str], list[str]] = {}
    for doc in reports:
        for f in [*doc.get("findings", []), *doc.get("info", [])]:
            key = (str(f.get("oracle")), str(f.get("rule")))
            sev = str(f.get("severity"))
            if _RANK.get(sev, 0) > _RANK.get(worst.get(key, ""), 0):
                worst[key] = sev
            if is_reported(sev) and isinstance(f.get("cassette"), str):
                found.setdefault(key, []).append(cassette_link(f["cassette"], base))
        for j in doc.get("judged", []):
            key = (str(j.get("oracle")), str(j.get("rule")))
            checks[key] = checks.get(key, 0) + int(j.get("checks", 0))
    col = ClientColumn(title, runs=len(reports))
    for oracle, _sev, rule in client_rows():
        key = (oracle, rule)
        if key in worst:
            sev = worst[key]
            links = (*found.get(key, ()),
                     *(link for link, oracles in corpus if oracle in oracles))
            col.cells[key] = (ClientCell("fail", sev, links) if is_reported(sev)
                              else ClientCell("info"))
        elif checks.get(key):
            n = checks[key]
            col.cells[key] = ClientCell("pass", f"{n} check{'s' * (n != 1)}")
        else:
            col.cells[key] = ClientCell("not judged")
    return col


def column_not_run(title: str, why: str) -> ClientColumn:
    """The column of a client that could not be run (its command not found, say)."""
    return ClientColumn(title, {(o, r): ClientCell("not run") for o, _s, r in client_rows()},
                        note=why)


def client_matrix_markdown(columns: Sequence[ClientColumn], *, preamble: str = "") -> str:
    """The client section: a heading, ``preamble`` and the table, between the markers. A
    title (a user's, from ``acp-fuzz matrix --client``) is escaped like any text."""
    head = ("| Oracle | Severity | Rule | "
            + " | ".join(md_text(clip(c.title, CLIP), table=True) for c in columns) + " |")
    lines = [BEGIN, "## Clients (`acp-fuzz client`)", ""]
    if preamble:
        lines += [preamble.rstrip(), ""]
    lines += [head, "|" + "---|" * (3 + len(columns))]
    for oracle, sev, rule in client_rows():
        cells = [c.cells.get((oracle, rule), ClientCell("not judged")).markdown()
                 for c in columns]
        lines.append(f"| {md_code(oracle, table=True)} | {sev} | {md_code(rule, table=True)} | "
                     + " | ".join(cells) + " |")
    notes = [f"- {md_text(clip(c.title, CLIP))}: not run: {md_text(clip(c.note, CLIP))}."
             for c in columns if c.note]
    lines += ["", *notes] if notes else []
    lines.append(END)
    return "\n".join(lines) + "\n"


def client_matrix_html(columns: Sequence[ClientColumn]) -> str:
    """The client section of the HTML page: a heading and the table, every text escaped."""
    head = "".join(f"<th>{html_text(c.title, limit=CLIP)}</th>" for c in columns)
    rows = []
    for oracle, sev, rule in client_rows():
        tds = "".join(
            f'<td class="{_HTML_CLASS.get(cell.status, "untested")}">{cell.html()}</td>'
            for cell in (c.cells.get((oracle, rule), ClientCell("not judged"))
                         for c in columns))
        rows.append(f'<tr><td class="rule">{html_text(oracle)}</td><td>{html_text(sev)}</td>'
                    f'<td class="rule">{html_text(rule)}</td>{tds}</tr>')
    notes = "".join(f"<li>{html_text(c.title, limit=CLIP)}: not run: "
                    f"{html_text(c.note, limit=CLIP)}.</li>" for c in columns if c.note)
    return ("<h2>Clients (acp-fuzz client)</h2><table><thead><tr><th>Oracle</th>"
            f"<th>Severity</th><th>Rule</th>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>" + (f"<ul>{notes}</ul>" if notes else ""))


# The agent table's cell classes (reporting/matrix.py's style), by a client cell's status.
_HTML_CLASS = {"fail": "fail", "info": "info", "pass": "pass"}


def replace_section(text: str, section: str) -> str:
    """``text`` with its client section (between :data:`BEGIN` and :data:`END`) replaced by
    ``section``, or ``section`` appended after a blank line when it has none."""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start >= 0 and end >= 0:
        return text[:start] + section + text[end + len(END):].lstrip("\n")
    return text.rstrip("\n") + "\n\n" + section

