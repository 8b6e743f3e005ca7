"""A campaign's result as plain text lines: what ``acp-fuzz target`` prints and what the
pytest plugin shows for a failing campaign (pure: builds lines, prints nothing).

Each :class:`Line` carries a style name for a terminal that has colours (``target`` renders it
with rich); the text itself is already escaped for a terminal (agent and cassette text is
shown, never interpreted), so a writer without colours prints ``line.text`` as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.steps import describe

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign import CampaignResult

__all__ = ["Line", "campaign_lines", "finding_lines", "model_request_lines"]

_LABEL = {"failed": "FAILED", "unconfirmed": "UNCONFIRMED (interrupted before the re-runs)"}
_COLOUR = {"MUST": "red", "SHOULD": "yellow"}


@dataclass(frozen=True)
class Line:
    """One line of text. ``style`` (a rich style, ``""`` for none) colours all of it, or,
    with ``lead``, only its first ``lead`` characters."""

    text: str
    style: str = ""
    lead: int = 0


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + "..."


def finding_lines(f: Finding) -> list[Line]:
    """A finding: its severity (coloured), oracle, rule, step and message, then its evidence,
    one key per line."""
    head = f"  {f.severity:6}"
    lines = [Line(head + terminal(f" {f.oracle} [{f.rule}] step {f.step + 1}: {f.message}"),
                  _COLOUR.get(f.severity, "cyan"), lead=len(head))]
    for k, v in f.evidence.items():
        text = _clip(json.dumps(v, ensure_ascii=False, default=repr), 200)
        lines.append(Line(terminal(f"         {k}: {text}")))
    return lines


def model_request_lines(result: CampaignResult) -> list[Line]:
    """The warning about the campaign's model requests, if any (see
    :func:`acp_fuzz.engine.diagnosis.untied_warning`): its first line in yellow."""
    from acp_fuzz.engine.diagnosis import untied_warning

    counts = result.model_requests
    if not counts:
        return []  # not counted (a result made by hand)
    text = untied_warning(counts, result.examples_run)
    return [Line(t, "yellow" if i == 0 else "", lead=len("warning") if i == 0 else 0)
            for i, t in enumerate(text)]


def campaign_lines(result: CampaignResult, again: Callable[[Path], str] = str) -> list[Line]:
    """The findings part of a campaign's report: each info observation on one line, then
    each distinct failure with its findings, its minimal steps, the requests they sent, its
    cassette and the command that replays it (``again(cassette)``: the agent named the way
    the user named it). A warning comes first when more than 10 % of the model requests
    were untied (judged by no oracle), or none reached the fake model."""
    lines = model_request_lines(result)
    lines += [Line(terminal(f"  info  {f.oracle} [{f.rule}]: {f.message}"))
              for f in result.info]
    if not result.reports:
        return [*lines, Line("no failing findings", "green")]
    for rep in result.reports:
        label = _LABEL.get(rep.status, f"FLAKY ({rep.rate} re-runs)")
        lines.append(Line(""))
        lines.append(Line(f"{label}: minimal reproduction in {len(rep.steps)} step(s), "
                          f"reproduced {rep.rate}", "bold red", lead=len(label)))
        for f in rep.findings:
            lines += finding_lines(f)
        lines.append(Line("steps (the JSON-RPC requests sent, in order):", "bold", lead=5))
        lines += [Line(terminal(f"  {i}. {describe(s)}")) for i, s in enumerate(rep.steps, 1)]
        lines += [Line(terminal(f"     [{i}] {_clip(json.dumps(r, ensure_ascii=False), 300)}"))
                  for i, r in enumerate(rep.requests, 1)]
        if rep.cassette is None:
            lines.append(Line("cassette: not written (see the warning above); the finding is "
                              "reported here and in --report files"))
            continue
        lines.append(Line(terminal(f"cassette: {rep.cassette}")))
        lines.append(Line(terminal(f"replay:   acp-fuzz replay {again(rep.cassette)}")))
    return lines
