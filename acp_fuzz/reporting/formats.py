"""Report formats: what ``--report KIND:PATH`` writes, the built-in ones and yours alike
(interface layer).

A report format is a class registered with :func:`report_format`. For each ``--report
KIND:PATH`` of ``acp-fuzz target`` or ``acp-fuzz client``, the command makes one
(``Format(path)``), hands it every campaign event as it comes (``on_event``, if the class has
one: :mod:`acp_fuzz.core.events`, the one stream of both directions) and, when the campaign
is over, the :class:`~acp_fuzz.core.events.Finished` event to ``finish``, which returns the
file's content. acp-fuzz writes it (atomically: the old file or the new one, never half, and
a symlink planted at the name is replaced, not written through), so a format never opens a
file itself. A format in one file, loaded with ``--plugin`` like a check::

    from acp_fuzz import Finished, report_format

    @report_format("tap", summary="Test Anything Protocol: one line per failure",
                   directions=("agent", "client"))
    class Tap:
        def __init__(self, path):
            self.path = path

        def finish(self, done: Finished) -> str:
            reports = done.result.reports
            lines = [f"1..{len(reports)}"]
            for i, rep in enumerate(reports, 1):
                lines.append(f"not ok {i} - {', '.join(rep.oracles)}")
            return "\\n".join(lines) + "\\n"

``acp-fuzz target --plugin tap.py --report tap:run.tap ./agent``. ``directions`` says which
campaigns it can report: ``"agent"`` (``target``: ``done.result`` is a
:class:`~acp_fuzz.engine.campaign.search.CampaignResult`) and ``"client"`` (``client``: a
:class:`~acp_fuzz.engine.client.campaign.ClientCampaignResult`); both have ``reports`` (each
a :class:`~acp_fuzz.core.reports.Report`: ``oracles``, ``findings``, ``status``, ``rate`` and
``cassette``) and ``exit_code``. A format must
leave out ``done.secrets`` (the built-in ones pass them to their builders, which scrub).

The built-in ``json``, ``junit`` and ``html`` are registered here the same way. A format that
raises is one error line and exit code 2 after the other reports are written; the cassettes
are on disk by then. ``docs/extending.md`` walks through one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from acp_fuzz.core.events import CampaignEvent, Finished

__all__ = ["DIRECTIONS", "FORMATS", "ReportFormat", "ReportSet", "Reporter", "kinds_for",
           "report_format"]

#: The campaigns a format may report: ``target``'s (agent) and ``client``'s.
DIRECTIONS = ("agent", "client")

_C = TypeVar("_C", bound=Callable[..., Any])


class Reporter(Protocol):
    """What a format's instance does: ``finish`` (and, optionally, ``on_event``)."""

    def finish(self, done: Finished) -> str | bytes:
        """The report's content, from the finished campaign."""


@dataclass(frozen=True)
class ReportFormat:
    """A registered format: its name (the ``KIND`` of ``--report KIND:PATH``), a line for
    ``--help`` and errors, the campaigns it reports, and its class."""

    name: str
    summary: str
    directions: frozenset[str]
    make: Callable[[Path], Reporter]
    builtin: bool = False


#: The registered formats by name: the built-in ones first, then the plugins'.
FORMATS: dict[str, ReportFormat] = {}


def report_format(name: str, *, summary: str,
                  directions: Sequence[str] = DIRECTIONS) -> Callable[[_C], _C]:
    """Register the decorated class (called with the report's path) as the format ``name``.
    Raises ``ValueError`` for a name already registered or a direction not known."""
    bad = [d for d in directions if d not in DIRECTIONS]
    if bad or not directions:
        raise ValueError(f"report format {name!r}: directions must be some of "
                         f"{', '.join(DIRECTIONS)}, got {list(directions)!r}")
    if not name or ":" in name or name in FORMATS:
        raise ValueError(f"report format {name!r}: a name with no ':' not registered yet")

    def register(cls: _C) -> _C:
        FORMATS[name] = ReportFormat(name, summary, frozenset(directions), cls,
                                     builtin=cls.__module__ == __name__)
        return cls

    return register


def kinds_for(direction: str) -> list[str]:
    """The format names a ``direction``'s campaign can be reported in, in registration
    order."""
    return [f.name for f in FORMATS.values() if direction in f.directions]


class ReportSet:
    """The ``--report`` files of one command: every event goes to each format's
    ``on_event``; :meth:`finish` writes them all."""

    def __init__(self, reports: Sequence[tuple[str, Path]]) -> None:
        self.reports = [(kind, path, FORMATS[kind].make(path)) for kind, path in reports]
        self.errors: list[str] = []

    def on_event(self, ev: CampaignEvent) -> None:
        for kind, path, rep in list(self.reports):
            hook = getattr(rep, "on_event", None)
            if hook is None:
                continue
            try:
                hook(ev)
            except Exception as e:  # a user's format: drop it, say why once, go on
                self.reports.remove((kind, path, rep))
                self.errors.append(_failed(kind, path, e))

    def finish(self, done: Finished, write: Callable[[Path, str | bytes], object]
               ) -> list[str]:
        """Write each report with ``write`` (the CLI's atomic writer); the one-line errors of
        those that failed (a format that raised, a file that cannot be written)."""
        for kind, path, rep in self.reports:
            try:
                content = rep.finish(done)
                if not isinstance(content, (str, bytes)):
                    raise TypeError(f"finish returned {type(content).__name__}, "
                                    "not str or bytes")
                write(path, content)
            except Exception as e:
                self.errors.append(_failed(kind, path, e))
        return self.errors


def _failed(kind: str, path: Path, e: BaseException) -> str:
    text = " ".join(str(e).split())[:300]
    what = e.strerror if isinstance(e, OSError) and e.strerror else text
    return f"--report {kind}:{path} not written: {type(e).__name__}: {what}"


# The built-in formats: the same hook as a user's.

class _Builtin:
    """What the built-in formats share: made with the report's path, no events needed."""

    def __init__(self, path: Path) -> None:
        self.path = path


@report_format("json", summary="the campaign as one JSON document (report merge reads it)")
class JsonReport(_Builtin):
    def finish(self, done: Finished) -> str:
        if done.direction == "client":
            from acp_fuzz.reporting.client import client_result_to_json

            doc = client_result_to_json(done.result, done.secrets)
        else:
            from acp_fuzz.reporting.campaign import result_to_json

            doc = result_to_json(done.result, done.secrets, seconds=done.elapsed)
        return json.dumps(doc, indent=2, ensure_ascii=False, default=repr)


@report_format("junit", summary="JUnit XML: one test case per rule checked")
class JunitReport(_Builtin):
    def finish(self, done: Finished) -> bytes:
        from acp_fuzz.reporting.junit import junit_xml

        if done.direction == "client":
            from acp_fuzz.reporting.client import client_cases

            return junit_xml("acp-fuzz client", client_cases(done.result, done.secrets))
        from acp_fuzz.reporting.campaign import campaign_cases

        return junit_xml("acp-fuzz target", campaign_cases(done.result, done.secrets))


@report_format("html", summary="one self-contained page, each finding's evidence shown")
class HtmlReport(_Builtin):
    def finish(self, done: Finished) -> str:
        """The page; an agent's with the per-turn view of each finding's cassette (one that
        cannot be read again is left out of the page)."""
        from acp_fuzz.core.cassette import CassetteError, read_cassette
        from acp_fuzz.reporting.html import campaign_html, client_html

        if done.direction == "client":
            return client_html(done.result, done.secrets, done.elapsed)

        cassettes = {}
        for rep in done.result.reports:
            if rep.cassette is not None:
                try:
                    cassettes[rep.cassette] = read_cassette(rep.cassette)
                except CassetteError:
                    continue
        return campaign_html(done.result, done.secrets, cassettes, done.elapsed)


@report_format("markdown", summary="one Markdown page (a CI job summary, a comment)")
class MarkdownReport(_Builtin):
    def finish(self, done: Finished) -> str:
        from acp_fuzz.reporting.summary import campaign_markdown, client_markdown

        if done.direction == "client":
            return client_markdown(done.result, done.secrets, done.elapsed)
        return campaign_markdown(done.result, done.secrets, done.elapsed)
