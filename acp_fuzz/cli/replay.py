"""The ``acp-fuzz replay`` command (interface layer).

It registers itself on the CLI's one app (:mod:`acp_fuzz.cli.app`) as ``replay``; errors go
through its one :func:`~acp_fuzz.cli.app.fail`. (``acp-fuzz report``: :mod:`acp_fuzz.cli.report`.)

``acp-fuzz replay CASSETTE|FOLDER (-- AGENT COMMAND... | --profile NAME)``
    Replays each cassette against the agent you name and prints one line per cassette::

        FAILED  cassettes/prompt.leak-seed0.cassette  (prompt.leak, 3/3)
        FIXED   cassettes/prompt.lost-seed4.cassette  (prompt.lost, 0/3)

    followed, when the new run's ACP messages or model requests differ from the recording, by
    the first difference. Exit status: ``0`` when every cassette is ``FIXED`` or ``PASSED``,
    ``1`` when any is ``FAILED`` or ``FLAKY``, ``2`` when any could not be replayed
    (``ERROR``: an unreadable cassette, an agent that does not start) or on a usage error.

    Options go before the cassette path: ``acp-fuzz replay --runs 5 x.cassette -- ./agent``.

    Replay never runs the command a cassette records unless asked: a cassette is data from
    whoever wrote it. Without an agent command, ``--profile`` or ``--offline`` it prints what
    each cassette records (escaped, one line each) and exits ``2``;
    ``--trust-recorded-command`` runs those recorded commands.

``acp-fuzz replay --client CASSETTE [--step ARGS... | --scenario FILE] -- CLIENT-CMD...``
    Replays a client cassette (written by ``acp-fuzz client``): the stand-in agent advertises
    the recorded capability set again, the client you name runs the scenario three times
    (``--runs``), and one line says ``FIXED`` (exit 0), ``FAILED`` or ``FLAKY`` (exit 1); a
    cassette or client that cannot be used is a one-line error (exit 2). It is
    :func:`acp_fuzz.cli.client.replay_client_cassette`, which ``acp-fuzz client --replay``
    runs too. A client cassette replayed without ``--client``, or an agent cassette with it,
    is a one-line error that says which to use.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer

from acp_fuzz.cli.app import app, fail
from acp_fuzz.cli.options import (
    PASS_ENV_OPTION,
    PLUGIN_OPTION,
    PROFILE_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    SCENARIO_OPTION,
    STEP_OPTION,
    TRUST_RECORDED_COMMAND_OPTION,
    enter_sandbox_net,
    require_bwrap,
    timeout_option,
)
from acp_fuzz.cli.plugins import load_plugins
from acp_fuzz.core.cassette import CassetteError, read_cassette
from acp_fuzz.core.escaping import terminal
from acp_fuzz.engine.campaign.replay import (
    DEFAULT_TIMEOUT,
    ReplayResult,
    cassettes_in,
    is_client_cassette,
    offline_check,
    recorded_agent,
    replay_cassette,
    visible,
)

__all__ = ["replay_cmd"]


# The arguments and options of ``replay`` (declared here, not in its signature, so that the
# command reads as what it does; typer reads them the same either way). Those other commands
# take too are in acp_fuzz/cli/options.py.
_CASSETTE: Any = typer.Argument(
    ..., help="A cassette file, or a folder: every *.cassette under it is replayed.",
    show_default=False)
_COMMAND: Any = typer.Argument(
    None, metavar="[-- AGENT COMMAND...]", show_default=False,
    help="The agent to replay against (your build). Required unless --profile, --offline "
         "or --trust-recorded-command is given.")
_RECORDED_MODEL_REPLIES: Any = typer.Option(
    False, "--recorded-model-replies",
    metavar="",
    help="Serve the real-model replies a --model-upstream cassette recorded, instead of "
         "the fake model's. They choose what the model tells your agent: use this only for "
         "cassettes you trust.")
_OFFLINE: Any = typer.Option(
    False, "--offline",
    metavar="",
    help="Start no agent: run the current oracles over the recorded events.")
_AS_AGENT: Any = typer.Option(
    False, "--as-agent",
    metavar="",
    help="Serve the recorded AGENT side on stdio, to test an ACP client (editor) against "
         "it; problems are printed to stderr at end of input (exit 1).")
_FORWARD_FS_TERMINAL: Any = typer.Option(
    False, "--forward-fs-terminal",
    metavar="",
    help="With --as-agent: also send your client the fs/* and terminal/* requests the "
         "cassette recorded (dropped by default: they write files and run commands).")
_RUNS: Any = typer.Option(
    None, "--runs", min=1, show_default=False,
    help="Replay each cassette this many times (default 1; 3 with --client); a failure "
         "seen in only some runs is FLAKY.")
_JUNIT: Any = typer.Option(
    None, "--junit", metavar="PATH", help="Also write a JUnit XML file (one test case "
                                          "per cassette): --report junit:PATH.")
# Not the campaigns' REPORT_OPTION: a replay reports each cassette's verdict, in kinds of
# its own.
_REPORT: Any = typer.Option(
    [], "--report", metavar="KIND:PATH",
    help="json:PATH (each cassette's verdict, runs, divergence and findings) or "
         "junit:PATH (one test case per cassette); repeatable.")
_TIMEOUT: Any = timeout_option(None, f"{DEFAULT_TIMEOUT:g}; with --client, the recorded "
                                     "scenario's")
_CLIENT: Any = typer.Option(
    False, "--client", metavar="",
    help="The cassette is a client's (`acp-fuzz client`): replay it against the client "
         "after -- (docs/clients.md). One cassette, not a folder.")


@app.command("replay", context_settings={"allow_interspersed_args": False})
def replay_cmd(
    cassette: Path = _CASSETTE,
    command: list[str] | None = _COMMAND,
    profile: str | None = PROFILE_OPTION,
    trust_recorded_command: bool = TRUST_RECORDED_COMMAND_OPTION,
    sandbox_net: bool = SANDBOX_NET_OPTION,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    recorded_model_replies: bool = _RECORDED_MODEL_REPLIES,
    offline: bool = _OFFLINE,
    as_agent: bool = _AS_AGENT,
    forward_fs_terminal: bool = _FORWARD_FS_TERMINAL,
    runs: int | None = _RUNS,
    junit: Path | None = _JUNIT,
    report: list[str] = _REPORT,
    timeout: float | None = _TIMEOUT,
    client: bool = _CLIENT,
    step: list[str] = STEP_OPTION,
    scenario_file: Path | None = SCENARIO_OPTION,
    pass_env: list[str] = PASS_ENV_OPTION,
    plugin: list[str] = PLUGIN_OPTION,
) -> None:
    """Replay recorded cassettes against your agent and say whether each bug is still there.

    The agent is the command after `--` or `--profile NAME`; the command recorded in a
    cassette is only shown, and run only with --trust-recorded-command.

    Verdicts: FAILED (the recorded failure came back in every run), FLAKY (in some runs),
    FIXED (in none), PASSED (nothing was recorded failing and nothing fails now), ERROR (the
    cassette or the agent could not be used). Exit status 0 when all are FIXED or PASSED, 1
    when any is FAILED or FLAKY, 2 on errors.

    With --client, a client cassette of `acp-fuzz client` against the client after `--`
    (docs/clients.md): FIXED (exit 0), FAILED or FLAKY (exit 1), in three runs by default."""
    argv = _agent_argv(command)
    if client:
        _replay_client(cassette, argv, step, scenario_file, timeout, tuple(pass_env),
                       trust=trust_recorded_command, sandbox_fs=sandbox_fs,
                       sandbox_net=sandbox_net, runs=runs,
                       agent_only={"--profile": profile, "--offline": offline,
                                   "--as-agent": as_agent,
                                   "--forward-fs-terminal": forward_fs_terminal,
                                   "--recorded-model-replies": recorded_model_replies,
                                   "--junit": junit, "--report": report},
                       plugin=plugin)
    _client_only({"--step": step, "--scenario": scenario_file, "--pass-env": pass_env})
    # Before any cassette is judged: a finding of a user's check replays FIXED only when
    # that check judged the replay (without it, the replay is an ERROR, never FIXED).
    load_plugins(plugin)
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    runs = 1 if runs is None else runs
    reports = _reports(report, junit)
    if as_agent:
        if (profile or trust_recorded_command or sandbox_net or sandbox_fs
                or recorded_model_replies):
            fail("--as-agent starts no agent: do not give --profile, "
                 "--trust-recorded-command, --sandbox-net, --sandbox-fs or "
                 "--recorded-model-replies")
        _serve_as_agent(cassette, argv, offline, runs, bool(reports), forward_fs_terminal)
    if forward_fs_terminal:
        fail("--forward-fs-terminal goes with --as-agent only")
    if offline and (argv or profile or trust_recorded_command or recorded_model_replies):
        fail("--offline starts no agent: do not give an agent command, --profile, "
             "--trust-recorded-command or --recorded-model-replies")
    if profile:
        _check_profile(profile)
    paths = _cassettes(cassette)
    if not (offline or argv or profile or trust_recorded_command):
        _refuse_recorded(paths)
    if sandbox_fs and not offline:
        require_bwrap()
    if not offline:
        enter_sandbox_net(sandbox_net)

    results = _print_replays(_replay_all(
        paths, offline=offline, target=argv or None, profile=profile,
        trust=trust_recorded_command, model=recorded_model_replies, runs=runs,
        timeout=timeout, sandbox_fs=sandbox_fs))
    _write_reports(reports, results)
    raise typer.Exit(exit_code(results))


def _client_only(given: dict[str, Any]) -> None:
    """Exit 2 for an option of a client replay given without ``--client``."""
    for name, value in given.items():
        if value:
            fail(f"{name} goes with --client (the replay of a client cassette)")


def _agent_argv(command: list[str] | None) -> list[str]:
    """The agent command after ``--``; exit 2 for an option given after the cassette."""
    argv = list(command or [])
    if argv and argv[0] == "--":  # kept by click when option parsing stopped at CASSETTE
        argv = argv[1:]
    if argv and argv[0].startswith("-"):
        fail(f"unexpected {argv[0]!r}: options go before the cassette path, and the agent "
             "command after `--` (acp-fuzz replay --runs 3 CASSETTE -- AGENT ARGS)")
    return argv


def _check_profile(profile: str) -> None:
    """Exit 2 for a profile that is not known or cannot be read."""
    # A bad profile is the user's mistake, said once before any cassette is read.
    from acp_fuzz.engine.agents.profiles import ProfileError, get_profile

    try:
        get_profile(profile)
    except KeyError as e:
        fail(str(e.args[0]))
    except ProfileError as e:
        fail(str(e))


def _cassettes(cassette: Path) -> list[Path]:
    """The agent cassettes to replay: the one given, or those under the folder given."""
    if not cassette.exists():
        fail(f"no such file or folder: {cassette}")
    if cassette.is_dir():
        return _agent_cassettes(cassette, cassettes_in(cassette))
    _refuse_client_cassette(cassette)
    return [cassette]


def _print_replays(replays: Iterator[ReplayResult]) -> list[ReplayResult]:
    """Print each verdict, with its notes and its first difference, as its replay ends."""
    results: list[ReplayResult] = []
    for result in replays:
        results.append(result)
        for note in result.notes:
            typer.echo(f"note: {visible(str(result.path))}: {note} (--recorded-model-replies)",
                       err=True)
        typer.echo(terminal(result.line()))
        if result.divergence is not None:
            for line in result.divergence.lines():
                typer.echo(terminal(f"    {line}"))
    return results


def _write_reports(reports: list[tuple[str, Path]], results: list[ReplayResult]) -> None:
    """Write each ``--report KIND:PATH`` (and ``--junit PATH``); exit 2 if one cannot be."""
    for kind, path in reports:
        try:
            if kind == "junit":
                write_junit(path, results)
            else:
                write_json(path, results)
        except OSError as e:
            fail(f"cannot write {path}: {e.strerror or e}")


def _reports(values: list[str], junit: Path | None) -> list[tuple[str, Path]]:
    """``--report KIND:PATH`` (json, junit) and ``--junit PATH``, each folder checked."""
    from acp_fuzz.cli.target import parse_reports

    return parse_reports(values) + ([("junit", junit)] if junit is not None else [])


def _replay_client(cassette: Path, argv: list[str], steps: list[str],
                   scenario_file: Path | None, timeout: float | None,
                   pass_env: tuple[str, ...], *, trust: bool, sandbox_fs: bool,
                   sandbox_net: bool, runs: int | None, agent_only: dict[str, Any],
                   plugin: list[str]) -> NoReturn:
    """``--client``: refuse what only an agent replay takes, load the plugins (their client
    checks judge the replay), then :func:`~acp_fuzz.cli.client.replay_client_cassette`."""
    from acp_fuzz.cli.client import replay_client_cassette, replay_client_cassettes

    given = [name for name, value in agent_only.items() if value]
    if given:
        fail(f"{', '.join(given)}: not with --client (a client replay starts the client you "
             "name, against the stand-in agent)")
    load_plugins(plugin)
    if cassette.is_dir():
        paths = cassettes_in(cassette)
        clients = [p for p in paths if is_client_cassette(p)]
        if len(clients) < len(paths):
            # What is not a client cassette may be an agent's, or no cassette at all (a
            # stranger's folder): not named an agent cassette here.
            typer.echo(f"note: {len(paths) - len(clients)} file(s) under "
                       f"{visible(str(cassette))} that are not client cassettes left out "
                       "(replay agent cassettes without --client)", err=True)
        if not clients:
            fail(f"no client cassettes under {visible(str(cassette))}")
        replay_client_cassettes(clients, argv, steps, scenario_file, timeout, trust, pass_env,
                                sandbox_fs=sandbox_fs, sandbox_net=sandbox_net,
                                runs=3 if runs is None else runs)
    replay_client_cassette(cassette, argv, steps, scenario_file, timeout, trust, pass_env,
                           sandbox_fs=sandbox_fs, sandbox_net=sandbox_net,
                           runs=3 if runs is None else runs)


def _agent_cassettes(folder: Path, paths: list[Path]) -> list[Path]:
    """The agent cassettes of a folder: its client cassettes (``acp-fuzz client``'s, which
    no agent can replay) are left out, and one note on stderr says how many and how to
    replay them; a folder with none of either kind is a one-line error."""
    clients = [p for p in paths if is_client_cassette(p)]
    agents = [p for p in paths if p not in clients]
    how = "replay them with `acp-fuzz replay --client FOLDER -- CLIENT-CMD`"
    if not agents:
        fail(f"no agent cassettes under {folder}"
             + (f" ({len(clients)} client cassette(s): {how})" if clients else ""))
    if clients:
        typer.echo(f"note: {len(clients)} client cassette(s) under {visible(str(folder))} left "
                   f"out ({how})", err=True)
    return agents


def _refuse_client_cassette(path: Path) -> None:
    """A client cassette given without ``--client``: one line that says to add it."""
    if is_client_cassette(path):
        fail(f"{visible(str(path))} is a client cassette (acp-fuzz client): replay it with "
             f"`acp-fuzz replay --client CASSETTE -- CLIENT-CMD`")


def _refuse_recorded(paths: list[Path]) -> NoReturn:
    """No agent named: show what each cassette would run (one escaped line each), run
    nothing, exit 2."""
    typer.echo("error: no agent given. acp-fuzz replay runs only the agent you name: "
               "`acp-fuzz replay CASSETTE -- ./your-agent` or `--profile NAME` (`--offline` "
               "needs no agent).", err=True)
    for path in paths:
        try:
            shown = recorded_agent(read_cassette(path))
        except CassetteError as e:
            shown = f"(unreadable: {e.reason})"
        typer.echo(f"  {visible(str(path))} records: {shown}", err=True)
    typer.echo("To run the recorded command anyway, only if you trust whoever made the "
               "cassette, add --trust-recorded-command.", err=True)
    raise typer.Exit(2)


def _replay_all(paths: list[Path], *, offline: bool, target: list[str] | None,
                profile: str | None, trust: bool, model: bool, runs: int,
                timeout: float, sandbox_fs: bool = False) -> Iterator[ReplayResult]:
    for path in paths:
        if offline:
            yield offline_check(path)
        else:
            if trust and not target and not profile:
                # Say what runs: the cassette chose it, the user only allowed it.
                try:
                    shown = recorded_agent(read_cassette(path))
                except CassetteError:
                    shown = None  # replay_cassette reports the unreadable cassette
                if shown is not None:
                    typer.echo(f"running the command recorded in {visible(str(path))}: "
                               f"{shown}", err=True)
            yield replay_cassette(path, target=target, profile=profile,
                                  trust_recorded_command=trust, recorded_model_replies=model,
                                  runs=runs, timeout=timeout, sandbox_fs=sandbox_fs)


def exit_code(results: list[ReplayResult]) -> int:
    """``2`` if any result is an ``ERROR``, else ``1`` if any is ``FAILED``/``FLAKY``,
    else ``0``."""
    if any(r.verdict == "ERROR" for r in results):
        return 2
    if any(not r.ok for r in results):
        return 1
    return 0


def _serve_as_agent(cassette: Path, argv: list[str], offline: bool, runs: int,
                    reports: bool, forward_fs_terminal: bool) -> NoReturn:
    from acp_fuzz.engine.client.as_agent import serve

    if argv or offline or reports or runs != 1:
        fail("--as-agent takes one cassette and no agent command, --offline, --runs, "
             "--report or --junit")
    if cassette.is_dir():
        fail("--as-agent serves one cassette, not a folder")
    try:
        recording = read_cassette(cassette)
    except CassetteError as e:
        fail(str(e))
    code = serve(recording, sys.stdin.buffer, sys.stdout.buffer, sys.stderr,
                 forward_fs_terminal=forward_fs_terminal)
    raise typer.Exit(code)


def write_junit(path: Path, results: list[ReplayResult]) -> None:
    """Write ``results`` as JUnit XML (:func:`acp_fuzz.reporting.replay_cases`)."""
    from acp_fuzz.reporting import replay_cases
    from acp_fuzz.reporting import write_junit as write

    write(path, "acp-fuzz replay", replay_cases(results))


def write_json(path: Path, results: list[ReplayResult]) -> None:
    """Write ``results`` as the JSON document of
    :func:`acp_fuzz.reporting.replay.replay_to_json`."""
    import json

    from acp_fuzz.reporting.files import write_atomic
    from acp_fuzz.reporting.replay import replay_to_json

    write_atomic(path, json.dumps(replay_to_json(results, exit_code(results)), indent=2,
                                  ensure_ascii=False, default=repr))
