"""The ``acp-fuzz report`` commands (interface layer).

``acp-fuzz report CASSETTE [-o FILE]`` (also ``report cassette CASSETTE``)
    Writes the Markdown bug report for a cassette (to stdout by default).

``acp-fuzz report merge REPORT.json... [--report KIND:PATH]``
    Merges campaign JSON reports (``target --report json:PATH``), typically the shards of one
    campaign (``target --shard K/N``, docs/scaling.md), into one: the counts summed, the
    coverage merged (each key at its earliest example in any of them; the keys that none
    sent), each bug once (the campaign's own same-bug rule,
    :func:`acp_fuzz.core.minimize.same_bug`, the first report's failure kept). It prints the
    merged findings and the summary line, writes ``--report markdown:PATH``, ``html:PATH``,
    ``junit:PATH`` or ``json:PATH`` (repeatable), and exits as a campaign does: ``0`` clean,
    ``1`` when a merged finding fails the run, ``130`` when a merged campaign was
    interrupted. A file that is not a campaign report, reports of different agents, or of
    ``--strict`` beside not, is one error line and exit ``2``; a shard missing or given twice,
    or a covering example that two reports both ran, is a warning.

    A cassette a report names is looked for beside the report (the path as written, or its
    tail: the cassettes of a downloaded CI artifact), else taken as written, and read (for the
    HTML page's per-turn view) only when it is inside the current folder or a report's: a
    report is data, and its paths are not a way to read the rest of the disk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from acp_fuzz.cli.app import QuietGroup, app, atomic_write, err, fail, out, read_json
from acp_fuzz.core.cassette import CassetteError, read_cassette
from acp_fuzz.core.escaping import terminal

if TYPE_CHECKING:
    from acp_fuzz.core.cassette import Cassette
    from acp_fuzz.engine.campaign.search import CampaignResult

__all__ = ["merge_cmd", "report", "report_cmd"]

#: What ``report merge --report KIND:PATH`` writes.
MERGE_KINDS = ("markdown", "html", "junit", "json")


class _ReportGroup(QuietGroup):
    """``report`` has two commands; a first word that is neither (``report x.cassette``, as
    before there were two) means ``report cassette``. A cassette named ``merge`` is
    ``./merge``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["cassette", *args]
        return super().parse_args(ctx, args)


report = typer.Typer(cls=_ReportGroup, no_args_is_help=True,
                     help="A cassette's Markdown bug report (`report CASSETTE`), or campaign "
                          "reports merged into one (`report merge A.json B.json`).")
app.add_typer(report, name="report")


@report.command("cassette")
def report_cmd(
    cassette: Path = typer.Argument(..., help="The cassette to report on.",
                                    show_default=False),
    output: Path | None = typer.Option(
        None, "--output", "-o", metavar="FILE",
        help="Write the report here instead of to stdout."),
) -> None:
    """Write a Markdown bug report for a cassette: the agent, the finding and the rule it
    breaks, the minimal JSON-RPC transcript, what reached the model next to what should
    have, and the command that reproduces it (also `acp-fuzz report CASSETTE`)."""
    from acp_fuzz.reporting import render_markdown

    try:
        recording = read_cassette(cassette)
        text = render_markdown(recording, path=str(cassette))
    except CassetteError as e:
        fail(str(e))
    except Exception as e:  # a stranger's cassette: one line, never a traceback
        fail(f"{cassette}: cannot report: {type(e).__name__}: {e}")
    if output is None:
        typer.echo(text, nl=False)
        return
    atomic_write(output, text)
    typer.echo(f"wrote {output}", err=True)


@report.command("merge")
def merge_cmd(
    reports: list[Path] = typer.Argument(
        ..., metavar="REPORT.json", show_default=False,
        help="Campaign JSON reports (target --report json:PATH), e.g. one per shard."),
    report_to: list[str] = typer.Option(
        [], "--report", metavar="KIND:PATH",
        help="Write the merged report: markdown:PATH, html:PATH, junit:PATH (one test case "
             "per rule checked) or json:PATH; repeatable."),
) -> None:
    """Merge campaign JSON reports (the shards of one campaign: target --shard K/N) into one:
    counts summed, coverage merged, each bug once (the campaign's same-bug rule); exits as a
    campaign does (1 on a failing finding)."""
    from acp_fuzz.cli.target import parse_reports

    outputs = parse_reports(report_to, MERGE_KINDS)
    docs = [read_json(path, str(path)) for path in reports]
    results = [_result(path, doc) for path, doc in zip(reports, docs, strict=True)]
    _same_campaign(reports, results)
    _warn_shards(reports, results)
    merged = _merge(results)
    seconds = [d.get("seconds") for d in docs]
    elapsed = max((s for s in seconds if isinstance(s, int | float)), default=0.0)
    _say(merged, elapsed, len(reports))
    roots = [Path.cwd(), *(path.parent for path in reports)]
    for kind, path in outputs:
        _write(kind, path, merged, elapsed, roots)
    raise typer.Exit(merged.exit_code)


def _result(path: Path, doc: Any) -> CampaignResult:
    """The campaign of one report, or exit 2 with what is wrong with it."""
    from acp_fuzz.reporting.campaign import ReportError, result_from_json

    try:
        result: CampaignResult = result_from_json(doc, lambda name: _near(path, name))
    except ReportError as e:
        fail(f"{path}: {e}")
    except (TypeError, ValueError) as e:  # a value the settings refuse (a negative seed, ...)
        fail(f"{path}: not a campaign report: {e}")
    return result


def _near(report: Path, name: str) -> Path:
    """A cassette a report names, found beside the report when it is there: at the path as
    written under the report's folder, or at a tail of it (a CI artifact holds
    ``cassettes/x.cassette`` beside ``report.json``, which named it
    ``/home/runner/work/.../acp-fuzz-results/cassettes/x.cassette``); else as written."""
    parts = Path(name).parts
    for i in range(len(parts)):
        beside = report.parent.joinpath(*parts[i:])
        if not Path(*parts[i:]).is_absolute() and beside.is_file():
            return beside
    return Path(name)


def _readable(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path`` is a file inside one of ``roots`` (after symlinks are resolved)."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return False
    return real.is_file() and any(real.is_relative_to(r.resolve()) for r in roots)


def _same_campaign(paths: Sequence[Path], results: Sequence[CampaignResult]) -> None:
    """Exit 2 unless every report is of the same agent, with the same strictness."""
    def agent(r: CampaignResult) -> str:
        return f"{r.agent.get('name', '?')} {r.agent.get('version', '?')}"

    first = results[0]
    for path, r in zip(paths[1:], results[1:], strict=True):
        if agent(r) != agent(first):
            fail(f"{path} is a campaign of {agent(r)}, {paths[0]} of {agent(first)}: "
                 "merge the reports of one agent")
        if r.settings.strict != first.settings.strict:
            fail(f"{path} and {paths[0]} differ in --strict: merge the reports of one campaign")


def _warn_shards(paths: Sequence[Path], results: Sequence[CampaignResult]) -> None:
    """Say when the shards merged are not all of one campaign's, once each."""
    shards = Counter(r.settings.shard for r in results if r.settings.shard[1] > 1)
    counts = {n for _, n in shards}
    for (k, n), times in sorted(shards.items()):
        if times > 1:
            _warn(f"shard {k + 1}/{n} is in {times} of the reports (merged all the same)")
    if len(counts) == 1:
        n = counts.pop()
        missing = [f"{k + 1}/{n}" for k in range(n) if (k, n) not in shards]
        if missing:
            _warn(f"shard(s) {', '.join(missing)} missing: their covering examples and "
                  "search did not run")
    elif counts:
        _warn(f"the reports are shards of campaigns split {len(counts)} different ways")
    twice = [d for d, c in Counter(d for r in results for d in r.covering).items() if c > 1]
    if twice:
        _warn(f"{len(twice)} covering example(s) ran in more than one report (the same "
              f"--shard twice, or campaigns that were not shards of one): {', '.join(twice[:5])}")


def _warn(text: str) -> None:
    err.print(terminal(f"acp-fuzz: warning: {text}"), markup=False, style="yellow")


def _merge(results: Sequence[CampaignResult]) -> CampaignResult:
    from acp_fuzz.engine.campaign.search import CampaignSettings
    from acp_fuzz.engine.campaign.workers import merge_results

    first = results[0].settings
    total = sum(r.examples_run for r in results)
    cfg = CampaignSettings(seed=first.seed, strict=first.strict, max_examples=max(total, 1))
    return merge_results(results, cfg)


def _say(merged: CampaignResult, elapsed: float, count: int) -> None:
    """The merged findings, as ``target`` prints them, and the summary line."""
    from acp_fuzz.reporting.text import campaign_lines, summary_line

    out.print(f"merged {count} report(s)", markup=False)
    for line in campaign_lines(merged, lambda c: f"{c} -- AGENT"):
        text = Text(line.text)
        if line.style:
            text.stylize(line.style, 0, line.lead or len(line.text))
        out.print(text)
    line = summary_line(merged, elapsed)
    out.print(Text(line.text, style=line.style))


def _write(kind: str, path: Path, merged: CampaignResult, elapsed: float,
           roots: Sequence[Path]) -> None:
    import json

    from acp_fuzz.reporting import campaign_cases, result_to_json, write_junit

    if kind == "json":
        atomic_write(path, json.dumps(result_to_json(merged, seconds=elapsed), indent=2,
                                      ensure_ascii=False, default=repr))
    elif kind == "junit":
        try:
            write_junit(path, "acp-fuzz report merge", campaign_cases(merged))
        except OSError as e:
            fail(f"cannot write {path}: {e.strerror or e}")
    elif kind == "markdown":
        from acp_fuzz.reporting.summary import campaign_markdown

        atomic_write(path, campaign_markdown(merged, elapsed=elapsed))
    else:
        from acp_fuzz.reporting.html import campaign_html

        atomic_write(path, campaign_html(merged, (), _cassettes(merged, roots), elapsed))


def _cassettes(merged: CampaignResult, roots: Sequence[Path]) -> dict[Path, Cassette]:
    """The merged failures' cassettes that can be read inside ``roots`` (the current folder
    and the reports': see the module docs), for the HTML page's per-turn view."""
    found: dict[Path, Cassette] = {}
    for rep in merged.reports:
        if rep.cassette is None or not _readable(rep.cassette, roots):
            continue
        try:
            found[rep.cassette] = read_cassette(rep.cassette)
        except CassetteError:
            continue
    return found

