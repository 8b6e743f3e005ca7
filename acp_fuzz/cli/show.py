"""``acp-fuzz show``: a cassette as a readable timeline (escaped for the terminal), or with
``--html`` as one self-contained HTML page (:func:`acp_fuzz.reporting.html.cassette_html`)."""

from __future__ import annotations

from pathlib import Path

import typer

from acp_fuzz.cli.app import app, fail, out
from acp_fuzz.core.cassette import CassetteError, read_cassette
from acp_fuzz.core.escaping import terminal

__all__ = ["show"]


@app.command()
def show(cassette: Path = typer.Argument(..., help="A cassette file."),
         full: bool = typer.Option(False, "--full", metavar="",
                                                    help="Do not clip long texts."),
         as_html: bool = typer.Option(
             False, "--html", metavar="",
             help="Print one self-contained HTML page instead: the findings, their evidence, "
                  "the steps and, for each model request, what the client asked for next to "
                  "what arrived (redirect it to a file: show --html X > x.html).")) -> None:
    """Print a cassette as a readable timeline (or, with --html, as an HTML page)."""
    from acp_fuzz.timeline import render_timeline

    # Rendered whole before the first line is printed, so that a cassette no check foresaw
    # gives the one error line below, not half a timeline and a traceback.
    try:
        c = read_cassette(cassette)
        if as_html:
            from acp_fuzz.reporting.html import cassette_html

            page = cassette_html(c, path=str(cassette))
        else:
            lines = list(render_timeline(c, full=full))
    except CassetteError as e:
        fail(str(e))
    except Exception as e:  # a stranger's cassette: one line, never a traceback
        fail(f"{cassette}: cannot show: {type(e).__name__}: {e}")
    if as_html:
        typer.echo(page, nl=False)
        return
    for line in lines:
        out.print(terminal(line, newlines=True), markup=False)
