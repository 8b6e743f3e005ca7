"""The options that ``target``, ``replay``, ``matrix`` and ``client`` share, declared once
(typer shares the objects), with what each one asks of the machine checked in one place."""

from __future__ import annotations

from typing import Any

import typer

from acp_fuzz.cli.app import fail

__all__ = ["PASS_ENV_OPTION", "PLUGIN_OPTION", "SANDBOX_FS_OPTION", "SANDBOX_NET_OPTION",
           "SCENARIO_OPTION", "STEP_OPTION", "TIMEOUT_OPTION", "enter_sandbox_net", "require_bwrap"]

SANDBOX_NET_OPTION: Any = typer.Option(
    False, "--sandbox-net", metavar="",
    help="Run in a network namespace with only loopback.")
SANDBOX_FS_OPTION: Any = typer.Option(
    False, "--sandbox-fs", metavar="",
    help="Agents see only their sandbox (writable), system folders and what they need to "
         "run (read-only); not your files. Needs bubblewrap (bwrap).")

#: ``--plugin`` of the commands that judge (``target``, ``replay``, ``matrix``, ``client``): the
#: same checks must judge a cassette that found the failure (docs/extending.md). A plugin's
#: agent checks judge agents, its client checks (``direction="client"``) clients.
PLUGIN_OPTION: Any = typer.Option(
    [], "--plugin", metavar="MODULE|PATH",
    help="Load your checks from this module or .py file (repeatable; also "
         "$ACP_FUZZ_PLUGINS and `acp_fuzz` entry points; see docs/extending.md).")

#: ``--timeout`` of the commands that fuzz agents (``target``, ``matrix``).
TIMEOUT_OPTION: Any = typer.Option(30.0, "--timeout", min=0.1,
                                   help="Seconds to wait for each agent answer.")

#: ``--pass-env`` for the commands that run one agent turn and write no file (``doctor``).
PASS_ENV_OPTION: Any = typer.Option(
    [], "--pass-env", metavar="NAME",
    help="Pass this variable from your environment to the agent (repeatable). Its value, "
         "whatever the name, is a secret: it is never printed.")

#: A client's scenario (``acp-fuzz client`` and ``acp-fuzz replay --client``).
STEP_OPTION: Any = typer.Option(
    [], "--step", metavar="'ARGS...'",
    help="One run of the client (repeatable, in order): these words are appended to the "
         "client command (without one, each step is a whole command line). The steps share "
         "the agent's sessions and the client's HOME.")
SCENARIO_OPTION: Any = typer.Option(
    None, "--scenario", metavar="FILE", help="The steps as a TOML file (docs/clients.md).")


def require_bwrap() -> None:
    """``--sandbox-fs`` was given: exit 2 unless bubblewrap can create namespaces here."""
    from acp_fuzz.engine.process.sandbox import bwrap_works

    if bwrap_works() is None:
        fail("--sandbox-fs needs bubblewrap (`bwrap`, Debian package `bubblewrap`) able "
             "to create namespaces here")


def enter_sandbox_net(sandbox_net: bool) -> None:
    """``--sandbox-net``: run the rest of the command again inside a network namespace with
    only loopback (:func:`acp_fuzz.engine.process.netns.maybe_reexec`), and exit with its status;
    without it, nothing."""
    from acp_fuzz.engine.process.netns import maybe_reexec

    code = maybe_reexec(sandbox_net)
    if code is not None:
        raise typer.Exit(code)
