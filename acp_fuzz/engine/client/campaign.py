"""``acp-fuzz client``: fuzz an ACP client with drawn agent capability sets (engine).

One example is one :class:`~acp_fuzz.core.capability_sets.CapabilitySet`: a fresh sandbox
(client ``HOME``, a project folder as its working directory, the stand-in's state), then each
step of the :class:`~acp_fuzz.core.scenarios.Scenario` in order: the client is started once
per step with ``$ACP_FUZZ_AGENT`` set to the stand-in's command line (and any argument that is
exactly ``{agent}`` replaced by it), and waited for (``Scenario.timeout`` seconds a step, then
its process group is killed). The stand-in (:mod:`acp_fuzz.engine.client.stand_in`) logs every
frame; after each step the new frames become ``acp`` events of one history, connection by
connection, between a ``step`` event and the client's ``process`` events, and
:func:`acp_fuzz.core.client_oracles.judge_client` judges the whole history.

The search (:func:`run_client_campaign`) opens with the covering sets
(:meth:`~acp_fuzz.core.capability_sets.CapabilitySet.covering`: nothing advertised, then
everything advertised and kept, in v1 and in v2, whatever the seed; a failure there is shrunk
one flag at a time), then
is Hypothesis over capability sets: a failing
example (a MUST or SHOULD finding of an oracle not yet reported) is shrunk by Hypothesis to
the smallest capability set that still shows it, re-run ``confirm_runs`` times on fresh
sandboxes (``failed`` when it reproduced each time, else ``flaky``: a
:class:`~acp_fuzz.core.findings.Status`, as an agent campaign's), and written as a
cassette; then a new round looks for the next oracle, until ``max_examples`` capability sets
were tried, ``max_failures`` failures were reported, nothing new fails or ``time_budget``
seconds have passed (a failure found by then is still shrunk and confirmed). Runs are cached by
capability set within a campaign (a later round, or the shrinker, asking for a set that ran
already reuses its run), so confirmation is what sees flakiness.

With :attr:`ClientSettings.db` (``--db``, as an agent campaign's,
:mod:`acp_fuzz.engine.campaign.database`) the search's failing sets are stored in that
example database, under the scenario's scope (:func:`client_scope`), and the next campaign
replays them first, before the covering sets (Hypothesis' reuse phase: a stored set that no
longer fails is dropped). Without one, nothing is stored and a campaign is a function of its
seed and client.

:func:`replay_client` runs a cassette's capability set and scenario again (``acp-fuzz replay
--client``): ``FIXED`` when no recorded oracle fails any more.

Each step's client runs in a PID namespace of its own where one can be made, as an agent does
(:func:`acp_fuzz.engine.process.sandbox.agent_command`): whatever it leaves running, a ``setsid``
daemon included, dies with it. Where none can be made, what the example's clients left
running is killed at its end, found by :data:`RUN_VARIABLE` in its environment. The client
cannot reach the files the harness reads and writes for it: its stdout and stderr go to
nameless files outside the sandbox, and the stand-in logs are read as regular files only,
never through a link (``docs/security.md``, "The client under test").

With ``sandbox_fs`` (``--sandbox-fs``) each step's client runs under bubblewrap
(:func:`acp_fuzz.engine.process.sandbox.agent_command`): it sees the example's sandbox (its HOME,
its project folder and the stand-in's folder, writable), the system folders and what it needs to
run (read-only), and none of the user's files; the stand-in it starts runs inside the same
confinement (its interpreter and the acp_fuzz package are among what stays readable). The
client's ``spawn`` event records how it was confined (``"sandbox": "bwrap pid+fs"``), as an
agent's does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import secrets
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.cassette import Cassette, Header, write_cassette_bounded
from acp_fuzz.core.client_oracles import ClientVerdict, judge_client
from acp_fuzz.core.errors import HarnessError, SandboxError
from acp_fuzz.core.events import Confirming, ExampleDone, FailureFound
from acp_fuzz.core.findings import (
    CLIENT_CATALOG,
    Finding,
    Severity,
    Status,
    is_failure,
    is_reported,
)
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.reports import Report
from acp_fuzz.core.scenarios import AGENT_PLACEHOLDER, ClientRunSettings, Scenario, Step
from acp_fuzz.core.scrub import Scrubber, env_secrets, portable, portable_command
from acp_fuzz.engine.campaign import interrupt
from acp_fuzz.engine.campaign.literals import no_source_literals
from acp_fuzz.engine.campaign.plugins import not_loaded
from acp_fuzz.engine.process.sandbox import Sandbox
from acp_fuzz.engine.process.sandbox import agent_command as confined
from acp_fuzz.engine.process.transport import _LIVE_GROUPS, _LIVE_LOCK, line_weight

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

__all__ = ["CASSETTE_KIND", "ClientCampaignEvent", "ClientCampaignResult", "ClientReplayResult",
           "ClientReport", "ClientRun", "ClientSettings", "agent_command", "capability_sets",
           "client_info", "client_scope", "covering_share", "replay_client", "replay_command",
           "run_client_campaign", "run_scenario"]

#: ``Header.kind`` of a client finding cassette.
CASSETTE_KIND = "client-finding"
#: Bounds on what one connection's frames may hold in a history (a client that floods):
#: frames kept, and bytes of its log read.
MAX_FRAMES_PER_CONNECTION = 20_000
MAX_LOG_BYTES = 64 * 1024 * 1024
#: Bounds on one example in all, whatever the number of connections: frames kept, and the
#: log lines read, weighed by what they cost parsed (``transport.line_weight``).
MAX_RUN_FRAMES = 40_000
MAX_RUN_LOG_BYTES = 64 * 1024 * 1024
#: The variable that tells this example's processes from anyone else's: set to a random word
#: in each client's environment, inherited by what it starts (:func:`_kill_strays`).
RUN_VARIABLE = "ACP_FUZZ_CLIENT_RUN"
#: The longest step timeout a client cassette may choose, in seconds (``--timeout`` may
#: give more).
MAX_RECORDED_TIMEOUT = 600.0
#: How much of the client's stdout and stderr each step keeps.
OUTPUT_TAIL = 8 * 1024
#: The ACP versions a drawn capability set may speak (:func:`capability_sets`).
PROTOCOLS = (1, 2)


def agent_command(run_dir: str) -> list[str]:
    """The stand-in's command line for one example's state folder."""
    return [sys.executable, "-m", "acp_fuzz.engine.client.stand_in", run_dir]


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


def _tail(f: IO[bytes]) -> str:
    """The end of one step's stdout or stderr, read through the harness's own descriptor."""
    try:
        size = os.fstat(f.fileno()).st_size
        data = os.pread(f.fileno(), OUTPUT_TAIL, max(0, size - OUTPUT_TAIL))
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text if size <= OUTPUT_TAIL else "..." + text


#: How the harness opens a stand-in log, which the client can replace: never through a
#: symlink, never as a controlling terminal, never waiting on a FIFO's writer; what it opens
#: is then read only if it is a regular file.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC


class _Logs:
    """Reads the stand-in logs of one example incrementally: the frames of each connection
    since the last read, as history events, within the bounds per connection and per run."""

    def __init__(self, run_dir: str, history: History) -> None:
        self.run_dir = run_dir
        self.history = history
        # The client may write in the folder (its stand-ins log there) and swap it for a
        # link: it is held by the descriptor opened before any client ran.
        self.dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                              | os.O_CLOEXEC)
        self.offsets: dict[int, int] = {}
        self.frames: Counter[int] = Counter()
        self.kept_frames = 0
        self.kept_bytes = 0
        self.pids: dict[int, int] = {}
        self.capped: set[tuple[str, int]] = set()
        self.refused: set[int] = set()

    def close(self) -> None:
        os.close(self.dir_fd)

    def connections(self) -> list[int]:
        """The connections that logged: ``conn-N.jsonl`` regular files (a link or a FIFO
        planted among them is no connection)."""
        return sorted(self.offsets)

    def _numbers(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir_fd):
            if name.startswith("conn-") and name.endswith(".jsonl"):
                with contextlib.suppress(ValueError):
                    out.append(int(name[5:-6]))
        return sorted(out)

    def _read(self, n: int) -> bytes | None:
        """What connection ``n`` logged since the last read, up to its bound and the run's;
        ``None`` when its log is not a regular file (recorded once, as ``log-refused``)."""
        try:
            fd = os.open(f"conn-{n}.jsonl", _READ_FLAGS, dir_fd=self.dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if n not in self.refused:
                    self.refused.add(n)
                    self.history.append("process", {"what": "log-refused", "generation": n,
                                                    "role": "stand-in"})
                return None
            start = self.offsets.setdefault(n, 0)
            size = min(st.st_size, MAX_LOG_BYTES) - start
            return os.pread(fd, max(0, min(size, MAX_RUN_LOG_BYTES - self.kept_bytes)), start)
        finally:
            os.close(fd)

    def collect(self) -> None:
        for n in self._numbers():
            data = self._read(n)
            if not data:
                continue
            end = data.rfind(b"\n") + 1  # complete lines only: the stand-in may be writing
            self.offsets[n] += end
            for line in data[:end].splitlines():
                self.record(n, line)

    def cap(self, scope: str, n: int) -> None:
        """Record once that ``scope`` (``connection`` ``n``, or the ``run``) hit its bound."""
        key = (scope, n if scope == "connection" else -1)
        if key not in self.capped:
            self.capped.add(key)
            self.history.append("process", {"what": "frames-capped", "generation": n,
                                            "role": "stand-in", "scope": scope})

    def record(self, n: int, line: bytes) -> None:
        weight = line_weight(line)  # what it costs parsed, not its length
        if self.kept_bytes + weight > MAX_RUN_LOG_BYTES:
            self.cap("run", n)
            self.kept_bytes = MAX_RUN_LOG_BYTES  # read nothing more
            return
        self.kept_bytes += weight
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
                return self.cap("connection", n)
            if self.kept_frames >= MAX_RUN_FRAMES:
                return self.cap("run", n)
            self.kept_frames += 1
            data: dict[str, Any] = {"dir": rec["dir"], "msg": rec.get("msg"), "conn": n}
            for key in ("raw", "error"):
                if isinstance(rec.get(key), str):
                    data[key] = rec[key]
            self.history.append("acp", data)
        return None

    def kill_leftovers(self, since: int) -> None:
        """SIGKILL stand-ins still alive (a client that left its agent running, with an
        environment of its own), checking that each pid, which the log says, is still one
        of this example's: started since its first client, the folder on its command line."""
        for pid in self.pids.values():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if self.run_dir.encode() in cmdline and _started_since(pid, since):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat``, field 22)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            line = f.read()
    except OSError:
        return None
    fields = line[line.rfind(b")") + 2:].split()  # the name, in parentheses, may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _started_since(pid: int, since: int) -> bool:
    start = _start_ticks(pid)
    return start is not None and start >= since


def _kill_strays(token: str, since: int) -> int:
    """SIGKILL what this example's clients left running where no PID namespace took it along
    (acpx's queue owner calls ``setsid`` and outlives its process group): each process
    started since the example's first client whose environment has ``RUN_VARIABLE`` set to
    this example's ``token``, a random word only the clients, and what they start, inherit.
    A process of anyone else's is left alone, even one that has the example's folder in its
    environment. Returns how many were killed."""
    entry = f"{RUN_VARIABLE}={token}".encode()
    me = os.getpid()
    killed = 0
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if pid != me and entry in environ.split(b"\0") and _started_since(pid, since):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with _LIVE_LOCK:
        _LIVE_GROUPS.discard(pgid)


def _confine(argv: list[str], sb: Sandbox, cwd: str, env: dict[str, str], *, fs: bool
             ) -> tuple[list[str], str]:
    """``argv`` in a PID namespace of its own where one can be made (as an agent runs), and
    under the file-system sandbox with ``fs``; and how it is confined. bubblewrap or
    unshare would report a missing client only as their own exit status 1: keep the
    one-line error an unconfined client gets."""
    import shutil

    exe = argv[0]
    found = shutil.which(exe, path=env.get("PATH")) if os.sep not in exe else exe
    if found is None or not os.path.exists(found):
        raise HarnessError(f"cannot start the client {exe!r}: not found "
                           f"(PATH={env.get('PATH', '')!r})")
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise HarnessError(f"cannot start the client {exe!r}: not executable")
    try:
        return confined(argv, root=sb.root, cwd=cwd, env=env, pid=True, fs=fs)
    except SandboxError as e:
        raise HarnessError(str(e)) from None


class _Example:
    """One example under way: its sandbox and stand-in folder, the clients' environment,
    what each step left, and the history so far."""

    def __init__(self, sb: Sandbox, caps: CapabilitySet, pass_env: Sequence[str],
                 sandbox_fs: bool) -> None:
        self.sb, self.sandbox_fs = sb, sandbox_fs
        self.run_dir = os.path.join(sb.root, "stand-in")
        os.makedirs(self.run_dir)
        with open(os.path.join(self.run_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"capabilities": caps.to_wire()}, f)
        self.agent = shlex.join(agent_command(self.run_dir))
        self.token = secrets.token_hex(16)
        self.env = sb.build_env({"ACP_FUZZ_AGENT": self.agent, RUN_VARIABLE: self.token},
                                passthrough=pass_env)
        self.cwd = sb.new_cwd("project")
        self.history = History()
        self.logs = _Logs(self.run_dir, self.history)
        self.groups: list[int] = []
        self.returncodes: list[int | None] = []
        self.timeouts = 0
        self.since: int | None = None  # when the first client started
        self.said = ""  # the end of the last step's stderr

    def step(self, scenario: Scenario, i: int) -> None:
        step = scenario.steps[i]
        argv, shown = scenario.argv(i, self.agent), list(scenario.argv(i, "{agent}"))
        self.history.append("step", {"index": i, "name": "client",
                                     "args": {"op": "client", "argv": shown}})
        command, how = _confine(argv, self.sb, self.cwd, self.env, fs=self.sandbox_fs)
        # Nameless files, outside the sandbox: no name for the client to plant a link or a
        # FIFO at, and read back through the descriptor the client's output went to.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    command, cwd=self.cwd, env=self.env, stdout=out, stderr=err,
                    stdin=subprocess.PIPE if step.stdin is not None else subprocess.DEVNULL,
                    start_new_session=True)
            except OSError as e:
                raise HarnessError(f"cannot start the client {argv[0]!r}: "
                                   f"{e.strerror or e}") from None
            self.groups.append(proc.pid)
            with _LIVE_LOCK:
                _LIVE_GROUPS.add(proc.pid)
            if self.since is None:
                self.since = _start_ticks(proc.pid)
            spawn: dict[str, Any] = {"what": "spawn", "pid": proc.pid, "argv": shown,
                                     "generation": i, "role": "client"}
            if how != "none":
                spawn["sandbox"] = how
            self.history.append("process", spawn)
            rc = _wait(proc, step.stdin, scenario.timeout)
            if rc is None:
                self.timeouts += 1
                self.history.append("verdict", {"step": i, "what": "client-timeout",
                                                "timeout": scenario.timeout})
                _kill_group(proc.pid)
                rc = proc.wait()
            self.returncodes.append(rc)
            self.logs.collect()  # the step's frames, before the client's exit
            self.history.append("process", {"what": "exit", "pid": proc.pid,
                                            "returncode": rc, "generation": i,
                                            "role": "client"})
            for stream, f in (("client-stdout", out), ("client-stderr", err)):
                text = _tail(f)
                if text:
                    self.history.append("stderr", {"text": text, "generation": i,
                                                   "stream": stream})
            self.said = _tail(err)

    def stop(self) -> None:
        """Kill whatever the clients left running (see :func:`_kill_strays`)."""
        for pgid in self.groups:
            _kill_group(pgid)
        if self.since is not None:
            self.logs.kill_leftovers(self.since)
            for _ in range(3):  # what a stray started while it was being killed, too
                if not _kill_strays(self.token, self.since):
                    break
        self.logs.collect()
        self.logs.close()


def run_scenario(scenario: Scenario, caps: CapabilitySet, *,
                 pass_env: Sequence[str] = (), sandbox_fs: bool = False) -> ClientRun:
    """Run one example: every step of ``scenario`` against a stand-in advertising ``caps``;
    each step's client runs in a PID namespace of its own where one can be made (whatever it
    leaves running dies with it), and ``sandbox_fs`` confines it (and so the stand-in) to
    the example's sandbox (see the module docstring).

    Raises :class:`HarnessError` when the client cannot be started, or when it never started
    the agent (no connection in any step)."""
    with Sandbox() as sb:
        ex = _Example(sb, caps, pass_env, sandbox_fs)
        try:
            for i in range(len(scenario.steps)):
                interrupt.check()
                ex.step(scenario, i)
        finally:
            ex.stop()
    connections = len(ex.logs.connections())
    if connections == 0:
        said, rcs = " ".join(ex.said.split()), ex.returncodes
        raise HarnessError(
            "the client never started the agent: put {agent} among its arguments, or "
            "make it run the command in $ACP_FUZZ_AGENT"
            + (f" (exit status {rcs[-1]}"
               + (f", killed after the step timeout of {scenario.timeout:g}s"
                  if ex.timeouts else "")
               + f"; its stderr: {said[-300:] or 'nothing'})" if rcs else ""))
    events = ex.history.snapshot()
    return ClientRun(caps, events, judge_client(events), connections, ex.returncodes,
                     ex.timeouts)


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
        protocol = d(st.sampled_from(PROTOCOLS))
        system_prompt = d(st.booleans())
        override = d(st.booleans()) if system_prompt else False
        fork = d(st.booleans())
        load, resume, close, lst = (d(st.booleans()) for _ in range(4))
        # How an unoffered prompt capability is spelled (null forms), and whether the next
        # connections advertise another one: drawn last, so they shrink away first, and
        # always as the same choices (see above: fewer choices would count as smaller).
        pick = d(st.integers(0, 2))
        shape = "" if override or not pick else "null" if not system_prompt \
            else ("mode-null", "override-null")[pick - 1]
        changes = d(st.booleans())
        if protocol >= 2:
            return CapabilitySet(protocol, system_prompt, override, fork=fork, shape=shape,
                                 changes=changes)
        return CapabilitySet(protocol, system_prompt, override, load, resume, fork, close, lst,
                             shape=shape, changes=changes)

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
    #: Try no new capability set after this many seconds (``--time-budget``, as
    #: :attr:`acp_fuzz.engine.campaign.search.CampaignSettings.time_budget`): a failure found
    #: by then is still shrunk, confirmed and recorded. ``None``: no limit.
    time_budget: float | None = None
    #: A Hypothesis example database (``--db``: a folder or a Redis URL, as an agent
    #: campaign's :attr:`~acp_fuzz.engine.campaign.search.CampaignSettings.database`): the
    #: failing capability sets of earlier runs of the same scenario are tried first, and
    #: this run's are stored there. ``None``: the run is a function of its seed.
    db: str | None = None
    #: ``(i, n)``: this campaign is worker ``i`` of ``n`` (``--workers``), and runs the
    #: covering sets ``i``, ``i + n``, ... of :meth:`CapabilitySet.covering`, so that the
    #: workers run each once between them (:func:`covering_share`).
    cover_share: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        if self.time_budget is not None and not self.time_budget > 0:
            raise ValueError(f"time_budget={self.time_budget} must be positive")
        i, n = self.cover_share
        if not 0 <= i < n:
            raise ValueError(f"cover_share={(i, n)} must be (i, n) with 0 <= i < n")


@dataclass(kw_only=True)
class ClientReport(Report):
    """One distinct failure of a client: the :class:`~acp_fuzz.core.reports.Report` of both
    directions, with the smallest capability set that showed it."""

    caps: CapabilitySet

    @property
    def oracles(self) -> tuple[str, ...]:
        """The failing oracles, MUST ones first, as the search found them (the first names
        the cassette)."""
        return _failing_oracles(self.findings)


def _failing_oracles(findings: Sequence[Finding], skip: Collection[str] = ()
                     ) -> tuple[str, ...]:
    """The oracles that ``findings`` fail (MUST, SHOULD), but for ``skip``: MUST ones first,
    then by name."""
    worst: dict[str, int] = {}
    for f in findings:
        if is_reported(f.severity) and f.oracle not in skip:
            rank = 0 if f.severity == Severity.MUST else 1
            worst[f.oracle] = min(rank, worst.get(f.oracle, rank))
    return tuple(sorted(worst, key=lambda o: (worst[o], o)))


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
    #: The search stopped trying new capability sets at ``settings.time_budget``.
    out_of_time: bool = False
    #: The stand-in's first ``initialize`` answer, and the client's ``clientInfo`` (v2:
    #: ``info``) from its first ``initialize`` request.
    initialize: Any = None
    client_info: Any = None

    def failing(self) -> bool:
        return any(is_failure(f, strict=self.settings.strict)
                   for r in self.reports for f in r.findings)

    def absorbed(self) -> list[Finding]:
        """None: a client failure is its own capability set, never shrunk into another one's
        (the agent side's :meth:`CampaignResult.absorbed`, so that a report reads both)."""
        return []

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failing() else 0

    @classmethod
    def merge(cls, results: Sequence[ClientCampaignResult],
              settings: ClientSettings) -> ClientCampaignResult:
        """One result from several campaigns of one client and scenario (the workers of
        ``acp-fuzz client --workers``): each field as :data:`CLIENT_MERGE` says, so a field
        added to this class must say how it merges (``tests/cover/test_client_merge.py``
        fails until it does). Each failure is reported once: a report is kept when it names
        an oracle no report kept before names, the rule by which one campaign reports a
        failure (a worker's report that another's covers keeps its cassette on disk)."""
        from acp_fuzz.engine.campaign.merging import COMMON, merge_fields

        out = cls(settings, results[0].scenario)
        merge_fields(out, results, CLIENT_MERGE, {**COMMON, **_CLIENT_MERGERS})
        return out


def _new_oracles_once(reports: Sequence[Sequence[ClientReport]]) -> list[ClientReport]:
    named: set[str] = set()
    out = []
    for rep in (r for rs in reports for r in rs):
        if not set(rep.oracles) <= named:
            named.update(rep.oracles)
            out.append(rep)
    return out


def _first_by_oracle(infos: Sequence[Sequence[Finding]]) -> list[Finding]:
    best: dict[str, Finding] = {}
    for f in (f for fs in infos for f in fs):
        best.setdefault(f.oracle, f)
    return list(best.values())


#: How each field of :class:`ClientCampaignResult` merges (:meth:`ClientCampaignResult.merge`;
#: the policies of :mod:`acp_fuzz.engine.campaign.merging`).
CLIENT_MERGE: dict[str, str] = {
    "settings": "given", "scenario": "first", "examples_run": "sum", "runs": "sum",
    "reports": "new-oracles-once", "info": "first-by-oracle", "judged": "counter",
    "timeouts": "sum", "interrupted": "any", "out_of_time": "any",
    # What the first worker that saw one saw: the same client, answered by the same stand-in.
    "initialize": "first-set", "client_info": "first-set",
}
_CLIENT_MERGERS: dict[str, Callable[[list[Any]], Any]] = {
    "new-oracles-once": _new_oracles_once, "first-by-oracle": _first_by_oracle,
    "counter": lambda xs: sum(xs, Counter()),
}


#: What a client campaign reports (:mod:`acp_fuzz.core.events`, as an agent campaign does).
ClientCampaignEvent = ExampleDone | FailureFound | Confirming


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
    #: When the search started (``time.monotonic``), for ``cfg.time_budget``.
    started: float = field(default_factory=time.monotonic)
    #: ``cfg.db`` opened and scoped to the scenario (:func:`client_scope`); ``None``: none.
    database: ExampleDatabase | None = None

    def out_of_time(self) -> bool:
        """Whether ``cfg.time_budget`` is spent (then said in the result): no new example
        runs after it, and a failure found by then is still shrunk and confirmed."""
        budget = self.cfg.time_budget
        if budget is not None and time.monotonic() - self.started >= budget:
            self.result.out_of_time = True
        return self.result.out_of_time

    def failing(self, run: ClientRun) -> tuple[str, ...]:
        """The oracles not yet reported that fail ``run`` (MUST, SHOULD), MUST ones first."""
        return _failing_oracles(run.findings, {*self.known, *self.cfg.exclude_oracles})

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
            if f.severity == Severity.INFO and f.oracle not in self.info_seen \
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
        if fresh and self.failure is None and self.out_of_time():
            return  # passes at once, so Hypothesis runs out of examples quickly
        try:
            run = self.run(caps)
        except HarnessError as e:
            self.harness_error = e
            raise
        oracles = self.failing(run)
        if self.failure is None and fresh:
            self.generated += 1
            self.result.examples_run += 1
            self.on_event(ExampleDone(self.result.examples_run, len(self.scenario.steps),
                                      bool(oracles), capability_set=caps))
        if oracles:
            if self.failure is None:
                self.on_event(FailureFound(oracles, capability_set=caps))
            self.failure = (caps, run, oracles)
            raise _ClientBug(", ".join(oracles))

    def cover(self, caps: CapabilitySet) -> tuple[CapabilitySet, ClientRun,
                                                  tuple[str, ...]] | None:
        """Run one covering set as an example; a new failure is shrunk (:meth:`shrink`) and
        returned, not raised."""
        self.failure, self.generated, self.seen, self.budget = None, 0, set(), 1
        with contextlib.suppress(_ClientBug):
            self.example(caps)
        failure, self.failure = self.failure, None
        return None if failure is None else self.shrink(*failure)

    def shrink(self, caps: CapabilitySet, run: ClientRun, oracles: tuple[str, ...]
               ) -> tuple[CapabilitySet, ClientRun, tuple[str, ...]]:
        """The smallest set, one flag at a time (:meth:`CapabilitySet.smaller`), that still
        fails an oracle not yet reported, with the oracles it fails: as Hypothesis shrinks a
        drawn set (any new failure counts). A covering set was not drawn, so it is not
        Hypothesis's to shrink, and a dozen fields need no more than this greedy walk."""
        smaller = True
        while smaller:
            smaller = False
            for candidate in caps.smaller():
                again = self.run(candidate)
                if self.failing(again):
                    caps, run, oracles, smaller = candidate, again, self.failing(again), True
                    break
        return caps, run, oracles

    def round(self, seed: int, budget: int, *, replay: bool = False) -> None:
        """One Hypothesis round, until its first new failure or ``budget`` new sets:
        drawn ones, or with ``replay`` those the database holds (Hypothesis' reuse phase),
        which a failure of an earlier run comes back from."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis.errors import Unsatisfiable

        phases = (Phase.reuse if replay else Phase.generate, Phase.shrink)

        # Sets an earlier round ran come back from the cache and count as Hypothesis
        # examples: allow for them, and count the budget in new sets (``self.generated``).
        # One function for every round, so one database key (Hypothesis derives it from
        # the function): what a search round stores, the next run's replay fetches. The
        # settings go above the seed: @seed turns the database off under it.
        @settings(max_examples=budget + len(self.cache), database=self.database,
                  deadline=None, derandomize=False, phases=phases,
                  report_multiple_bugs=False,
                  suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                  print_blob=False)
        @hypothesis_seed(seed)
        @given(capability_sets())
        def example(caps: CapabilitySet) -> None:
            self.example(caps)

        self.failure, self.generated, self.seen, self.budget = None, 0, set(), budget
        # A replay with nothing to replay (SkipTest), or whose stored examples no longer
        # fit the search (Unsatisfiable): nothing new ran.
        with no_source_literals(), contextlib.suppress(unittest.SkipTest, Unsatisfiable):
            example()  # the seed's draws, whatever modules are loaded


def run_client_campaign(scenario: Scenario, cfg: ClientSettings,
                        on_event: Callable[[ClientCampaignEvent], None] | None = None
                        ) -> ClientCampaignResult:
    """Search, shrink, confirm and record every distinct client failure (see the module
    docstring). Raises :class:`HarnessError` when the client cannot be run at all, and
    :class:`~acp_fuzz.core.errors.DatabaseError` when ``cfg.db`` cannot be opened."""
    scenario.check()
    result = ClientCampaignResult(cfg, scenario)
    search = _Search(scenario, cfg, result, on_event or (lambda ev: None),
                     database=_database(cfg, scenario))
    budget, n = cfg.max_examples, 0
    try:
        if search.database is not None and not search.out_of_time():
            # What the database holds first: the failures earlier runs found. Only here:
            # later rounds know those oracles, and a stored set that no longer fails a
            # new oracle would be deleted from the database by a replay.
            _round(search, cfg.seed, budget, replay=True)
            budget -= search.generated
        for caps in covering_share(cfg.cover_share)[:max(0, budget)]:
            if len(result.reports) >= cfg.max_failures or search.out_of_time():
                break
            budget -= 1
            failure = search.cover(caps)
            if failure is not None:
                search.known.update(failure[2])
                result.reports.append(_confirm(search, *failure))
        while budget > 0 and len(result.reports) < cfg.max_failures \
                and not search.out_of_time():
            more = _round(search, cfg.seed + n, budget)
            budget -= search.generated
            n += 1
            if not more:
                break  # nothing new to try: every set ran already
    except KeyboardInterrupt:
        result.interrupted = True
        if search.failure is not None:
            caps, run, oracles = search.failure
            report = ClientReport(status=Status.UNCONFIRMED, runs=0, reproduced=0,
                                  findings=_findings_of(run, oracles), caps=caps)
            report.cassette = _write(search, report, run)
            result.reports.append(report)
    return result


def covering_share(share: tuple[int, int]) -> tuple[CapabilitySet, ...]:
    """The covering sets (:meth:`CapabilitySet.covering`) that worker ``i`` of ``n`` runs
    (``share`` is ``(i, n)``): ``i``, ``i + n``, ... in order, so that ``n`` workers run each
    once between them."""
    i, n = share
    return CapabilitySet.covering()[i::n]


def _round(search: _Search, seed: int, budget: int, *, replay: bool = False) -> bool:
    """One round of the search (:meth:`_Search.round`), its failure confirmed and
    reported; whether the search may go on: it found a failure or ran a new set (one that
    met only sets earlier rounds ran had nothing new left to try)."""
    with contextlib.suppress(_ClientBug):
        search.round(seed, budget, replay=replay)
    if search.failure is None:
        return search.generated > 0
    caps, run, oracles = search.failure
    search.known.update(oracles)
    search.failure = None
    search.result.reports.append(_confirm(search, caps, run, oracles))
    return True


def client_scope(scenario: Scenario) -> str:
    """What keeps a client campaign's examples apart in a shared database (``--db``), as
    an agent's identity keeps an agent campaign's
    (:class:`~acp_fuzz.engine.campaign.database.AgentScoped`)."""
    # Made of: "client" (an agent's scope is NAME@VERSION|PROGRAM, and its Hypothesis key
    # another test's); the ACP versions a capability set is drawn from (what a stored
    # choice sequence means); and the scenario, step by step: the command line, with the
    # agent's left as {agent} (its folder changes with every example), and what goes on
    # stdin. Two clients, or two scenarios of one client, are two scopes.
    steps = [[scenario.argv(i, AGENT_PLACEHOLDER), step.stdin]
             for i, step in enumerate(scenario.steps)]
    return "client|" + json.dumps({"protocols": PROTOCOLS, "steps": steps})


def _database(cfg: ClientSettings, scenario: Scenario) -> ExampleDatabase | None:
    """``cfg.db`` opened and scoped to the scenario; ``None`` without one."""
    if cfg.db is None:
        return None
    from acp_fuzz.engine.campaign.database import AgentScoped, open_database

    return AgentScoped(open_database(cfg.db), client_scope(scenario))


def _findings_of(run: ClientRun, oracles: Sequence[str]) -> list[Finding]:
    return [f for f in run.findings if f.oracle in oracles]


def _confirm(search: _Search, caps: CapabilitySet, run: ClientRun,
             oracles: tuple[str, ...]) -> ClientReport:
    cfg = search.cfg
    search.on_event(Confirming(len(search.scenario.steps), oracles, capability_set=caps))
    reproduced = 0
    for _ in range(cfg.confirm_runs):
        again = run_scenario(search.scenario, caps, pass_env=cfg.pass_env,
                             sandbox_fs=cfg.sandbox_fs)
        search.result.runs += 1
        if set(oracles) <= {f.oracle for f in again.findings}:
            reproduced += 1
    status = Status.of(reproduced, cfg.confirm_runs)
    report = ClientReport(status=status, runs=cfg.confirm_runs, reproduced=reproduced,
                          findings=_findings_of(run, oracles), caps=caps)
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
    from acp_fuzz.engine.agents.cache import cache_root

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
    :class:`HarnessError` for a cassette that is not one. The scenario's step timeout, which
    whoever made the cassette chose, is at most :data:`MAX_RECORDED_TIMEOUT` seconds (a
    longer one is cut to it; not a positive finite number: :class:`HarnessError`)."""
    h = cassette.header
    if h.kind != CASSETTE_KIND:
        raise HarnessError(f"not a client cassette (kind {h.kind!r}): replay an agent "
                           "cassette without --client (`acp-fuzz replay CASSETTE -- AGENT`)")
    try:
        recorded = ClientRunSettings.from_wire(h.settings)
    except ValueError as e:  # ScenarioError is one
        raise HarnessError(f"the cassette's client settings are broken: {e}") from None
    sc = recorded.scenario
    if not math.isfinite(sc.timeout):
        raise HarnessError(f"the cassette's client settings are broken: the step timeout "
                           f"must be a finite number of seconds, not {sc.timeout}")
    if sc.timeout > MAX_RECORDED_TIMEOUT:
        recorded = dataclasses.replace(recorded, scenario=Scenario(
            sc.command, sc.steps, MAX_RECORDED_TIMEOUT))
    found = h.meta.get("findings") or []
    oracles = tuple(sorted({f["oracle"] for f in found
                            if isinstance(f, dict) and isinstance(f.get("oracle"), str)
                            and is_reported(str(f.get("severity")))}))
    missing = [o for o in oracles if o not in CLIENT_CATALOG]
    if missing:  # a user's client check whose plugin is not loaded: neither FIXED nor FAILED
        raise HarnessError(not_loaded(missing))
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
