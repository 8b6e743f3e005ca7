"""The options that more than one command takes (``target``, ``doctor``, ``replay``,
``matrix``, ``client``), each declared once with one help text that is true for every
command that takes it (typer shares the objects), with what each one asks of the machine
checked in one place.

Where only the default differs from one command to another (``--max-examples``,
``--cassette-dir``, ``--time-budget``, ``--timeout``, ``--protocol``), a small factory takes
it, and the help stays the one text. tests/cover/test_cli_options.py fails when an option
name is given two help texts, but for the few names two commands use for different things.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from acp_fuzz.cli.app import fail

__all__ = ["AGENT_ARGUMENT", "DATABASE_OPTION", "DIALECT_OPTION", "EXCLUDE_ORACLE_OPTION",
           "EXITFIRST_OPTION", "MAX_FAILURES_OPTION", "ORACLE_OPTION", "PASS_ENV_OPTION",
           "PLUGIN_OPTION", "PORTABLE_OPTION", "PROFILE_OPTION", "PROTOCOL_OPTION", "REPORT_OPTION",
           "SANDBOX_FS_OPTION", "SANDBOX_NET_OPTION", "SCENARIO_OPTION", "SEED_OPTION",
           "STEP_OPTION", "STRICT_OPTION", "TIMEOUT_OPTION", "TRUST_RECORDED_COMMAND_OPTION",
           "WORKERS_OPTION", "cassette_dir_option", "enter_sandbox_net", "max_examples_option",
           "protocol_option", "require_bwrap", "require_database", "time_budget_option",
           "timeout_option"]

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

#: The agent, as ``target`` and ``doctor`` take it.
AGENT_ARGUMENT: Any = typer.Argument(None, metavar="[AGENT | -- CMD ARGS...]",
                                     help="The agent: a path, or a command after --.")
#: ``--profile`` of the commands that run one agent (``target``, ``doctor``, ``replay``);
#: ``matrix``'s names the agents of its table (repeatable) and is its own.
PROFILE_OPTION: Any = typer.Option(
    None, "--profile", "-p",
    help="A known agent (see `acp-fuzz profiles`) or a profile file (./my-agent.toml; "
         "docs/profiles.md); with a command after --, that command run the way the profile "
         "runs its agent.")
DIALECT_OPTION: Any = typer.Option(
    "auto", "--dialect",
    help="How the prompt is sent: auto (from initialize: the standard field wherever it "
         "is advertised), standard, claude-meta, pi-meta or goose.")

_TIMEOUT_HELP = ("Seconds to wait for each agent answer; testing a client (`client`, "
                 "`replay --client`), seconds each step may run.")


def timeout_option(default: float | None = 30.0, shown: str | bool = True) -> Any:
    """``--timeout``: an agent's answers are waited for 30 s by default; a client's steps
    run as long as their scenario says, so ``client`` and ``replay`` give ``None`` and say
    what it stands for (``shown``)."""
    return typer.Option(default, "--timeout", min=0.1, show_default=shown, help=_TIMEOUT_HELP)


#: ``--timeout`` of the commands that run agents only (``target``, ``doctor``, ``matrix``).
TIMEOUT_OPTION: Any = timeout_option()


def protocol_option(default: str | None, shown: str | bool = True) -> Any:
    """``--protocol``: ``target`` and ``doctor`` offer the profile's version by default,
    ``matrix`` version 1 to every agent (one table, one version)."""
    return typer.Option(
        default, "--protocol", metavar="1|2|auto", show_default=shown,
        help="ACP version to offer in initialize: 1 (the current one), 2 (the draft), or "
             "auto (offer 2, speak whichever of 1 and 2 the agent answers).")


#: ``--protocol`` of the commands that run one agent (``target``, ``doctor``).
PROTOCOL_OPTION: Any = protocol_option(None, "the profile's, else 1")


#: ``--pass-env`` of every command that runs an agent or a client.
PASS_ENV_OPTION: Any = typer.Option(
    [], "--pass-env", metavar="NAME",
    help="Pass this variable from your environment to the agent, or to the client with "
         "`client` and `replay --client` (repeatable; e.g. a real key for "
         "--model-upstream). Its value, whatever the name, is a secret: it is never "
         "printed, and is scrubbed from cassettes and reports (values shorter than 6 "
         "characters excepted).")


# The options of the commands that search (``target``, ``client``; ``matrix`` runs
# ``target``'s campaigns).

def max_examples_option(default: int) -> Any:
    """``--max-examples``: how many examples a command tries by default is its own (an agent
    campaign's, a client's, each agent's of a matrix)."""
    return typer.Option(
        default, "--max-examples", "-n", min=1,
        help="How many examples to try: lifecycle sequences for an agent (matrix: per "
             "agent), capability sets for a client.")


def cassette_dir_option(default: Path) -> Any:
    """``--cassette-dir``: each command writes its own kind of cassette, and each kind has a
    folder of its own by default: a folder of agent cassettes replays against an agent, and
    a client cassette there would be one that cannot."""
    return typer.Option(
        default, "--cassette-dir",
        help="Where the cassettes of what is found are written (matrix: a folder per agent).")


def time_budget_option(default: float | None) -> Any:
    """``--time-budget``: none by default, but for ``matrix``, whose agents each get ten
    minutes."""
    return typer.Option(
        default, "--time-budget", min=1.0, metavar="SECONDS",
        help="Draw no new example after this many seconds (matrix: per agent); a failure "
             "found by then is still shrunk and confirmed, and the summary says when it "
             "stopped the search.")


SEED_OPTION: Any = typer.Option(
    0, "--seed", help="Seed: the same seed and agent (or client) give the same run.")
STRICT_OPTION: Any = typer.Option(
    False, "--strict", metavar="",
    help="Fail on SHOULD findings too, and on an agent's deferred changes.")
#: ``--report`` of the campaigns (``target``, ``client``): ``replay``'s reports verdicts of
#: cassettes and ``report merge``'s a merged campaign, each in kinds of their own.
REPORT_OPTION: Any = typer.Option(
    [], "--report", metavar="KIND:PATH",
    help="json:PATH, junit:PATH, html:PATH (one self-contained page of the findings, their "
         "evidence and, for an agent, what reached the model), markdown:PATH (a CI job "
         "summary), or a format a --plugin registers; repeatable.")
MAX_FAILURES_OPTION: Any = typer.Option(
    10, "--max-failures", min=1, metavar="N",
    help="Stop after N distinct failures (each is shrunk, confirmed and recorded).")
EXITFIRST_OPTION: Any = typer.Option(
    False, "--exitfirst", "-x", metavar="",
    help="Stop at the first failure (--max-failures 1).")
EXCLUDE_ORACLE_OPTION: Any = typer.Option(
    [], "--exclude-oracle", metavar="ID",
    help="Skip this oracle's findings, e.g. a known bug (repeatable).")
ORACLE_OPTION: Any = typer.Option(
    [], "--oracle", metavar="ID",
    help="Report only this oracle's findings (repeatable; the others are skipped as "
         "with --exclude-oracle).")
PORTABLE_OPTION: Any = typer.Option(
    False, "--portable", metavar="",
    help="Write cassettes without this machine's paths (the Python interpreter becomes "
         "'python', the agents cache '<agents>/', the run's sandbox '<sandbox>'), to "
         "attach to a bug report.")
WORKERS_OPTION: Any = typer.Option(
    1, "--workers", "-j", min=1,
    help="Parallel workers, each with its own agents and gateway (client: its own clients "
         "and stand-ins), sharing one example database (matrix: per agent).")
#: ``--db`` of the commands that search (``target``, ``client``): one database may serve
#: both, each agent and each client scenario keeping its examples to itself
#: (acp_fuzz/engine/campaign/database.py).
DATABASE_OPTION: Any = typer.Option(
    None, "--db", metavar="FOLDER|redis://HOST:PORT/N",
    help="Hypothesis example database, a folder or a Redis URL (for many machines): what "
         "failed in earlier runs against the same agent (or client scenario) is tried "
         "first, and what this run finds is kept there. Off by default, so that a run is a "
         "function of its seed.")
#: ``replay`` and ``client --replay``: what a cassette recorded is run only when asked.
TRUST_RECORDED_COMMAND_OPTION: Any = typer.Option(
    False, "--trust-recorded-command", metavar="",
    help="Run the command each cassette recorded (an agent's command or profile; a "
         "client's command and steps, with `client --replay`). A cassette can name any "
         "command: use this only for cassettes you made or trust.")

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


def require_database(database: str | None) -> None:
    """``--db``: exit 2 (one line) unless the example database can be used; without one,
    nothing."""
    from acp_fuzz.engine.campaign.database import DatabaseError, check_database

    if database is None:
        return
    try:
        check_database(database)
    except DatabaseError as e:
        fail(str(e))


def enter_sandbox_net(sandbox_net: bool) -> None:
    """``--sandbox-net``: run the rest of the command again inside a network namespace with
    only loopback (:func:`acp_fuzz.engine.process.netns.maybe_reexec`), and exit with its status;
    without it, nothing."""
    from acp_fuzz.engine.process.netns import maybe_reexec

    code = maybe_reexec(sandbox_net)
    if code is not None:
        raise typer.Exit(code)
