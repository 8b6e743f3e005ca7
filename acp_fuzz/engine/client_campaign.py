"""``acp-fuzz client``: fuzz an ACP client with drawn agent capability sets (engine).

One example is one :class:`~acp_fuzz.core.capability_sets.CapabilitySet`: a fresh sandbox
(client ``HOME``, a project folder as its working directory, the stand-in's state), then each
step of the :class:`~acp_fuzz.core.scenarios.Scenario` in order: the client is started once
per step with ``$ACP_FUZZ_AGENT`` set to the stand-in's command line (and any argument that is
exactly ``{agent}`` replaced by it), and waited for (``Scenario.timeout`` seconds a step, then
its process group is killed). The stand-in (:mod:`acp_fuzz.engine.stand_in`) logs every frame;
after each step the new frames become ``acp`` events of one history, connection by
connection, between a ``step`` event and the client's ``process`` events, and
:func:`acp_fuzz.core.client_oracles.judge_client` judges the whole history.

The search (:func:`run_client_campaign`) is Hypothesis over capability sets: a failing
example (a MUST or SHOULD finding of an oracle not yet reported) is shrunk by Hypothesis to
the smallest capability set that still shows it, re-run ``confirm_runs`` times on fresh
sandboxes (``FAILED`` when it reproduced each time, else ``FLAKY``), and written as a
cassette; then a new round looks for the next oracle, until ``max_examples`` capability sets
were tried, ``max_failures`` failures were reported or nothing new fails. Runs are cached by
capability set within a campaign (a later round, or the shrinker, asking for a set that ran
already reuses its run), so confirmation is what sees flakiness.

:func:`replay_client` runs a cassette's capability set and scenario again (``acp-fuzz replay
--client``): ``FIXED`` when no recorded oracle fails any more.

With ``sandbox_fs`` (``--sandbox-fs``) each step's client runs under bubblewrap
(:func:`acp_fuzz.engine.sandbox.agent_command`): it sees the example's sandbox (its HOME, its
project folder and the stand-in's folder, writable), the system folders and what it needs to
run (read-only), and none of the user's files; the stand-in it starts runs inside the same
confinement (its interpreter and the acp_fuzz package are among what stays readable). The
client's ``spawn`` event records how it was confined (``"sandbox": "bwrap pid+fs"``), as an
agent's does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.cassette import Cassette, Header, write_cassette_bounded
from acp_fuzz.core.client_oracles import ClientVerdict, judge_client
from acp_fuzz.core.errors import HarnessError, SandboxError
from acp_fuzz.core.findings import Finding, is_failure, is_reported
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.scenarios import ClientRunSettings, Scenario, Step
from acp_fuzz.core.scrub import Scrubber, env_secrets, portable, portable_command
from acp_fuzz.engine import interrupt
from acp_fuzz.engine.sandbox import Sandbox
from acp_fuzz.engine.sandbox import agent_command as confined
from acp_fuzz.engine.transport import _LIVE_GROUPS, _LIVE_LOCK

__all__ = ["CASSETTE_KIND", "ClientCampaignEvent", "ClientCampaignResult", "ClientReplayResult",
           "ClientReport", "ClientRun", "ClientSettings", "Confirming", "ExampleRan",
           "FailureFound", "agent_command", "capability_sets", "client_info", "replay_client",
           "replay_command",
           "run_client_campaign", "run_scenario"]

#: ``Header.kind`` of a client finding cassette.
CASSETTE_KIND = "client-finding"
#: Bounds on what one connection's frames may hold in a history (a client that floods).
MAX_FRAMES_PER_CONNECTION = 20_000
MAX_LOG_BYTES = 64 * 1024 * 1024
#: How much of the client's stdout and stderr each step keeps.
OUTPUT_TAIL = 8 * 1024


def agent_command(run_dir: str) -> list[str]:
    """The stand-in's command line for one example's state folder."""
    return [sys.executable, "-m", "acp_fuzz.engine.stand_in", run_dir]


# -- one example -------------------------------------------------------------------------------


@dataclass
class ClientRun:
    """One example: its capability set, the recorded history and the verdict."""

    caps: CapabilitySet
    events: list[Event]
    verdict: ClientVerdict
    connections: int
    returncodes: list[int | None]
    timeouts: int

    @property
    def findings(self) -> list[Finding]:
        return self.verdict.findings

    @property
    def initialize(self) -> Any:
        init = self.verdict.initialize
        return init[min(init)] if init else None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - OUTPUT_TAIL))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text if size <= OUTPUT_TAIL else "..." + text


class _Logs:
    """Reads the stand-in logs of one example incrementally: the frames of each connection
    since the last read, as history events."""

    def __init__(self, run_dir: str, history: History) -> None:
        self.run_dir = run_dir
        self.history = history
        self.offsets: dict[int, int] = {}
        self.frames: Counter[int] = Counter()
        self.pids: dict[int, int] = {}
        self.capped: set[int] = set()

    def connections(self) -> list[int]:
        out = []
        for name in os.listdir(self.run_dir):
            if name.startswith("conn-") and name.endswith(".jsonl"):
                with contextlib.suppress(ValueError):
                    out.append(int(name[5:-6]))
        return sorted(out)

    def collect(self) -> None:
        for n in self.connections():
            path = os.path.join(self.run_dir, f"conn-{n}.jsonl")
            start = self.offsets.get(n, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read(max(0, MAX_LOG_BYTES - start))
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # complete lines only: the stand-in may be writing
            self.offsets[n] = start + end
            for line in data[:end].splitlines():
                self.record(n, line)

    def record(self, n: int, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if not isinstance(rec, dict):
            return
        if "hello" in rec:
            hello = rec["hello"] if isinstance(rec["hello"], dict) else {}
            pid = hello.get("pid")
            if isinstance(pid, int):
                self.pids[n] = pid
            argv = hello.get("argv")
            self.history.append("process", {
                "what": "spawn", "pid": pid if isinstance(pid, int) else None,
                "argv": [str(a) for a in argv] if isinstance(argv, list) else [],
                "generation": n, "role": "stand-in"})
        elif "bye" in rec:
            bye = rec["bye"] if isinstance(rec["bye"], dict) else {}
            self.history.append("process", {"what": "exit", "pid": self.pids.get(n),
                                            "generation": n, "role": "stand-in",
                                            "reason": str(bye.get("reason", "eof"))})
        elif rec.get("dir") in ("send", "recv"):
            self.frames[n] += 1
            if self.frames[n] > MAX_FRAMES_PER_CONNECTION:
                if n not in self.capped:
                    self.capped.add(n)
                    self.history.append("process", {"what": "frames-capped", "generation": n,
                                                    "role": "stand-in"})
                return
            data: dict[str, Any] = {"dir": rec["dir"], "msg": rec.get("msg"), "conn": n}
            for key in ("raw", "error"):
                if isinstance(rec.get(key), str):
                    data[key] = rec[key]
            self.history.append("acp", data)

    def kill_leftovers(self) -> None:
        """SIGKILL stand-ins still alive (a client that left its agent running), checking
        that each pid is still one of ours."""
        for pid in self.pids.values():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if self.run_dir.encode() in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def _kill_strays(run_dir: str) -> int:
    """SIGKILL every process that carries this example's stand-in folder in its command line
    or its environment (``$ACP_FUZZ_AGENT``): what a client left running in a session of
    its own (acpx's queue owner calls ``setsid`` and outlives its process group). Returns
    how many were killed."""
    needle = run_dir.encode()
    me = os.getpid()
    killed = 0
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if pid == me:
            continue
        found = False
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if needle in f.read():
                        found = True
                        break
            except OSError:
                continue
        if found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with _LIVE_LOCK:
        _LIVE_GROUPS.discard(pgid)


def _confine(argv: list[str], sb: Sandbox, cwd: str, env: dict[str, str]
             ) -> tuple[list[str], str]:
    """``argv`` under the file-system sandbox, and how it is confined. bubblewrap would
    report a missing client only as its own exit status 1: keep the one-line error an
    unconfined client gets."""
    import shutil

    exe = argv[0]
    found = shutil.which(exe, path=env.get("PATH")) if os.sep not in exe else exe
    if found is None or not os.path.exists(found):
        raise HarnessError(f"cannot start the client {exe!r}: not found "
                           f"(PATH={env.get('PATH', '')!r})")
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise HarnessError(f"cannot start the client {exe!r}: not executable")
    try:
        return confined(argv, root=sb.root, cwd=cwd, env=env, pid=False, fs=True)
    except SandboxError as e:
        raise HarnessError(str(e)) from None


def run_scenario(scenario: Scenario, caps: CapabilitySet, *,
                 pass_env: Sequence[str] = (), sandbox_fs: bool = False) -> ClientRun:
    """Run one example: every step of ``scenario`` against a stand-in advertising ``caps``;
    ``sandbox_fs`` confines the client (and so the stand-in) to the example's sandbox (see
    the module docstring).

    Raises :class:`HarnessError` when the client cannot be started, or when it never started
    the agent (no connection in any step)."""
    history = History()
    groups: list[int] = []
    returncodes: list[int | None] = []
    timeouts = 0
    with Sandbox() as sb:
        run_dir = os.path.join(sb.root, "stand-in")
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"capabilities": caps.to_wire()}, f)
        agent = shlex.join(agent_command(run_dir))
        env = sb.build_env({"ACP_FUZZ_AGENT": agent}, passthrough=pass_env)
        cwd = sb.new_cwd("project")
        logs = _Logs(run_dir, history)
        try:
            for i, step in enumerate(scenario.steps):
                interrupt.check()
                argv = scenario.argv(i, agent)
                history.append("step", {"index": i, "name": "client",
                                        "args": {"op": "client",
                                                 "argv": list(scenario.argv(i, "{agent}"))}})
                out_path, err_path = Path(sb.root, f"step-{i}.out"), Path(sb.root,
                                                                          f"step-{i}.err")
                command, how = _confine(argv, sb, cwd, env) if sandbox_fs else (argv, "none")
                with open(out_path, "wb") as out, open(err_path, "wb") as err:
                    try:
                        proc = subprocess.Popen(
                            command, cwd=cwd, env=env, stdout=out, stderr=err,
                            stdin=subprocess.PIPE if step.stdin is not None
                            else subprocess.DEVNULL, start_new_session=True)
                    except OSError as e:
                        raise HarnessError(f"cannot start the client {argv[0]!r}: "
                                           f"{e.strerror or e}") from None
                groups.append(proc.pid)
                with _LIVE_LOCK:
                    _LIVE_GROUPS.add(proc.pid)
                spawn: dict[str, Any] = {"what": "spawn", "pid": proc.pid,
                                         "argv": list(scenario.argv(i, "{agent}")),
                                         "generation": i, "role": "client"}
                if how != "none":
                    spawn["sandbox"] = how
                history.append("process", spawn)
                rc = _wait(proc, step.stdin, scenario.timeout)
                if rc is None:
                    timeouts += 1
                    history.append("verdict", {"step": i, "what": "client-timeout",
                                               "timeout": scenario.timeout})
                    _kill_group(proc.pid)
                    rc = proc.wait()
                returncodes.append(rc)
                logs.collect()  # the step's frames, before the client's exit
                history.append("process", {"what": "exit", "pid": proc.pid, "returncode": rc,
                                           "generation": i, "role": "client"})
                for stream, path in (("client-stdout", out_path), ("client-stderr", err_path)):
                    text = _tail(path)
                    if text:
                        history.append("stderr", {"text": text, "generation": i,
                                                  "stream": stream})
        finally:
            for pgid in groups:
                _kill_group(pgid)
            logs.kill_leftovers()
            for _ in range(3):  # what a stray started while it was being killed, too
                if not _kill_strays(run_dir):
                    break
        logs.collect()
        connections = len(logs.connections())
        if connections == 0:
            said = " ".join(_tail(Path(sb.root, f"step-{len(returncodes) - 1}.err")).split())
            raise HarnessError(
                "the client never started the agent: put {agent} among its arguments, or "
                "make it run the command in $ACP_FUZZ_AGENT"
                + (f" (exit status {returncodes[-1]}"
                   + (f", killed after the step timeout of {scenario.timeout:g}s"
                      if timeouts else "")
                   + f"; its stderr: {said[-300:] or 'nothing'})" if returncodes else ""))
    events = history.snapshot()
    return ClientRun(caps, events, judge_client(events), connections, returncodes, timeouts)


def _wait(proc: subprocess.Popen[bytes], stdin: str | None, timeout: float) -> int | None:
    """Feed ``stdin`` and wait for the client; ``None`` when it outlived ``timeout``."""
    if proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write((stdin or "").encode("utf-8"))
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.close()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def client_info(events: Sequence[Event]) -> Any:
    """The ``clientInfo`` (v2: ``info``) of the first ``initialize`` the client sent."""
    for ev in events:
        msg = ev.data.get("msg") if ev.kind == "acp" and ev.data.get("dir") == "send" else None
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            params = msg.get("params")
            if isinstance(params, dict):
                return params.get("clientInfo") or params.get("info")
            return None
    return None


# -- the search --------------------------------------------------------------------------------


def capability_sets() -> Any:
    """The Hypothesis strategy of capability sets: each flag shrinks to "not advertised",
    the version to 1; ``override`` is drawn only with ``systemPrompt``. The flags v2 fixes
    (load, resume, close, list) are drawn under v2 too, and dropped: Hypothesis prefers the
    shorter of two choice sequences, so a v2 set drawn with fewer choices would count as
    smaller than the same set in v1, and the version would never shrink."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Callable[[Any], Any]) -> CapabilitySet:
        protocol = d(st.sampled_from((1, 2)))
        system_prompt = d(st.booleans())
        override = d(st.booleans()) if system_prompt else False
        fork = d(st.booleans())
        load, resume, close, lst = (d(st.booleans()) for _ in range(4))
        if protocol >= 2:
            return CapabilitySet(protocol, system_prompt, override, fork=fork)
        return CapabilitySet(protocol, system_prompt, override, load, resume, fork, close, lst)

    return draw()


@dataclass(frozen=True)
class ClientSettings:
    max_examples: int = 50
    seed: int = 0
    strict: bool = False
    cassette_dir: Path = Path("cassettes")
    confirm_runs: int = 3
    max_failures: int = 10
    pass_env: tuple[str, ...] = ()
    exclude_oracles: tuple[str, ...] = ()
    #: The options of each report's replay command, before the cassette: the scenario as
    #: given and the sandbox (:func:`replay_command`).
    replay_hint: str = ""
    #: Confine the client to each example's sandbox (``--sandbox-fs``; needs bubblewrap).
    sandbox_fs: bool = False
    #: Write cassettes without this machine's paths (``--portable``, as ``target``'s:
    #: :func:`acp_fuzz.core.scrub.portable`), the recorded scenario's commands included.
    portable: bool = False


@dataclass
class ClientReport:
    """One distinct failure: its oracles, the findings of its minimal example, the smallest
    capability set that showed it, how often it reproduced and its cassette."""

    oracles: tuple[str, ...]
    findings: list[Finding]
    caps: CapabilitySet
    status: str  # FAILED | FLAKY | UNCONFIRMED (interrupted before confirmation)
    runs: int
    reproduced: int
    cassette: Path | None = None

    @property
    def rate(self) -> str:
        return f"{self.reproduced}/{self.runs}"


@dataclass
class ClientCampaignResult:
    settings: ClientSettings
    scenario: Scenario
    examples_run: int = 0
    runs: int = 0
    reports: list[ClientReport] = field(default_factory=list)
    info: list[Finding] = field(default_factory=list)
    judged: Counter[tuple[str, str]] = field(default_factory=Counter)
    timeouts: int = 0
    interrupted: bool = False
    #: The stand-in's first ``initialize`` answer, and the client's ``clientInfo`` (v2:
    #: ``info``) from its first ``initialize`` request.
    initialize: Any = None
    client_info: Any = None

    def failing(self) -> bool:
        return any(is_failure(f, strict=self.settings.strict)
                   for r in self.reports for f in r.findings)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failing() else 0


@dataclass(frozen=True)
class ExampleRan:
    examples: int
    caps: CapabilitySet
    failing: bool


@dataclass(frozen=True)
class FailureFound:
    oracles: tuple[str, ...]
    caps: CapabilitySet


@dataclass(frozen=True)
class Confirming:
    oracles: tuple[str, ...]
    caps: CapabilitySet


ClientCampaignEvent = ExampleRan | FailureFound | Confirming


class _ClientBug(Exception):
    """Raised inside a Hypothesis example that shows an oracle not yet reported."""


@dataclass
class _Search:
    scenario: Scenario
    cfg: ClientSettings
    result: ClientCampaignResult
    on_event: Callable[[ClientCampaignEvent], None]
    cache: dict[CapabilitySet, ClientRun] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    info_seen: set[str] = field(default_factory=set)
    harness_error: HarnessError | None = None
    #: The sets this round ran (or took from the cache) before its first failure.
    seen: set[CapabilitySet] = field(default_factory=set)
    failure: tuple[CapabilitySet, ClientRun, tuple[str, ...]] | None = None
    generated: int = 0
    budget: int = 0

    def failing(self, run: ClientRun) -> tuple[str, ...]:
        """The oracles not yet reported that fail ``run`` (MUST, SHOULD), MUST ones first."""
        skip = {*self.known, *self.cfg.exclude_oracles}
        worst: dict[str, int] = {}
        for f in run.findings:
            if is_reported(f.severity) and f.oracle not in skip:
                rank = 0 if f.severity == "MUST" else 1
                worst[f.oracle] = min(rank, worst.get(f.oracle, rank))
        return tuple(sorted(worst, key=lambda o: (worst[o], o)))

    def run(self, caps: CapabilitySet) -> ClientRun:
        cached = self.cache.get(caps)
        if cached is not None:
            return cached
        run = run_scenario(self.scenario, caps, pass_env=self.cfg.pass_env,
                           sandbox_fs=self.cfg.sandbox_fs)
        self.cache[caps] = run
        self.result.runs += 1
        self.result.timeouts += run.timeouts
        self.result.judged.update(run.verdict.judged)
        if self.result.initialize is None:
            self.result.initialize = run.initialize
        if self.result.client_info is None:
            self.result.client_info = client_info(run.events)
        for f in run.findings:
            if f.severity == "info" and f.oracle not in self.info_seen \
                    and f.oracle not in self.cfg.exclude_oracles:
                self.info_seen.add(f.oracle)
                self.result.info.append(f)
        return run

    def example(self, caps: CapabilitySet) -> None:
        if self.harness_error is not None:
            raise self.harness_error
        if self.failure is None:
            if caps in self.seen:
                from hypothesis import reject

                reject()  # another draw of a set this round ran: not a new example
            self.seen.add(caps)
        fresh = caps not in self.cache
        if fresh and self.failure is None and self.generated >= self.budget:
            from hypothesis import reject

            reject()  # this round's budget of new sets is spent
        try:
            run = self.run(caps)
        except HarnessError as e:
            self.harness_error = e
            raise
        oracles = self.failing(run)
        if self.failure is None and fresh:
            self.generated += 1
            self.result.examples_run += 1
            self.on_event(ExampleRan(self.result.examples_run, caps, bool(oracles)))
        if oracles:
            if self.failure is None:
                self.on_event(FailureFound(oracles, caps))
            self.failure = (caps, run, oracles)
            raise _ClientBug(", ".join(oracles))

    def round(self, seed: int, budget: int) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed

        # Sets an earlier round ran come back from the cache and count as Hypothesis
        # examples: allow for them, and count the budget in new sets (``self.generated``).
        @hypothesis_seed(seed)
        @settings(max_examples=budget + len(self.cache), database=None, deadline=None,
                  derandomize=False, phases=(Phase.generate, Phase.shrink),
                  report_multiple_bugs=False,
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                  print_blob=False)
        @given(capability_sets())
        def example(caps: CapabilitySet) -> None:
            self.example(caps)

        self.failure, self.generated, self.seen, self.budget = None, 0, set(), budget
        example()


def run_client_campaign(scenario: Scenario, cfg: ClientSettings,
                        on_event: Callable[[ClientCampaignEvent], None] | None = None
                        ) -> ClientCampaignResult:
    """Search, shrink, confirm and record every distinct client failure (see the module
    docstring). Raises :class:`HarnessError` when the client cannot be run at all."""
    scenario.check()
    result = ClientCampaignResult(cfg, scenario)
    search = _Search(scenario, cfg, result, on_event or (lambda ev: None))
    budget, n = cfg.max_examples, 0
    try:
        while budget > 0 and len(result.reports) < cfg.max_failures:
            with contextlib.suppress(_ClientBug):
                search.round(cfg.seed + n, budget)
            budget -= search.generated
            n += 1
            if search.failure is None:
                if search.generated == 0:
                    break  # nothing new to try: every set ran already
                continue  # a round that met sets of earlier rounds: on with what is left
            caps, run, oracles = search.failure
            search.known.update(oracles)
            search.failure = None
            result.reports.append(_confirm(search, caps, run, oracles))
    except KeyboardInterrupt:
        result.interrupted = True
        if search.failure is not None:
            caps, run, oracles = search.failure
            report = ClientReport(oracles, _findings_of(run, oracles), caps, "UNCONFIRMED",
                                  0, 0)
            report.cassette = _write(search, report, run)
            result.reports.append(report)
    return result


def _findings_of(run: ClientRun, oracles: Sequence[str]) -> list[Finding]:
    return [f for f in run.findings if f.oracle in oracles]


def _confirm(search: _Search, caps: CapabilitySet, run: ClientRun,
             oracles: tuple[str, ...]) -> ClientReport:
    cfg = search.cfg
    search.on_event(Confirming(oracles, caps))
    reproduced = 0
    for _ in range(cfg.confirm_runs):
        again = run_scenario(search.scenario, caps, pass_env=cfg.pass_env,
                             sandbox_fs=cfg.sandbox_fs)
        search.result.runs += 1
        if set(oracles) <= {f.oracle for f in again.findings}:
            reproduced += 1
    status = "FAILED" if reproduced == cfg.confirm_runs else "FLAKY"
    report = ClientReport(oracles, _findings_of(run, oracles), caps, status,
                          cfg.confirm_runs, reproduced)
    report.cassette = _write(search, report, run)
    return report


def _secrets(cfg: ClientSettings) -> Scrubber:
    return Scrubber(env_secrets({n: os.environ[n] for n in cfg.pass_env if n in os.environ},
                                cfg.pass_env))


def _write(search: _Search, report: ClientReport, run: ClientRun) -> Path | None:
    cfg = search.cfg
    try:
        cfg.cassette_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    base = f"{report.oracles[0]}-seed{cfg.seed}"
    path, k = cfg.cassette_dir / f"{base}.cassette", 1
    while path.exists():
        k += 1
        path = cfg.cassette_dir / f"{base}-{k}.cassette"
    scrub = _secrets(cfg)
    header = Header(
        target=list(search.scenario.command), kind=CASSETTE_KIND, seed=cfg.seed,
        settings=ClientRunSettings(report.caps, search.scenario, cfg.strict).to_wire(),
        initialize=run.initialize if isinstance(run.initialize, dict) else None,
        meta={"findings": [f.to_wire() for f in report.findings], "status": report.status,
              "rate": report.rate, "runs": report.runs, "reproduced": report.reproduced,
              "role": "client",
              "replay": replay_command(path, cfg.replay_hint, search.scenario.command)})
    header, events, _ = scrub.cassette(header, run.events, {})
    if cfg.portable:
        header, events = _portable(header, events)
    try:
        return write_cassette_bounded(path, header, events)
    except OSError:
        return None


def _portable(header: Header, events: list[Event]) -> tuple[Header, list[Event]]:
    """:func:`~acp_fuzz.core.scrub.portable`, and the recorded scenario's command and steps
    (in the settings and in each ``step`` event) rewritten the same way:
    ``--trust-recorded-command`` runs them, on another machine."""
    from acp_fuzz.engine.agents_cache import cache_root

    roots = [str(cache_root())]
    recorded = ClientRunSettings.from_wire(header.settings)
    scenario = recorded.scenario
    header, events = portable(header, events, roots=roots)
    for i, e in enumerate(events):
        args = e.data.get("args") if e.kind == "step" else None
        if isinstance(args, dict) and isinstance(args.get("argv"), list):
            data = {**e.data, "args": {**args, "argv": portable_command(args["argv"],
                                                                       roots=roots)}}
            events[i] = dataclasses.replace(e, data=data)
    steps = [Step(tuple(portable_command(s.args, roots=roots)), s.stdin)
             for s in scenario.steps]
    moved = dataclasses.replace(recorded, scenario=Scenario(
        tuple(portable_command(scenario.command, roots=roots)), tuple(steps), scenario.timeout))
    return dataclasses.replace(header, settings={**header.settings, **moved.to_wire()}), events


def replay_command(cassette: Path, options: str = "", command: Sequence[str] = ()) -> str:
    """The command line that replays a client cassette: ``acp-fuzz replay --client OPTIONS
    CASSETTE -- COMMAND`` (``options``, :attr:`ClientSettings.replay_hint`, go before the
    cassette: what follows it is the client's)."""
    words = ["acp-fuzz replay --client", options, shlex.quote(str(cassette))]
    if command:
        words.append(f"-- {shlex.join(command)}")
    return " ".join(w for w in words if w)


# -- replay ------------------------------------------------------------------------------------


@dataclass
class ClientReplayResult:
    verdict: str  # FIXED | FAILED | FLAKY
    recorded: tuple[str, ...]
    caps: CapabilitySet
    runs: int
    reproduced: int
    findings: list[Finding]

    @property
    def rate(self) -> str:
        return f"{self.reproduced}/{self.runs}"


def recorded_client(cassette: Cassette) -> tuple[CapabilitySet, Scenario, tuple[str, ...]]:
    """The capability set, the scenario and the failing oracles a client cassette recorded;
    :class:`HarnessError` for a cassette that is not one."""
    h = cassette.header
    if h.kind != CASSETTE_KIND:
        raise HarnessError(f"not a client cassette (kind {h.kind!r}): replay an agent "
                           "cassette without --client (`acp-fuzz replay CASSETTE -- AGENT`)")
    try:
        recorded = ClientRunSettings.from_wire(h.settings)
    except ValueError as e:  # ScenarioError is one
        raise HarnessError(f"the cassette's client settings are broken: {e}") from None
    found = h.meta.get("findings") or []
    oracles = tuple(sorted({f["oracle"] for f in found
                            if isinstance(f, dict) and isinstance(f.get("oracle"), str)
                            and is_reported(str(f.get("severity")))}))
    return recorded.capabilities, recorded.scenario, oracles


def replay_client(cassette: Cassette, scenario: Scenario, *, runs: int = 3,
                  pass_env: Sequence[str] = (), sandbox_fs: bool = False
                  ) -> ClientReplayResult:
    """Run the cassette's capability set with ``scenario`` (the user's client command and
    steps) ``runs`` times: FIXED when no recorded oracle failed in any, FAILED when they all
    did each time, else FLAKY. ``sandbox_fs`` as for :func:`run_scenario`."""
    caps, _, recorded = recorded_client(cassette)
    scenario.check()
    reproduced, findings = 0, []
    for _ in range(runs):
        run = run_scenario(scenario, caps, pass_env=pass_env, sandbox_fs=sandbox_fs)
        findings = [f for f in run.findings if is_reported(f.severity)]
        if set(recorded) <= {f.oracle for f in findings} if recorded else findings:
            reproduced += 1
    verdict = ("FIXED" if reproduced == 0 else "FAILED" if reproduced == runs else "FLAKY")
    return ClientReplayResult(verdict, recorded, caps, runs, reproduced, findings)
