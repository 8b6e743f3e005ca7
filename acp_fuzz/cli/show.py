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
         full: bool = typer.Option(False, "--full", help="Do not clip long texts.")) -> None:
    """Print a cassette as a readable timeline."""
    from acp_fuzz.timeline import render_timeline

    try:
        c = read_cassette(cassette)
    except CassetteError as e:
        fail(str(e))
    for line in render_timeline(c, full=full):
        out.print(terminal(line, newlines=True), markup=False)
