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
from acp_fuzz.core.findings import is_reported

__all__ = ["BEGIN", "END", "ClientColumn", "client_matrix_markdown", "client_rows",
           "column_from_reports", "relative_link", "replace_section"]

BEGIN = "<!-- client-matrix: begin (scripts/client-matrix writes this section) -->"
END = "<!-- client-matrix: end -->"
_RANK = {"MUST": 3, "SHOULD": 2, "info": 1}


def client_rows() -> list[tuple[str, str, str]]:
    """``(oracle, severity, rule)`` per row, in catalog order; the capability oracle's prompt
    block rule gets a row of its own beside its method rule."""
    rows = []
    for o in CLIENT_CATALOG.values():
        rows.append((o.id, o.severity, o.rule))
        if o.id == "client.capability-unadvertised":
            rows.append((o.id, o.severity, "PROMPT-CLIENT-CAP-MUSTNOT"))
    return rows


@dataclass
class ClientColumn:
    """One client's cells: ``(oracle, rule)`` -> text."""

    title: str
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    runs: int = 0


def column_from_reports(title: str, reports: Sequence[Mapping[str, Any]], *,
                        corpus: Sequence[tuple[str, Sequence[str]]] = ()) -> ClientColumn:
    """A column from ``acp-fuzz client`` JSON reports. ``corpus`` is ``(link, oracles)`` per
    kept cassette of this client: a FAIL cell links each that recorded its oracle."""
    worst: dict[tuple[str, str], str] = {}
    checks: dict[tuple[str, str], int] = {}
    for doc in reports:
        for f in [*doc.get("findings", []), *doc.get("info", [])]:
            key = (str(f.get("oracle")), str(f.get("rule")))
            sev = str(f.get("severity"))
            if _RANK.get(sev, 0) > _RANK.get(worst.get(key, ""), 0):
                worst[key] = sev
        for j in doc.get("judged", []):
            key = (str(j.get("oracle")), str(j.get("rule")))
            checks[key] = checks.get(key, 0) + int(j.get("checks", 0))
    col = ClientColumn(title, runs=len(reports))
    for oracle, _sev, rule in client_rows():
        key = (oracle, rule)
        if key in worst:
            sev = worst[key]
            links = [f"[cassette]({link})" for link, oracles in corpus if oracle in oracles]
            text = f"**FAIL**: {sev}" if is_reported(sev) else "info"
            col.cells[key] = text + (f" ({', '.join(links)})" if links else "")
        elif checks.get(key):
            n = checks[key]
            col.cells[key] = f"pass: {n} check{'s' * (n != 1)}"
        else:
            col.cells[key] = "not judged"
    return col


def client_matrix_markdown(columns: Sequence[ClientColumn], *, preamble: str = "") -> str:
    """The client section: a heading, ``preamble`` and the table, between the markers."""
    head = "| Oracle | Severity | Rule | " + " | ".join(c.title for c in columns) + " |"
    lines = [BEGIN, "## Clients (`acp-fuzz client`)", ""]
    if preamble:
        lines += [preamble.rstrip(), ""]
    lines += [head, "|" + "---|" * (3 + len(columns))]
    for oracle, sev, rule in client_rows():
        cells = [c.cells.get((oracle, rule), "not judged") for c in columns]
        lines.append(f"| `{oracle}` | {sev} | `{rule}` | " + " | ".join(cells) + " |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str) -> str:
    """``text`` with its client section (between :data:`BEGIN` and :data:`END`) replaced by
    ``section``, or ``section`` appended after a blank line when it has none."""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start >= 0 and end >= 0:
        return text[:start] + section + text[end + len(END):].lstrip("\n")
    return text.rstrip("\n") + "\n\n" + section


def relative_link(path: Path, base: Path) -> str:
    """``path`` as a link from a document in ``base``."""
    import os

    return Path(os.path.relpath(path, base)).as_posix()
