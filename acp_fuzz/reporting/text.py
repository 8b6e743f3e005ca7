"""A campaign's result as plain text lines: what ``acp-fuzz target`` prints and what the
pytest plugin shows for a failing campaign (pure: builds lines, prints nothing).

Each :class:`Line` carries a style name for a terminal that has colours (``target`` renders it
with rich); the text itself is already escaped for a terminal (agent and cassette text is
shown, never interpreted), so a writer without colours prints ``line.text`` as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.facts import codes_text
from acp_fuzz.core.findings import Finding, Status, is_failure, is_reported
from acp_fuzz.core.steps import describe
from acp_fuzz.core.workspace import kept_lines
from acp_fuzz.reporting.campaign import shard_name

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.search import CampaignResult

__all__ = ["Line", "campaign_lines", "failure_lines", "finding_lines", "model_request_lines",
           "summary_line", "untied_lines"]
#: Distinct untied requests listed one by one; the JSON report has them all.
MAX_UNTIED_LISTED = 5

_LABEL: dict[str, str] = {Status.FAILED: Status.FAILED.label,
                          Status.UNCONFIRMED: "UNCONFIRMED (interrupted before the re-runs)"}
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
    :func:`acp_fuzz.engine.campaign.diagnosis.untied_warning`): its first line in yellow."""
    from acp_fuzz.engine.campaign.diagnosis import untied_warning

    counts = result.model_requests
    if not counts:
        return []  # not counted (a result made by hand)
    text = untied_warning(counts, result.examples_run)
    return [Line(t, "yellow" if i == 0 else "", lead=len("warning") if i == 0 else 0)
            for i, t in enumerate(text)]


def untied_lines(result: CampaignResult) -> list[Line]:
    """The distinct untied requests (API, path, where the first came, the first characters
    of its slots) and the cassette that holds the shortest example that sent one."""
    untied = [e for e in result.side_requests.to_wire() if e["kind"] == "untied"]
    if not untied:
        return []
    total = sum(e["count"] for e in untied)
    lines = [Line(f"untied requests (judged for leaks only): {len(untied)} distinct, "
                  f"{total} in all", "yellow")]
    for e in untied[:MAX_UNTIED_LISTED]:
        after = e["after"]
        where = (f"after step {after.get('step')} ({after.get('op')} {after.get('session')})"
                 if after else "before the first step")
        example = f"example {e['first_example']}" if e["first_example"] else "calibration"
        slots = " | ".join(f"{slot} {json.dumps(text, ensure_ascii=False)}"
                           for slot, text in e["slots"].items())
        lines.append(Line(terminal(f"  x{e['count']} {e['method']} {e['path']} ({e['api']}), "
                                   f"first {where} of {example}: {_clip(slots, 240)}")))
    if len(untied) > MAX_UNTIED_LISTED:
        lines.append(Line(f"  ... and {len(untied) - MAX_UNTIED_LISTED} more (the JSON "
                          "report lists them all)"))
    if result.untied_cassette is not None:
        lines.append(Line(terminal(
            f"  kept: {result.untied_cassette} (`acp-fuzz show --full` it; `acp-fuzz "
            "doctor` writes a [[side]] rule for such a request; docs/profiles.md)")))
    return lines


def error_code_lines(codes: Mapping[str, Mapping[int, int]]) -> list[Line]:
    """The error codes of the refused requests, by payload class, one info line each
    (facts, never verdicts: no rule fixes a code)."""
    return [Line(terminal(f"  info  error codes [{cls}]: {codes_text(by)}"))
            for cls, by in sorted(codes.items())]


def campaign_lines(result: CampaignResult, again: Callable[[Path], str] = str) -> list[Line]:
    """The findings part of a campaign's report: each info observation on one line, then
    each distinct failure with its findings, its minimal steps, the requests they sent, its
    cassette and the command that replays it (``again(cassette)``: the agent named the way
    the user named it). A warning comes first when more than 10 % of the model requests
    were untied (judged by no oracle), or none reached the fake model."""
    lines = model_request_lines(result) + untied_lines(result)
    lines += [Line(terminal(f"  info  {f.oracle} [{f.rule}]: {f.message}"))
              for f in result.info]
    lines += error_code_lines(result.error_codes)
    lines += [Line(terminal(f"  info  workspace files reaching the model, {line}"))
              for line in kept_lines(result.workspace)]
    lines += absorbed_lines(result)
    if not result.reports:
        return [*lines, Line("no failing findings", "green")]
    strict = result.settings.strict
    for rep in result.reports:
        details = [Line(shrink_line(rep.shrink))] if rep.shrink else []
        details.append(Line("steps (the JSON-RPC requests sent, in order):", "bold", lead=5))
        details += [Line(terminal(f"  {i}. {describe(s)}")) for i, s in enumerate(rep.steps, 1)]
        details += [Line(terminal(f"     [{i}] {_clip(json.dumps(r, ensure_ascii=False), 300)}"))
                    for i, r in enumerate(rep.requests, 1)]
        lines += failure_lines(
            rep.status, rep.rate, f"minimal reproduction in {len(rep.steps)} step(s)",
            rep.findings, details, rep.cassette,
            f"acp-fuzz replay {again(rep.cassette)}" if rep.cassette else "",
            failing=any(is_failure(f, strict=strict) for f in rep.findings))
    return lines


def failure_lines(status: str, rate: str, what: str, findings: Sequence[Finding],
                  details: Sequence[Line], cassette: Path | None, replay: str, *,
                  failing: bool) -> list[Line]:
    """One failure as ``target`` and ``client`` both print it: its head (status, ``what``
    was found, how often it reproduced; red when it fails the run, yellow for a SHOULD
    finding without ``--strict``), each finding (:func:`finding_lines`), what the side shows
    of its reproduction (``details``: an agent's steps, a client's capability set), its
    cassette and the command line that replays it."""
    label = _LABEL.get(status, f"FLAKY ({rate} re-runs)")
    lines = [Line(""), Line(terminal(f"{label}: {what}, reproduced {rate}"),
                            "bold red" if failing else "bold yellow", lead=len(label))]
    for f in findings:
        lines += finding_lines(f)
    lines += details
    if cassette is None:
        lines.append(Line("cassette: not written (see the warning above); the finding is "
                          "reported here and in --report files"))
    else:
        lines.append(Line(terminal(f"cassette: {cassette}")))
        lines.append(Line(terminal(f"replay:   {replay}")))
    return lines


def shrink_line(shrink: Mapping[str, Any]) -> str:
    """``shrink passes: from 9 to 3 steps in 22 trials (delete-step 4 of 12, ...)``: what the
    campaign's own shrink passes did after Hypothesis' (each pass that ran: the trials that
    still failed, and so were kept, of those it ran)."""
    passes = ", ".join(f"{name} {ok} of {n}"
                       for name, (n, ok) in (shrink.get("passes") or {}).items())
    return (f"shrink passes: from {shrink.get('from')} to {shrink.get('to')} steps in "
            f"{_count(int(shrink.get('trials') or 0), 'trial')}"
            + (f" ({passes})" if passes else ""))


def absorbed_lines(result: CampaignResult) -> list[Line]:
    """One line per oracle that failed an example but that no report names (its example
    shrank to another failure): never reported as a pass, with the command that searches
    for it alone."""
    lines = []
    for f in result.absorbed():
        steps = f.evidence.get("example_steps", [])
        lines.append(Line(terminal(
            f"  UNCONFIRMED  {f.oracle} ({f.severity}, {f.rule}) failed in the search, but "
            "its example shrank to another failure: not confirmed on its own; search for it "
            f"alone with --oracle {f.oracle}. {f.message}"), "yellow", lead=13))
        if steps:
            lines.append(Line(f"    in an example of {len(steps)} step(s):"))
            lines += [Line(terminal(f"      {i}. {describe(s)}"))
                      for i, s in enumerate(steps, 1)]
    return lines


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary_line(result: CampaignResult, elapsed: float) -> Line:
    """The closing line of every campaign: ``N examples (D drawn, S shrinking, X discarded
    draws), T shrink trials, C confirm runs, M steps, K findings (a MUST, b SHOULD), T s (seed
    S)``, red when the run fails, yellow when it only has SHOULD findings (or was
    interrupted), green otherwise. The examples are counted apart: the drawn ones are what
    ``--max-examples`` counts; Hypothesis' shrinking runs and the draws it discarded ran the
    agent too; the campaign's own shrink trials and the confirmation runs come beside them
    (each on a fresh agent), shown when there were any. ``K`` counts the reported findings
    of all the distinct failures."""
    severities = [f.severity for r in result.reports for f in r.findings
                  if is_reported(f.severity)]
    must, should = severities.count("MUST"), severities.count("SHOULD")
    examples = (f"{_count(result.examples_run, 'example')} ({result.drawn} drawn, "
                f"{result.shrink_runs} shrinking, "
                f"{_count(result.discarded, 'discarded draw')})")
    beside = "".join(f", {_count(n, word)}" for n, word in (
        (result.shrink_trials, "shrink trial"), (result.confirm_runs, "confirm run")) if n)
    text = (f"{examples}{beside}, {_count(result.steps_run, 'step')}, "
            f"{_count(len(severities), 'finding')} ({must} MUST, {should} SHOULD), "
            f"{elapsed:.1f} s (seed {result.settings.seed}"
            + (f", shard {shard}" if (shard := shard_name(result.settings.shard)) else "") + ")"
            + (", interrupted" if result.interrupted else "")
            + (f", stopped at --time-budget {result.settings.time_budget:g} s"
               if result.out_of_time else ""))
    style = "bold red" if result.failing() else \
        "bold yellow" if severities or result.interrupted else "bold green"
    return Line(text, style)
