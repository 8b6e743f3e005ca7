"""The ``acp-fuzz`` command line (interface layer: thin, over the engine).

Exit codes, for every command:

* ``0``: nothing failing was found (or the command did what it was asked);
* ``1``: findings (``target``), or a cassette still fails (``replay``);
* ``2``: a usage or harness error: a bad option, an agent that cannot be started, an
  unreadable cassette. The message is one line on stderr, never a traceback;
* ``130``: interrupted (Ctrl-C / SIGTERM); what was found so far is written first.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

import typer
import typer.main

from acp_fuzz.cli import (
    agents,
    client,
    config,
    doctor,
    gateway,
    matrix,
    profiles,
    replay,
    report,
    show,
    target,
)
from acp_fuzz.cli.app import app, note_misplaced, quiet_help_flags
from acp_fuzz.cli.config import ConfigError
from acp_fuzz.core.escaping import terminal
from acp_fuzz.engine.agents.cache import user_cache
from acp_fuzz.engine.campaign import interrupt

__all__ = ["app", "main"]

# The command modules register themselves on ``app`` when imported (one module per command).
_COMMANDS = (target, doctor, replay, report, show, gateway, profiles, agents, matrix, client)
quiet_help_flags(app)


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
    text = terminal(" ".join(str(message).split()))
    return (text if text.startswith("acp-fuzz:") else f"acp-fuzz: warning: {text}") + "\n"


def _usage_error(e: typer.TyperException) -> int:
    """Say a command-line mistake in one line on stderr (typer's framed box is several, and a
    CI log keeps only the first), with the command and where its help is; its exit code (2
    for a usage error). Asked for nothing at all (``acp-fuzz`` alone), the help is printed
    whole: it is what was asked for."""
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError":
        sys.stdout.write(e.format_message().rstrip("\n") + "\n")
        return int(e.exit_code)
    where = getattr(ctx, "command_path", "") or "acp-fuzz"
    message = terminal(" ".join(e.format_message().split()))
    sys.stderr.write(f"acp-fuzz: error: {message} (see '{where} -h')\n")
    return int(e.exit_code)


def project_defaults(args: list[str]) -> dict[str, Any]:
    """The project's settings file (:mod:`acp_fuzz.cli.config`) as click's ``default_map``;
    the command line wins over it. ``--help`` and ``--version`` read no file."""
    if not args or any(a in ("--help", "-h", "--version") for a in args):
        return {}
    found = config.find_config()
    if found is None:
        return {}
    commands, kinds = config_commands()
    return config.for_args(config.default_map(commands, kinds, config.load(found), found), args)


def config_commands() -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The click commands a settings file may set, and the kind of each of their
    parameters, from the commands' own signatures."""
    import typing

    group = typer.main.get_command(app)
    commands = dict(getattr(group, "commands", {}))
    kinds: dict[str, dict[str, str]] = {}
    for info in app.registered_commands:
        if info.callback is None:
            continue
        name = info.name or info.callback.__name__.replace("_", "-")
        hints = typing.get_type_hints(info.callback)
        kinds[name] = {k: config.kind_of(v) for k, v in hints.items() if k != "return"}
    return commands, kinds


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``acp-fuzz`` console script."""
    # Hypothesis keeps caches under its storage directory, by default ./.hypothesis in
    # whatever directory the user runs acp-fuzz from: keep them in the user's cache instead.
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(user_cache() / "hypothesis"))
    # The engine reports what it could not do (a cassette it could not write) as warnings:
    # one line each, not Python's file:line and source excerpt.
    warnings.formatwarning = _one_line_warning
    # Users' checks from installed packages and $ACP_FUZZ_PLUGINS judge in every command
    # (target, replay, replay --offline, matrix); --plugin adds more per command.
    from acp_fuzz.engine.campaign.plugins import PluginError, load_all

    try:
        load_all()
    except PluginError as e:
        sys.stderr.write(f"acp-fuzz: error: {terminal(str(e))}\n")
        return 2
    args = list(argv) if argv is not None else sys.argv[1:]
    note_misplaced(args)
    try:
        defaults = project_defaults(args)
    except ConfigError as e:
        sys.stderr.write(f"acp-fuzz: error: {terminal(str(e))}\n")
        return 2
    try:
        # Not standalone: a usage error comes back here, to be said in one line.
        rv = app(args=list(argv) if argv is not None else None, prog_name="acp-fuzz",
                 standalone_mode=False, default_map=defaults)
    except SystemExit as e:
        code = int(e.code or 0) if not isinstance(e.code, str) else 2
    except typer.Abort:
        sys.stderr.write("acp-fuzz: aborted\n")
        code = 1
    except typer.TyperException as e:  # click's exceptions: a bad option, a missing value
        code = _usage_error(e)
    else:
        code = rv if isinstance(rv, int) else 0
    if code == 130 and interrupt.requested() and argv is None:
        # Interrupted, and everything is written and closed: leave now. The interpreter's
        # own shutdown after an interrupt is not ours to trust (docs/performance.md, "The
        # test suite in CI"). The exit code is the contract, so it is set here, after what
        # Python's own exit would wait for: threads still closing an agent (bounded: a stuck
        # one must not hold the exit).
        deadline = time.monotonic() + 10.0
        for t in threading.enumerate():
            # A thread still starting (in threading's limbo: started, not yet running) cannot
            # be joined; it has nothing of ours to finish yet.
            if t is not threading.main_thread() and not t.daemon and t.is_alive():
                with contextlib.suppress(RuntimeError):
                    t.join(max(0.0, deadline - time.monotonic()))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
