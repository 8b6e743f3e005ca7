"""``acp-fuzz client``: test an ACP client against the RFD's client rules (interface layer).

acp-fuzz plays the agent (a stand-in that advertises drawn capability sets), runs the client's
scenario against it, judges what the client sent, shrinks each failure to the smallest
capability set, confirms and records it. ``acp-fuzz replay --client CASSETTE`` runs a recorded
failure again (:func:`replay_client_cassette`; ``acp-fuzz client --replay CASSETTE``, the
older spelling, runs the same code). See ``docs/clients.md``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from acp_fuzz.cli.app import (
    app,
    check_writable_dir,
    err,
    fail,
    hide,
    install_interrupt_handlers,
    out,
    print_lines,
)
from acp_fuzz.cli.options import (
    DATABASE_OPTION,
    EXCLUDE_ORACLE_OPTION,
    EXITFIRST_OPTION,
    MAX_FAILURES_OPTION,
    ORACLE_OPTION,
    PASS_ENV_OPTION,
    PLUGIN_OPTION,
    PORTABLE_OPTION,
    REPORT_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    SCENARIO_OPTION,
    SEED_OPTION,
    STEP_OPTION,
    STRICT_OPTION,
    TRUST_RECORDED_COMMAND_OPTION,
    WORKERS_OPTION,
    cassette_dir_option,
    enter_sandbox_net,
    max_examples_option,
    require_bwrap,
    require_database,
    time_budget_option,
    timeout_option,
)
from acp_fuzz.cli.plugins import load_plugins
from acp_fuzz.cli.target import parse_reports, passed_secrets, write_reports
from acp_fuzz.core.errors import CassetteError, HarnessError
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.events import Finished
from acp_fuzz.core.scenarios import DEFAULT_TIMEOUT, Scenario, ScenarioError

if TYPE_CHECKING:
    from acp_fuzz.engine.client.campaign import ClientCampaignResult, ClientSettings
    from acp_fuzz.reporting.formats import ReportSet

__all__ = ["client", "replay_client_cassette"]


def _scenario(command: Sequence[str], steps: Sequence[str], scenario_file: Path | None,
              timeout: float | None) -> Scenario | None:
    """The scenario the options give (``None``: neither ``--step`` nor ``--scenario``)."""
    from acp_fuzz.engine.client.scenario_file import read_scenario

    if steps and scenario_file is not None:
        fail("give the scenario as --step options or as --scenario FILE, not both")
    try:
        if scenario_file is not None:
            sc = read_scenario(scenario_file, command)
        elif steps:
            sc = Scenario.from_steps(command, steps)
        else:
            return None
        if timeout is not None:
            sc = Scenario(sc.command, sc.steps, timeout)
        sc.check()
    except ScenarioError as e:
        fail(f"--scenario {e}" if scenario_file is not None else str(e))
    return sc


# The arguments and options of ``client`` (declared here, not in its signature, so that the
# command reads as what it does; typer reads them the same either way). Those other commands
# take too are in acp_fuzz/cli/options.py.
_COMMAND: Any = typer.Argument(None, metavar="[-- CLIENT-CMD ARGS...]",
                               help="The client, after --. An argument that is "
                                    "exactly {agent} becomes the agent's command "
                                    "line; the client also finds it in "
                                    "$ACP_FUZZ_AGENT.")
_MAX_EXAMPLES: Any = max_examples_option(50)
_TIME_BUDGET: Any = time_budget_option(None)
_TIMEOUT: Any = timeout_option(None, f"the scenario's, else {DEFAULT_TIMEOUT:g}")
# Not target's ./cassettes: a folder of agent cassettes replays against an agent, and a
# client cassette there would be one that cannot.
_CASSETTE_DIR: Any = cassette_dir_option(Path("client-cassettes"))
_REPLAY: Any = typer.Option(None, "--replay", metavar="CASSETTE",
                            help="The same as `acp-fuzz replay --client "
                                 "CASSETTE`: FIXED, FAILED or FLAKY.")


@app.command(context_settings={"allow_interspersed_args": False})
def client(
    command: list[str] = _COMMAND,
    max_examples: int = _MAX_EXAMPLES,
    seed: int = SEED_OPTION,
    strict: bool = STRICT_OPTION,
    time_budget: float | None = _TIME_BUDGET,
    step: list[str] = STEP_OPTION,
    scenario_file: Path | None = SCENARIO_OPTION,
    timeout: float | None = _TIMEOUT,
    cassette_dir: Path = _CASSETTE_DIR,
    report: list[str] = REPORT_OPTION,
    replay: Path | None = _REPLAY,
    trust_recorded_command: bool = TRUST_RECORDED_COMMAND_OPTION,
    sandbox_net: bool = SANDBOX_NET_OPTION,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    portable: bool = PORTABLE_OPTION,
    database: str | None = DATABASE_OPTION,
    pass_env: list[str] = PASS_ENV_OPTION,
    max_failures: int = MAX_FAILURES_OPTION,
    exitfirst: bool = EXITFIRST_OPTION,
    exclude_oracle: list[str] = EXCLUDE_ORACLE_OPTION,
    oracle: list[str] = ORACLE_OPTION,
    plugin: list[str] = PLUGIN_OPTION,
    workers: int = WORKERS_OPTION,
) -> None:
    """Test an ACP client: acp-fuzz plays the agent with drawn capability sets and judges
    what the client sends (systemPrompt gating, content, re-sending, gated methods)."""
    from acp_fuzz.reporting.formats import ReportSet, kinds_for

    # Before --exclude-oracle and --report are checked (a plugin's client oracle or report
    # format may be named), and before --replay: a recorded finding of a plugin's check is
    # judged again only with it loaded.
    load_plugins(plugin)
    excluded = _excluded_oracles(exclude_oracle, oracle)
    reports = ReportSet(parse_reports(report, kinds_for("client")))
    secrets = sorted(passed_secrets(pass_env))
    hide(secrets)
    if replay is not None:
        _search_only(reports, portable=portable, database=database, workers=workers)
        replay_client_cassette(replay, command or [], step, scenario_file, timeout,
                               trust_recorded_command, tuple(pass_env), sandbox_fs=sandbox_fs,
                               sandbox_net=sandbox_net)
    if trust_recorded_command:
        fail("--trust-recorded-command goes with --replay CASSETTE")
    sc = _scenario(command or [], step, scenario_file, timeout)
    if sc is None:
        if not command:
            fail("no client given: use `acp-fuzz client -- CLIENT-CMD ARGS` (try `-- python -m "
                 "acp_fuzz.reference_client`), or give --step/--scenario")
        sc = Scenario(tuple(command), timeout=timeout or DEFAULT_TIMEOUT)
    check_writable_dir(cassette_dir, "--cassette-dir")
    if sandbox_fs:
        require_bwrap()
    enter_sandbox_net(sandbox_net)
    require_database(database)  # inside the network namespace: what the campaign reaches

    from acp_fuzz.engine.client.campaign import ClientSettings

    hint = _again_options(sc, scenario_file, sandbox_fs=sandbox_fs, sandbox_net=sandbox_net)
    cfg = ClientSettings(max_examples=max_examples, seed=seed, strict=strict,
                         cassette_dir=cassette_dir, max_failures=1 if exitfirst else
                         max_failures, pass_env=tuple(pass_env),
                         exclude_oracles=excluded, replay_hint=hint,
                         sandbox_fs=sandbox_fs, portable=portable, time_budget=time_budget,
                         db=database)
    out.print(terminal(f"client: {shlex.join(sc.command) or '(each step is a command line)'}"
                       f"  scenario: {len(sc.steps)} step(s)"), markup=False)
    t0 = time.monotonic()
    result = _run(sc, cfg, workers, reports)
    if result.interrupted:
        err.print("acp-fuzz: interrupted: writing what was found so far", markup=False)
    elapsed = time.monotonic() - t0
    _print(result, elapsed)
    if write_reports(reports, Finished("client", result, elapsed, tuple(secrets))):
        raise typer.Exit(2)
    raise typer.Exit(result.exit_code)


def _search_only(reports: ReportSet, *, portable: bool, database: str | None,
                 workers: int) -> None:
    """``--replay`` was given: exit 2 for an option only a search takes."""
    if reports.reports:
        fail("--report is for a search; --replay prints its verdict and sets the exit code")
    if portable:
        fail("--portable is for a search: --replay writes no cassette")
    if database is not None:
        fail("--db is for a search: --replay runs the cassette's capability set")
    if workers != 1:
        fail("--workers is for a search: --replay runs the cassette's capability set")


def _excluded_oracles(exclude_oracle: list[str], oracle: list[str]) -> tuple[str, ...]:
    """The client oracles whose findings are skipped: those ``--exclude-oracle`` names and,
    with ``--oracle``, every one it does not name; exit 2 for an oracle not known."""
    from acp_fuzz.core.client_oracles import CLIENT_CATALOG

    for option, ids in (("--exclude-oracle", exclude_oracle), ("--oracle", oracle)):
        for oid in ids:
            if oid not in CLIENT_CATALOG:
                fail(f"{option}: unknown client oracle {oid!r} (known: "
                     f"{', '.join(sorted(CLIENT_CATALOG))})")
    if oracle:
        return tuple(sorted(set(exclude_oracle) | (set(CLIENT_CATALOG) - set(oracle))))
    return tuple(exclude_oracle)


def _run(sc: Scenario, cfg: ClientSettings, workers: int, reports: ReportSet
         ) -> ClientCampaignResult:
    """Run the client campaign (on ``workers`` workers), its progress said on stderr; exit 2
    on a harness or scenario error."""
    from acp_fuzz.core.events import CampaignEvent, Confirming, ExampleDone, FailureFound
    from acp_fuzz.engine.client.campaign import run_client_campaign

    def on_event(ev: CampaignEvent) -> None:
        caps = getattr(ev, "capability_set", None)
        shown = caps.describe() if caps is not None else "?"
        if isinstance(ev, ExampleDone) and ev.examples == 1:
            err.print(terminal(f"first example ran ({shown})"), markup=False)
        elif isinstance(ev, FailureFound):
            err.print(terminal(f"found a failure ({', '.join(ev.oracles)}) under "
                               f"{shown}; shrinking it"), markup=False)
        elif isinstance(ev, Confirming):
            err.print(terminal(f"  shrunk to {shown}; confirming"), markup=False)
        reports.on_event(ev)

    restore = install_interrupt_handlers()
    try:
        if workers > 1:
            from acp_fuzz.engine.campaign.workers import run_client_parallel

            return run_client_parallel(sc, cfg, workers, on_event)
        return run_client_campaign(sc, cfg, on_event)
    except HarnessError as e:
        fail(str(e))
    except ScenarioError as e:
        fail(str(e))
    finally:
        restore()


def _again_options(sc: Scenario, scenario_file: Path | None, *, sandbox_fs: bool,
                   sandbox_net: bool) -> str:
    """The options of ``acp-fuzz replay --client OPTIONS CASSETTE -- CLIENT`` that run a
    failure again as it was found: the sandbox, and the scenario as given."""
    words = ["--sandbox-fs"] * sandbox_fs + ["--sandbox-net"] * sandbox_net
    if scenario_file is not None:
        words.append(f"--scenario {shlex.quote(str(scenario_file))}")
    elif any(s.args for s in sc.steps):
        words += [f"--step {shlex.quote(shlex.join(s.args))}" for s in sc.steps]
    return " ".join(words)


def _print(result: ClientCampaignResult, elapsed: float) -> None:
    from acp_fuzz.engine.client.campaign import replay_command
    from acp_fuzz.reporting.client import client_lines, client_summary

    out.print(client_summary(result, elapsed), markup=False)
    info = result.client_info
    if isinstance(info, dict):
        out.print(terminal(f"client info: {info.get('name', '?')} {info.get('version', '?')}"),
                  markup=False)

    def again(cassette: Path) -> str:
        return replay_command(cassette, result.settings.replay_hint, result.scenario.command)

    print_lines(client_lines(result, again))


def replay_client_cassette(cassette_path: Path, command: Sequence[str], steps: Sequence[str],
                           scenario_file: Path | None, timeout: float | None, trust: bool,
                           pass_env: tuple[str, ...], *, sandbox_fs: bool = False,
                           sandbox_net: bool = False, runs: int = 3) -> NoReturn:
    """Replay one client cassette (``acp-fuzz replay --client`` and ``acp-fuzz client
    --replay``): run its capability set ``runs`` times against the client ``command`` with
    the scenario given (``steps`` or ``scenario_file``; none: the recorded one, which needs
    the steps again unless ``trust``), print the verdict and exit: ``0`` FIXED, ``1`` FAILED
    or FLAKY, ``2`` (one line) when the cassette or the client cannot be used."""
    replay_client_cassettes([cassette_path], command, steps, scenario_file, timeout, trust,
                            pass_env, sandbox_fs=sandbox_fs, sandbox_net=sandbox_net, runs=runs)


def replay_client_cassettes(paths: Sequence[Path], command: Sequence[str],
                            steps: Sequence[str], scenario_file: Path | None,
                            timeout: float | None, trust: bool, pass_env: tuple[str, ...], *,
                            sandbox_fs: bool = False, sandbox_net: bool = False,
                            runs: int = 3) -> NoReturn:
    """Replay client cassettes in turn (one, or a folder's for ``acp-fuzz replay --client
    FOLDER``), each as :func:`replay_client_cassette` says, and exit with the worst: ``2``
    when one could not be used (its one error line printed, the others still replayed),
    else ``1`` when one still fails, else ``0``."""
    if sandbox_fs:
        require_bwrap()
    enter_sandbox_net(sandbox_net)
    codes = []
    for path in paths:
        try:
            codes.append(client_verdict(path, command, steps, scenario_file, timeout, trust,
                                        pass_env, sandbox_fs=sandbox_fs, runs=runs))
        except typer.Exit as e:  # one cassette's error line was printed: go on
            if e.exit_code == 130:
                raise
            codes.append(e.exit_code)
    raise typer.Exit(max(codes))


def client_verdict(cassette_path: Path, command: Sequence[str], steps: Sequence[str],
                   scenario_file: Path | None, timeout: float | None, trust: bool,
                   pass_env: tuple[str, ...], *, sandbox_fs: bool = False,
                   runs: int = 3) -> int:
    """Replay one client cassette, print its verdict and return its exit code (``0`` FIXED,
    ``1`` FAILED or FLAKY); a cassette or client that cannot be used is :func:`fail`."""
    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.engine.client.campaign import recorded_client, replay_client

    try:
        cassette = read_cassette(cassette_path)
        caps, recorded, oracles = recorded_client(cassette)
    except (CassetteError, HarnessError) as e:
        fail(str(e))
    sc = _scenario(command, steps, scenario_file, timeout)
    if sc is None:
        needs_steps = any(s.args or s.stdin for s in recorded.steps)
        if trust:
            sc = recorded if not command else recorded.with_command(command)
        elif not command:
            fail(f"no client given: the cassette recorded {_shown(recorded.command)}; name the "
                 "client after -- (or --trust-recorded-command to run the recorded one)")
        elif needs_steps:
            fail("the cassette recorded a scenario of "
                 f"{len(recorded.steps)} step(s) ({_shown_steps(recorded)}); give them again "
                 "with --step or --scenario, or --trust-recorded-command to run them")
        else:
            sc = recorded.with_command(command)
        if timeout is not None:
            sc = Scenario(sc.command, sc.steps, timeout)
        try:
            sc.check()
        except ScenarioError as e:
            fail(str(e))
    restore = install_interrupt_handlers()
    try:
        res = replay_client(cassette, sc, runs=runs, pass_env=pass_env, sandbox_fs=sandbox_fs)
    except HarnessError as e:
        fail(str(e))
    except KeyboardInterrupt:
        err.print("acp-fuzz: interrupted", markup=False)
        raise typer.Exit(130) from None
    finally:
        restore()
    what = ", ".join(oracles) or "no recorded failure"
    out.print(terminal(f"{res.verdict} {cassette_path}: {what} under {caps.describe()} "
                       f"({res.rate})"), markup=False)
    for f in res.findings:
        out.print(terminal(f"  {f.severity} {f.oracle}: {f.message}"), markup=False)
    return 0 if res.verdict == "FIXED" else 1


def _shown(argv: Sequence[str]) -> str:
    return terminal(shlex.join(argv)) if argv else "no client command"


def _shown_steps(sc: Scenario) -> str:
    words: list[Any] = [shlex.join(s.args) for s in sc.steps]
    text = "; ".join(words)
    return terminal(text[:200] + ("..." if len(text) > 200 else ""))
