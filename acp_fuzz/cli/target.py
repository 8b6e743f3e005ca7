"""``acp-fuzz target``: fuzz an agent, shrink, confirm and record each distinct failure.

The campaign reports progress as events (:mod:`acp_fuzz.engine.campaign.search`); this module
renders them with rich, installs the Ctrl-C/SIGTERM handling and writes the ``--report`` files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from acp_fuzz.cli.app import (
    app,
    check_url,
    check_writable_dir,
    err,
    error,
    fail,
    hide,
    install_interrupt_handlers,
    out,
    print_lines,
)
from acp_fuzz.cli.options import (
    AGENT_ARGUMENT,
    DATABASE_OPTION,
    DIALECT_OPTION,
    EXCLUDE_ORACLE_OPTION,
    EXITFIRST_OPTION,
    MAX_FAILURES_OPTION,
    ORACLE_OPTION,
    PASS_ENV_OPTION,
    PLUGIN_OPTION,
    PORTABLE_OPTION,
    PROFILE_OPTION,
    PROTOCOL_OPTION,
    REPORT_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    SEED_OPTION,
    STRICT_OPTION,
    TIMEOUT_OPTION,
    WORKERS_OPTION,
    cassette_dir_option,
    enter_sandbox_net,
    max_examples_option,
    require_bwrap,
    require_database,
    time_budget_option,
)
from acp_fuzz.cli.plugins import load_plugins
from acp_fuzz.core.dialects import CHOICES as DIALECT_CHOICES
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.events import Finished
from acp_fuzz.core.protocol import CHOICES as PROTOCOL_CHOICES
from acp_fuzz.core.protocol import answered
from acp_fuzz.core.scrub import env_secrets
from acp_fuzz.engine.campaign.runner import HarnessError, TargetSpec

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.search import CampaignEvent, CampaignResult, CampaignSettings
    from acp_fuzz.reporting.formats import ReportSet

__all__ = ["build_spec", "parse_reports", "passed_secrets",
           "print_agent", "target"]


def build_spec(command: Sequence[str], profile: str | None, timeout: float) -> TargetSpec:
    """The target from ``AGENT``/``-- CMD ARGS`` or ``--profile``, with clear errors."""
    if not command and not profile:
        fail("no agent given: use `acp-fuzz target ./agent`, `acp-fuzz target -- CMD ARGS` "
             "or `--profile NAME` (try `--profile reference`)")
    try:
        return TargetSpec.resolve(command, profile, timeout=timeout)
    except HarnessError as e:
        fail(str(e))


#: The most shards a campaign may be split into: each shard draws the examples of all of
#: them (and runs its own), so N shards of M examples each draw N * M.
MAX_SHARDS = 1000


def parse_shard(value: str | None) -> tuple[int, int]:
    """``--shard K/N`` as ``(K - 1, N)``, ``(0, 1)`` without it; exit 2 for anything else."""
    if value is None:
        return 0, 1
    k, slash, n = value.partition("/")
    if not (slash and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n) <= MAX_SHARDS):
        fail(f"--shard takes K/N with 1 <= K <= N <= {MAX_SHARDS} (e.g. 2/3), got {value!r}")
    return int(k) - 1, int(n)


def parse_reports(values: Sequence[str], kinds: Sequence[str] = ("json", "junit")
                  ) -> list[tuple[str, Path]]:
    """``--report KIND:PATH`` values (``kinds``: json and junit by default; ``target`` also
    takes html), each folder checked; exit 2 otherwise."""
    reports = []
    for v in values:
        kind, _, path = v.partition(":")
        if kind not in kinds or not path:
            forms = [f"{k}:PATH" for k in kinds]
            fail(f"--report takes {', '.join(forms[:-1])} or {forms[-1]}, got {v!r}")
        p = Path(path)
        if p.parent and not p.parent.exists():
            fail(f"--report: folder does not exist: {p.parent}")
        reports.append((kind, p))
    return reports


# The options of ``target`` (declared here, not in its signature, so that the command reads
# as what it does; typer reads them the same either way). Those other commands take too are
# in acp_fuzz/cli/options.py.
_MAX_EXAMPLES: Any = max_examples_option(100)
_MAX_STEPS: Any = typer.Option(12, "--max-steps", min=1, help="Most steps per sequence.")
_TIME_BUDGET: Any = time_budget_option(None)
_CASSETTE_DIR: Any = cassette_dir_option(Path("cassettes"))
_SHARD: Any = typer.Option(
    None, "--shard", metavar="K/N",
    help="Run shard K of N (1-based), one per CI job or machine: the shards split the "
         "covering examples and the search's draws and never run one example twice; "
         "--max-examples is this shard's. Merge their JSON reports with `acp-fuzz "
         "report merge` (docs/scaling.md).")
_MODEL_UPSTREAM: Any = typer.Option(
    None, "--model-upstream", metavar="URL",
    help="Forward model requests to a real provider; recorded with vcrpy into cassettes.")
_NO_COVER: Any = typer.Option(False, "--no-cover", metavar="",
                              help="Skip the covering examples: the search alone.")
_COVER_ONLY: Any = typer.Option(False, "--cover-only", metavar="",
                                help="Run only the covering examples (the fixed ones, the "
                                     "same at every seed), no search.")
_KEEP_INFO: Any = typer.Option(False, "--keep-info",
                               metavar="",
                               help="Write a cassette for each info observation too.")


@app.command(context_settings={"allow_interspersed_args": False})
def target(
    command: list[str] = AGENT_ARGUMENT,
    profile: str | None = PROFILE_OPTION,
    max_examples: int = _MAX_EXAMPLES,
    seed: int = SEED_OPTION,
    strict: bool = STRICT_OPTION,
    timeout: float = TIMEOUT_OPTION,
    max_steps: int = _MAX_STEPS,
    time_budget: float | None = _TIME_BUDGET,
    cassette_dir: Path = _CASSETTE_DIR,
    report: list[str] = REPORT_OPTION,
    dialect: str = DIALECT_OPTION,
    protocol: str | None = PROTOCOL_OPTION,
    sandbox_net: bool = SANDBOX_NET_OPTION,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    database: str | None = DATABASE_OPTION,
    pass_env: list[str] = PASS_ENV_OPTION,
    workers: int = WORKERS_OPTION,
    shard: str | None = _SHARD,
    model_upstream: str | None = _MODEL_UPSTREAM,
    max_failures: int = MAX_FAILURES_OPTION,
    exitfirst: bool = EXITFIRST_OPTION,
    exclude_oracle: list[str] = EXCLUDE_ORACLE_OPTION,
    oracle: list[str] = ORACLE_OPTION,
    no_cover: bool = _NO_COVER,
    cover_only: bool = _COVER_ONLY,
    keep_info: bool = _KEEP_INFO,
    portable: bool = PORTABLE_OPTION,
    plugin: list[str] = PLUGIN_OPTION,
) -> None:
    """Fuzz an agent's systemPrompt handling; shrink each distinct failure to a minimal
    reproduction."""
    # Here, not at the top: the campaign loads Hypothesis, which report, show and replay
    # --offline never need (tests/cover/test_public_api.py keeps them free of it).
    from acp_fuzz.engine.campaign.search import CampaignSettings
    from acp_fuzz.reporting.formats import ReportSet, kinds_for

    _check_choices(dialect, protocol, no_cover=no_cover, cover_only=cover_only)
    share = parse_shard(shard)
    # Before --exclude-oracle and --report are checked: a plugin's oracle or report format
    # may be named.
    load_plugins(plugin)
    reports = ReportSet(parse_reports(report, kinds_for("agent")))
    excluded = _excluded_oracles(exclude_oracle, oracle)
    enter_sandbox_net(sandbox_net)
    spec = _agent_spec(command or [], profile, timeout, sandbox_fs=sandbox_fs,
                       pass_env=pass_env, dialect=dialect, protocol=protocol)
    secrets = sorted(passed_secrets(spec.passthrough_env))
    hide(secrets)  # from here on, no line the CLI prints holds one of them
    check_writable_dir(cassette_dir, "--cassette-dir")
    require_database(database)
    cfg = CampaignSettings(max_examples=max_examples, seed=seed, strict=strict,
                           max_steps=max_steps, cassette_dir=cassette_dir, database=database,
                           model_upstream=check_url(model_upstream),
                           max_failures=1 if exitfirst else max_failures,
                           exclude_oracles=excluded, keep_info=keep_info, portable=portable,
                           cover=not no_cover, cover_only=cover_only, time_budget=time_budget,
                           shard=share, cover_share=share)
    t0 = time.monotonic()
    view = _Progress(spec, cfg, database is not None)
    result = _run(spec, cfg, workers, view, reports)
    if result.interrupted:
        err.print("acp-fuzz: interrupted: writing what was found so far", markup=False)
    # The replay line names the agent the way the user did: replay never runs a cassette's
    # recorded command unless told to trust it.
    def again(cassette: Path) -> str:
        return replay_args(cassette, profile=profile, command=command or (),
                           sandbox_fs=sandbox_fs, sandbox_net=sandbox_net)

    elapsed = time.monotonic() - t0
    _print_result(result, elapsed, again)
    out.print(_covering_line(result, view.cover) if cfg.cover
              else "covering examples: off (--no-cover)", markup=False)
    errors = write_reports(reports, Finished("agent", result, elapsed, tuple(secrets)))
    _print_summary(result, elapsed)
    if errors:
        raise typer.Exit(2)
    raise typer.Exit(result.exit_code)  # 130 when interrupted


def write_reports(reports: ReportSet, done: Finished) -> list[str]:
    """Write every ``--report`` (each format's ``finish``, written atomically) and print one
    error line for each that could not be written; the errors (the command then exits 2)."""
    from acp_fuzz.reporting.files import write_atomic

    errors = reports.finish(done, write_atomic)
    for line in errors:
        error(line)
    return errors


def _covering_line(result: CampaignResult, planned: int) -> str:
    """``covering examples: N of P in T s``; past the plan, the examples built for the keys a
    failure cut short are counted apart (``40 of 39`` read as a miscount)."""
    n, extra = result.covering_examples, result.covering_examples - planned
    counted = (f"{n} ({planned} planned, {extra} more for what a failure cut short)"
               if planned and extra > 0 else f"{n} of {planned}" if planned else str(n))
    return f"covering examples: {counted} in {result.covering_seconds:.1f} s"


def _check_choices(dialect: str, protocol: str | None, *, no_cover: bool,
                   cover_only: bool) -> None:
    """Exit 2 for a dialect or an ACP version not known, or for both ``--no-cover`` and
    ``--cover-only``."""
    if dialect not in DIALECT_CHOICES:
        fail(f"--dialect {dialect!r} is not known (known: {', '.join(DIALECT_CHOICES)})")
    if protocol is not None and protocol not in PROTOCOL_CHOICES:
        fail(f"--protocol must be one of {', '.join(PROTOCOL_CHOICES)}, not {protocol!r}")
    if no_cover and cover_only:
        fail("--no-cover and --cover-only exclude each other")


def passed_secrets(names: Sequence[str]) -> frozenset[str]:
    """The values of the variables ``--pass-env`` names that are set here, as secrets
    (:func:`acp_fuzz.core.scrub.env_secrets`)."""
    return env_secrets({n: os.environ[n] for n in names if n in os.environ}, names)


def _excluded_oracles(exclude_oracle: Sequence[str], oracle: Sequence[str]) -> tuple[str, ...]:
    """The oracles whose findings are skipped: those ``--exclude-oracle`` names and, with
    ``--oracle``, every one it does not name."""
    excluded = _check_oracles(exclude_oracle)
    if oracle:
        from acp_fuzz.core.findings import CATALOG

        chosen = set(_check_oracles(oracle, "--oracle"))
        excluded = tuple(sorted(set(excluded) | (set(CATALOG) - chosen)))
    return excluded


def _agent_spec(command: Sequence[str], profile: str | None, timeout: float, *,
                sandbox_fs: bool, pass_env: Sequence[str], dialect: str,
                protocol: str | None) -> TargetSpec:
    """The agent to fuzz (:func:`build_spec`) with what the options change of it: the
    sandbox, the variables passed, the dialect and the ACP version."""
    spec = build_spec(command, profile, timeout)
    if sandbox_fs:
        require_bwrap()
        spec = dataclasses.replace(spec, sandbox_fs=True)
    if pass_env:
        spec = dataclasses.replace(spec, passthrough_env=(*spec.passthrough_env, *pass_env))
    if dialect != "auto":
        spec = dataclasses.replace(spec, dialect=dialect)
    if protocol is not None:
        spec = dataclasses.replace(spec, protocol=protocol)
    return spec


def _run(spec: TargetSpec, cfg: CampaignSettings, workers: int, view: _Progress,
         reports: ReportSet) -> CampaignResult:
    """Run the campaign (on ``workers`` workers), its events said as they come; exit 2 on a
    harness error, 130 when interrupted before any example ran."""
    from acp_fuzz.engine.campaign.search import run_campaign

    def on_event(ev: CampaignEvent) -> None:
        _say(ev, spec)
        view.on_event(ev)
        reports.on_event(ev)

    progress = view.bar
    restore = install_interrupt_handlers()
    try:
        if workers > 1:
            from acp_fuzz.engine.campaign.workers import run_parallel

            return run_parallel(spec, cfg, workers, on_event)
        return run_campaign(spec, cfg, on_event)
    except HarnessError as e:
        progress.stop()
        _fail_with_diagnosis(e)
    except KeyboardInterrupt:
        progress.stop()
        err.print("acp-fuzz: interrupted before any example ran; nothing to write",
                  markup=False)
        raise typer.Exit(130) from None
    finally:
        restore()
        progress.stop()


def _say(ev: CampaignEvent, spec: TargetSpec) -> None:
    """The lines a campaign event prints besides the progress bar: the agent, its baseline,
    each failure found and each that shrank to one found already."""
    from acp_fuzz.engine.campaign.search import Calibrated, FailureFound, ShrankToKnown, Started

    if isinstance(ev, Started):
        print_agent(ev.agent, ev.initialize)
        from acp_fuzz.core.dialects import not_honoured, resolve

        why = not_honoured(resolve(spec.dialect, ev.initialize), ev.initialize)
        if why is not None:
            err.print(terminal(f"warning: --dialect {spec.dialect}: {why}"),
                      style="yellow", markup=False)
    elif isinstance(ev, Calibrated):
        b = ev.baseline
        out.print(f"baseline: {b.size_lines} default-instruction line(s), {b.size_chars} "
                  "characters learned" + ("" if b.substantial else
                                          " (too small to judge override and append)")
                  if b.known else "baseline: no default instructions seen (default checks off)")
        if ev.learned is not None:
            out.print(ev.learned.line(), markup=False)
    elif isinstance(ev, FailureFound):
        err.print(f"found a failure ({', '.join(ev.oracles)}); shrinking it", markup=False)
    elif isinstance(ev, ShrankToKnown):
        err.print(f"  same bug as the {', '.join(ev.known)} failure already found; "
                  "searching on", markup=False)


class _Progress:
    """The campaign's progress bar (stderr, gone when the run ends) and what it says.

    It starts at the first example, after the lines about the agent and its baseline, so that
    its first frame is never glued to one of them on a terminal. It counts the drawn examples
    (those ``--max-examples`` counts) against the budget, and apart from them the runs
    Hypothesis makes to shrink a failure, and names what the campaign is doing: the covering
    examples (the fixed ones every campaign runs first, as many as :func:`covering_examples`
    plans for the agent), the search, shrinking (Hypothesis, then the campaign's own passes)
    and confirming the minimal steps."""

    def __init__(self, spec: TargetSpec, cfg: CampaignSettings, database: bool) -> None:
        self.spec, self.cfg = spec, cfg
        self.database = database  # examples from the database come before the covering ones
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            TextColumn("{task.completed}/{task.total} examples"),
                            TextColumn("{task.fields[extra]}"),
                            TextColumn("{task.fields[steps]} steps"),
                            TextColumn("{task.fields[found]}"), TimeElapsedColumn(),
                            console=err, transient=True)
        self.task = self.bar.add_task("starting", total=cfg.max_examples, steps=0, extra="",
                                      found="")
        self.drawn = self.shrink_runs = self.failures = 0
        self.cover = 0  # the covering examples planned (known at Started)
        self.failing = False  # an example failed; the examples that follow shrink it
        self.started = False
        self.phase = ""  # the phase the bar last said

    def on_event(self, ev: CampaignEvent) -> None:
        """Follow one campaign event."""
        from acp_fuzz.engine.campaign.search import (
            Confirming,
            ExampleDone,
            ShrankToKnown,
            Shrinking,
            Started,
        )

        if isinstance(ev, Started):
            self.cover = self._planned(ev)
        elif isinstance(ev, ExampleDone):
            if ev.failing and self.failing:
                self.shrink_runs += 1
            else:
                self.drawn += 1
                self.failing = ev.failing
            self._show(ev.steps)
        elif isinstance(ev, Shrinking):
            self._show(None, f"shrinking ({ev.steps} steps: deleting and simplifying)")
        elif isinstance(ev, Confirming):
            self.failures += 1
            self._show(None, f"confirming ({ev.steps} steps, on fresh agents)")
        elif isinstance(ev, ShrankToKnown):
            self.failing = False
            self._show(None)

    def _planned(self, ev: Any) -> int:
        if self.database or not self.cfg.cover:
            return 0
        from acp_fuzz.core.dialects import resolve
        from acp_fuzz.strategies import covering_examples

        resend = resolve(self.spec.dialect, ev.initialize) == "standard"
        index, n = self.cfg.cover_share  # a shard plans its share
        return len(covering_examples(ev.caps, resend_on_lifecycle=resend,
                                     max_steps=self.cfg.max_steps)[index::n])

    def _phase(self) -> str:
        if self.failing:
            return "shrinking (Hypothesis)"
        if self.drawn <= self.cover and self.drawn < self.cfg.max_examples:
            return f"covering examples ({self.drawn}/{self.cover})"
        return "searching"

    def _show(self, steps: int | None, phase: str | None = None) -> None:
        description = phase or self._phase()
        fields: dict[str, Any] = {
            "description": description,
            "completed": min(self.drawn, self.cfg.max_examples),
            "extra": f"+{self.shrink_runs} shrinking" if self.shrink_runs else "",
            "found": f"[red]{self.failures} failure(s)[/]" if self.failures else ""}
        if steps is not None:
            fields["steps"] = steps
        # A new phase is drawn at once, not at the next tick of the bar's timer: a phase
        # shorter than a tick (two quick covering examples between a confirmation and the
        # end) is still said, on every machine (tests/integration/test_progress_terminal.py).
        self.bar.update(self.task, refresh=description != self.phase and self.started,
                        **fields)
        self.phase = description
        if not self.started:
            self.started = True
            self.bar.start()  # its first frame is this one, not "starting"


def replay_args(cassette: Path, *, profile: str | None, command: Sequence[str],
                sandbox_fs: bool = False, sandbox_net: bool = False) -> str:
    """What follows ``acp-fuzz replay`` to run a finding's cassette again the way it was
    found: the agent as the user named it (the profile, and the command run the profile's
    way when one was given after ``--``), in the same sandbox. Options go before the
    cassette: what follows ``--`` is the agent's."""
    words = ["--sandbox-fs"] * sandbox_fs + ["--sandbox-net"] * sandbox_net
    if profile:
        words.append(f"--profile {shlex.quote(profile)}")
    words.append(shlex.quote(str(cassette)))
    if command:
        words.append(f"-- {shlex.join(command)}")
    return " ".join(words)


def _fail_with_diagnosis(e: HarnessError) -> NoReturn:
    """The one-line error (stderr), then, for a calibration that failed on a prompt turn,
    what the gateway saw and what to do (stdout; escaped line by line), and exit 2."""
    from acp_fuzz.engine.campaign.diagnosis import CalibrationError

    if not isinstance(e, CalibrationError):
        fail(str(e))
    error(str(e))
    for line in e.diagnosis.lines():
        out.print(line, markup=False)
    raise typer.Exit(2)


def _check_oracles(ids: Sequence[str], option: str = "--exclude-oracle") -> tuple[str, ...]:
    from acp_fuzz.core.findings import CATALOG

    for oracle in ids:
        if oracle not in CATALOG:
            fail(f"{option}: unknown oracle {oracle!r} (see docs/oracles.md; known: "
                 f"{', '.join(sorted(CATALOG))})")
    return tuple(ids)


def print_agent(agent: Mapping[str, Any], init: Any) -> None:
    name = agent.get("name", "?")
    version = agent.get("version", "?")
    # Agent-controlled text: never rich markup, never a raw control character.
    out.print(Text.assemble(("agent", "bold"), f": {terminal(name)} {terminal(version)}"))
    if answered(init) >= 2:
        caps = init.get("capabilities") if isinstance(init, Mapping) else None
        sess = caps.get("session") if isinstance(caps, Mapping) else None
        out.print(terminal("  protocol: ACP v2  capabilities.session: " + (
            ", ".join(map(str, sess)) if isinstance(sess, Mapping) else "-")), markup=False)
    else:
        caps = init.get("agentCapabilities", {}) if isinstance(init, Mapping) else {}
        sess = caps.get("sessionCapabilities", {}) if isinstance(caps, Mapping) else {}
        load = caps.get("loadSession", False) if isinstance(caps, Mapping) else False
        out.print(terminal(f"  loadSession: {load}  sessionCapabilities: "
                           f"{', '.join(map(str, sess)) if isinstance(sess, Mapping) else '-'}"),
                  markup=False)
    sp = sess.get("systemPrompt") if isinstance(sess, Mapping) else None
    out.print(terminal("  systemPrompt: "
                       f"{json.dumps(sp, default=repr) if sp is not None else 'not advertised'}"),
              markup=False)


def _print_result(result: CampaignResult, elapsed: float,
                  again: Callable[[Path], str] = str) -> None:
    from acp_fuzz.reporting.text import campaign_lines

    mr = result.model_requests
    if mr:
        # What each kind was judged by: a turn by every oracle, the others for leaks only.
        out.print(f"model requests: {mr.get('turn', 0)} turn (tied to a session, judged by "
                  f"every oracle), {mr.get('side', 0)} side, {mr.get('untied', 0)} untied "
                  "(judged for leaks only)"
                  + (f", {mr['refused']} refused (without the gateway token: another process)"
                     if mr.get("refused") else ""), markup=False)
    print_lines(campaign_lines(result, again))


def _print_summary(result: CampaignResult, elapsed: float) -> None:
    """The closing line (:func:`acp_fuzz.reporting.text.summary_line`), last on stdout."""
    from acp_fuzz.reporting.text import summary_line

    line = summary_line(result, elapsed)
    out.print(Text(line.text, style=line.style))
