"""``acp-fuzz show``: a cassette as a readable timeline (escaped for the terminal)."""

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
                                                    help="Do not clip long texts.")) -> None:
    """Print a cassette as a readable timeline."""
    from acp_fuzz.timeline import render_timeline

    try:
        c = read_cassette(cassette)
        # Rendered whole before the first line is printed, so that a cassette no check
        # foresaw gives the one error line below, not half a timeline and a traceback.
        lines = list(render_timeline(c, full=full))
    except CassetteError as e:
        fail(str(e))
    except Exception as e:  # a stranger's cassette: one line, never a traceback
        fail(f"{cassette}: cannot show: {type(e).__name__}: {e}")
    for line in lines:
        out.print(terminal(line, newlines=True), markup=False)
