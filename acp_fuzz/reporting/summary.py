"""A campaign as one Markdown page (pure: builds the text, writes nothing).

``acp-fuzz target --report markdown:PATH`` writes :func:`campaign_markdown`, and so does
``acp-fuzz report merge --report markdown:PATH`` for the shards it merged; ``acp-fuzz client
--report markdown:PATH`` writes :func:`client_markdown`, the same page of a client campaign: a
page for a CI job summary or a pull request comment, where the campaign's cassettes are a
download away. It holds the summary line, a table of the findings, each
distinct failure's minimal steps and cassette, the info observations, what the covering
examples left unsent, and every rule checked with its verdict. (One finding's full bug report,
with the transcript and what reached the model, is ``acp-fuzz report CASSETTE``.)

Everything the agent or a report chose (names, messages, steps, paths) goes through
:func:`~acp_fuzz.core.escaping.md_text` or :func:`~acp_fuzz.core.escaping.md_code`: nothing
in it renders as a link, an image, HTML or a table cell of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from acp_fuzz.core.escaping import clip, md_code, md_text
from acp_fuzz.core.findings import is_reported
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.core.steps import describe
from acp_fuzz.reporting.rules import rule_rows

if TYPE_CHECKING:
    from acp_fuzz.core.reports import Report
    from acp_fuzz.engine.campaign.search import CampaignResult
    from acp_fuzz.engine.client.campaign import ClientCampaignResult

__all__ = ["campaign_markdown", "client_markdown"]

#: Messages and paths are clipped to this many characters (the JSON report has them whole).
CLIP = 400


def campaign_markdown(result: CampaignResult, secrets: Sequence[str] = (),
                      elapsed: float = 0.0) -> str:
    """The Markdown page of a campaign (or of shards merged into one), every value in
    ``secrets`` redacted; ``elapsed`` is the run's time in seconds, for its summary line."""
    from acp_fuzz.reporting.text import summary_line

    scrub = Scrubber(secrets).text
    name = scrub(str(result.agent.get("name", "?")))
    version = scrub(str(result.agent.get("version", "")))
    out = [f"# acp-fuzz: {md_text(name)} {md_text(version)}".rstrip(), "",
           f"**{md_text(summary_line(result, elapsed).text)}**", "", "## Findings", ""]
    out += _findings(result, scrub)
    if result.info_reports:
        out += ["", "## Observations (info)", ""]
        out += [f"- {md_code(i.finding.oracle)} [{md_code(i.finding.rule)}]: "
                f"{md_text(clip(scrub(i.finding.message), CLIP))}" for i in result.info_reports]
    unsent = result.unsent()
    out += ["", "## Coverage", "",
            f"{result.covering_examples} covering example(s) ran; "
            + (f"{len(unsent)} key(s) no example sent: "
               + ", ".join(md_code(k) for k in unsent) if unsent
               else "every key they cover was sent.")]
    out += _rules(result)
    return "\n".join(out) + "\n"


def _table(reports: Sequence[Report], text: Callable[[str], str]) -> list[str]:
    """The findings table of either direction's failures (``text``: the scrubber)."""
    rows = ["| Severity | Oracle | Rule | Status | Finding |", "|---|---|---|---|---|"]
    for rep in reports:
        rows += [f"| {md_text(f.severity, table=True)} | {md_code(f.oracle, table=True)} | "
                 f"{md_code(f.rule, table=True)} | {md_text(rep.status, table=True)} "
                 f"({md_text(rep.rate, table=True)}) | "
                 f"{md_text(clip(text(f.message), CLIP), table=True)} |"
                 for f in rep.findings if is_reported(f.severity)]
    return rows


def _findings(result: CampaignResult, text: Callable[[str], str]) -> list[str]:
    """The findings table, then each failure's steps and cassette (``text``: the scrubber)."""
    if not result.reports:
        return ["No failing findings."]
    rows = _table(result.reports, text)
    for i, rep in enumerate(result.reports, 1):
        rows += ["", f"### {i}. {md_text(rep.status)}: {md_text(', '.join(rep.oracles))} "
                     f"(reproduced {md_text(rep.rate)}, {len(rep.steps)} step(s))", ""]
        rows += [f"{n}. {md_code(clip(text(describe(s)), CLIP))}"
                 for n, s in enumerate(rep.steps, 1)]
        where = text(str(rep.cassette)) if rep.cassette else "not written"
        rows += ["", f"Cassette: {md_code(clip(where, CLIP))}"]
    return rows


def _rules(result: CampaignResult | ClientCampaignResult) -> list[str]:
    """Every (oracle, rule) judged, with how many cases and its verdict
    (:func:`acp_fuzz.reporting.rules.rule_rows`), on either side."""
    rows = rule_rows(result)
    if not rows:
        return []
    return ["", "## Rules checked", "", "| Rule | Oracle | Cases | Verdict | What it asks |",
            "|---|---|---|---|---|"] + [
        f"| {md_code(r.rule, table=True)} | {md_code(r.oracle, table=True)} | {r.cases} | "
        f"{md_text(r.verdict, table=True)} | {md_text(r.asks, table=True)} |" for r in rows]


def client_markdown(result: ClientCampaignResult, secrets: Sequence[str] = (),
                    elapsed: float = 0.0) -> str:
    """The Markdown page of a client campaign (``client --report markdown:PATH``), laid out
    as an agent's: the summary line, the findings table, each failure's smallest capability
    set and cassette, the scenario, the info observations and every client rule checked.
    Every value in ``secrets`` is redacted."""
    from acp_fuzz.reporting.client import client_name, client_summary

    scrub = Scrubber(secrets).text
    name = client_name(result, scrub)
    out = [f"# acp-fuzz client: {md_text(clip(name, CLIP))}", "",
           f"**{md_text(client_summary(result, elapsed))}**", "", "## Findings", ""]
    out += _table(result.reports, scrub) if result.reports else ["No failing findings."]
    for i, rep in enumerate(result.reports, 1):
        where = scrub(str(rep.cassette)) if rep.cassette else "not written"
        out += ["", f"### {i}. {md_text(rep.status)}: {md_text(', '.join(rep.oracles))} "
                    f"(reproduced {md_text(rep.rate)})", "",
                f"Smallest capability set: {md_code(rep.caps.describe())}", "",
                f"Cassette: {md_code(clip(where, CLIP))}"]
    out += ["", "## Scenario", ""] + [
        f"{n}. {md_code(clip(scrub(' '.join(result.scenario.argv(n - 1, '{agent}'))), CLIP))}"
        for n in range(1, len(result.scenario.steps) + 1)]
    if result.info:
        out += ["", "## Observations (info)", ""]
        out += [f"- {md_code(f.oracle)} [{md_code(f.rule)}]: "
                f"{md_text(clip(scrub(f.message), CLIP))}" for f in result.info]
    out += _rules(result)
    return "\n".join(out) + "\n"
