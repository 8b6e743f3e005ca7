"""The one Typer app, its two consoles and its one error exit, shared by every command.

Every command module registers itself on :data:`app`; user-facing errors go through
:func:`fail` (one line on stderr, exit code 2), never a traceback.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from acp_fuzz import __version__
from acp_fuzz.escaping import terminal

__all__ = ["app", "check_url", "err", "error", "fail", "out"]

app = typer.Typer(
    name="acp-fuzz",
    help="Fuzz, record and replay ACP agents: finds client systemPrompt bugs from what "
         "reaches the model.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    """Print a one-line error, escaped for the terminal, and go on (see :func:`fail`)."""
    err.print(f"acp-fuzz: error: {terminal(message)}", markup=False)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error and exit; the single exit path for user-facing errors."""
    error(message)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        out.print(f"acp-fuzz {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """acp-fuzz: fuzz, record and replay ACP agents."""


def check_url(url: str | None) -> str | None:
    if url is not None and not url.startswith(("http://", "https://")):
        fail(f"--model-upstream takes an http(s) base URL, got {url!r}")
    return url
