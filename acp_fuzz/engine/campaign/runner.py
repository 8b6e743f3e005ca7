"""The runner: drive one agent through lifecycle steps and record everything (engine).

:class:`Run` is the small Python API that the tests, the fuzzer and replay share::

    from acp_fuzz.engine.campaign.runner import Run, TargetSpec

    with Run(TargetSpec.from_command(["python", "-m", "acp_fuzz.reference_agent"])) as run:
        run.initialize()
        be_terse = {"mode": "append", "content": [{"type": "text", "text": "Be terse."}]}
        run.execute({"op": "new", "session": "A", "systemPrompt": be_terse})
        run.execute({"op": "prompt", "session": "A"})
        for event, exchange in run.history.model_exchanges():
            print(exchange.texts("system"))

Every step is recorded as a ``step`` event followed by the ACP frames it caused and a
``verdict`` event with its outcome, so the oracles can judge a run from the history alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from acp_fuzz.core.calibration import CONCURRENCY_PROBE_S, ROUND_TRIP_METHOD, Learned
from acp_fuzz.core.dialects import GOOSE_METHOD, capabilities, goose_params, resolve
from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.fills import expand_value
from acp_fuzz.core.findings import Finding, is_reported
from acp_fuzz.core.history import History
from acp_fuzz.core.lifecycle import NEEDS, Lifecycle, lived
from acp_fuzz.core.ops import CARRIES_PROMPT, CREATES, RESENDS, TABLE, TURNS, Op
from acp_fuzz.core.oracles import Baseline, Evaluator
from acp_fuzz.core.payloads import OMIT, Capabilities, Classification, classify
from acp_fuzz.core.protocol import NegotiationError, initialize_params, negotiate, offer_for
from acp_fuzz.core.scrub import env_secrets
from acp_fuzz.core.steps import (
    CANCELLING,
    COMPACT_COMMAND,
    ENDING,
    advertises_compact,
    lifecycle_request,
    mcp_tool_for,
    nonce_for,
    prompt_text,
    validate_step,
)
from acp_fuzz.core.version import __version__
from acp_fuzz.core.workspace import FILES as WORKSPACE_FILES
from acp_fuzz.core.workspace import canary_for
from acp_fuzz.core.workspace import file_text as workspace_text
from acp_fuzz.engine.agents.setup import AgentSetup, Compaction, Facts
from acp_fuzz.engine.campaign import interrupt
from acp_fuzz.engine.campaign.deadlines import Deadlines
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.gateway.faults import Hold
from acp_fuzz.engine.process.client_policy import ClientPolicy
from acp_fuzz.engine.process.sandbox import Sandbox, SandboxError, agent_command
from acp_fuzz.engine.process.transport import (
    AgentProcess,
    AgentStartError,
    Expectation,
    Pending,
    Reply,
)

__all__ = ["HarnessError", "Run", "StepOutcome", "TargetSpec", "run_steps"]

CLIENT_INFO = {"name": "acp-fuzz", "version": __version__}
CLIENT_CAPABILITIES = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}
#: Notifications recorded per agent process, by count and by total weight (the size a line
#: takes once parsed, transport.line_weight); the rest are counted only (see transport.py).
#: Bounds the history, and so the harness's memory and the oracles' work, against an agent
#: that floods session/update (100,000 per request made the harness grow past 2 GB).
#: Generous for real agents: a turn of the fake model is short.
MAX_RECORDED_NOTIFICATIONS = 2_000
MAX_RECORDED_NOTIFICATION_BYTES = 16 * 1024 * 1024
#: The least time a command's ``initialize`` is given, whatever ``--timeout`` says: an agent's
#: first start after its install (node's module cache, a Python agent's bytecode) is slow.
INIT_TIMEOUT_FLOOR = 10.0


@dataclass(frozen=True)
class TargetSpec:
    """How to start the agent under test, and how to wire it to the gateway."""

    argv: tuple[str, ...]
    extra_env: Callable[[str, Path], Mapping[str, str]] | None = None
    setup_home: Callable[[str, Path], None] | None = None
    side_request: Callable[[str, Mapping[str, str], Any], bool] | None = None
    passthrough_env: tuple[str, ...] = ()
    init_timeout: float = 30.0
    request_timeout: float = 30.0
    shutdown_grace: float = 3.0
    #: Seconds a ``restart`` step gives the agent to exit on its own after its stdin closes,
    #: so that it can persist its sessions before the next process loads them; ``None``: the
    #: grace calibration measured (``learned``), else the ``shutdown_grace`` (see
    #: :meth:`restart_wait`). (When no restart follows, the agent is stopped at once.)
    restart_grace: float | None = None
    profile: str | None = None
    #: Deadlines learned from the agent, shared by every run of a campaign (see
    #: :mod:`acp_fuzz.engine.campaign.deadlines`); ``None``: every request may take its full
    #: timeout.
    deadlines: Deadlines | None = field(default=None, compare=False)
    #: How a system prompt is sent: ``auto`` (detected from ``initialize``), ``standard``,
    #: or a legacy dialect (see :mod:`acp_fuzz.core.dialects`).
    dialect: str = "auto"
    #: Run the agent in its own PID namespace where possible, so nothing it starts outlives
    #: it (see :func:`acp_fuzz.engine.process.sandbox.agent_command`).
    sandbox_pid: bool = True
    #: The protocol version offered in ``initialize``: ``"1"``, ``"2"`` or ``"auto"`` (the
    #: newest, and whatever supported version the agent answers; see
    #: :mod:`acp_fuzz.core.protocol`).
    protocol: str = "1"
    #: Confine the agent's view of the file system (``--sandbox-fs``; needs bubblewrap).
    sandbox_fs: bool = False
    #: More paths the file-system sandbox shows the agent, read-only.
    read_only: tuple[str, ...] = ()
    #: What a profile file sets up: variables, files under HOME, side-request rules (see
    #: :mod:`acp_fuzz.engine.agents.setup`); applied after the hooks above.
    setup: AgentSetup | None = None
    #: What calibration learned (:class:`acp_fuzz.core.calibration.Learned`): a campaign's
    #: runs, and a replay (the cassette's), send the compaction command and wait the restart
    #: grace it says, whatever this process's own notifications happened to show.
    learned: Learned | None = None

    @classmethod
    def from_profile(cls, name: str, *, timeout: float = 30.0,
                     command: Sequence[str] | None = None, **kw: Any) -> TargetSpec:
        """A known agent (``acp-fuzz profiles``), wired to the gateway by its profile.

        ``command`` runs your own build of that agent instead of the pinned install, with the
        profile's environment, HOME set-up, side-request rules and timeouts (``acp-fuzz
        target --profile codex-acp -- ./my-build``).

        Raises :class:`HarnessError` for an unknown profile, an agent not installed, or a
        ``command`` that cannot be run."""
        from acp_fuzz.engine.agents.profiles import ProfileError, get_profile, is_profile_path

        try:
            p = get_profile(name)
            argv = _checked_argv(command) if command is not None else p.command()
        except KeyError as e:
            raise HarnessError(str(e.args[0]) if e.args else f"unknown profile {name}") from None
        except (FileNotFoundError, ProfileError) as e:
            raise HarnessError(str(e)) from None
        fields: dict[str, Any] = {"protocol": p.protocol, "dialect": p.dialect, **kw}
        return cls(argv=tuple(argv), extra_env=p.env_hook, setup_home=p.setup_hook,
                   side_request=p.side_hook, setup=p.setup, init_timeout=p.init_timeout,
                   request_timeout=max(timeout, p.request_timeout),
                   shutdown_grace=p.shutdown_grace, restart_grace=p.restart_grace,
                   # A file is named by its path, so that a replay can read it again.
                   profile=os.path.abspath(name) if is_profile_path(name) else p.name,
                   **fields)

    def side_test(self) -> Callable[[str, Mapping[str, str], Any], bool] | None:
        """The gateway's side-request predicate: the profile file's rules, then the hook."""
        if self.setup is not None:
            return self.setup.side_test(self.side_request)
        return self.side_request

    def restart_wait(self) -> float:
        """How long a ``restart`` step lets the old process exit on its own: the profile's
        ``restart_grace``, else the one calibration measured (never more than the shutdown
        grace: a cassette's value is a stranger's), else the shutdown grace."""
        if self.restart_grace is not None:
            return self.restart_grace
        if self.learned is not None and self.learned.restart_grace is not None:
            return min(self.learned.restart_grace, self.shutdown_grace)
        return self.shutdown_grace

    def compaction(self) -> Compaction:
        """What the profile says of the agent's compaction (``[compaction]``; none: the
        defaults, and no compaction the fake model can force)."""
        return self.setup.compaction if self.setup is not None else Compaction()

    def facts(self, gateway: Gateway, sandbox: Sandbox) -> Facts:
        """What this target's templates are filled from, for one agent process."""
        return Facts(gateway.url, gateway.token, str(sandbox.home), str(sandbox.work))

    @classmethod
    def resolve(cls, command: Sequence[str] | None, profile: str | None = None, *,
                timeout: float = 30.0, **kw: Any) -> TargetSpec:
        """The target as every command (``target``, ``doctor``, ``replay``, ``matrix``) and the
        pytest plugin take it: ``profile`` (with ``command``, your own build, run the way the
        profile runs its agent), else ``command``, answering each request within ``timeout``
        and ``initialize`` within at least :data:`INIT_TIMEOUT_FLOOR` (a first start warms up
        an install). ``kw``: more :class:`TargetSpec` fields (protocol, dialect, sandbox).

        Raises :class:`HarnessError` for neither, an unknown profile, an agent not
        installed, or a command that cannot be run."""
        if profile:
            return cls.from_profile(profile, timeout=timeout,
                                    command=list(command) if command else None, **kw)
        if not command:
            raise HarnessError("no agent given")
        return cls.from_command(list(command), request_timeout=timeout,
                                init_timeout=max(timeout, INIT_TIMEOUT_FLOOR), **kw)

    @classmethod
    def from_command(cls, argv: Sequence[str], **kw: Any) -> TargetSpec:
        """A target from a command line. A single string with spaces is split like a shell."""
        return cls(argv=tuple(_checked_argv(argv)), **kw)


def _checked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with its program made absolute, and each argument that is a relative path
    (it holds a ``/``, and names a file or folder here: ``node dist/index.js``) too, for the
    agent runs in its sandbox folder; :class:`HarnessError` if it cannot run. A single
    string with spaces is split like a shell."""
    args = list(argv)
    if len(args) == 1 and " " in args[0] and not os.path.exists(args[0]):
        args = shlex.split(args[0])
    if not args:
        raise HarnessError("no target command given")
    exe = args[0]
    if os.sep in exe:
        p = Path(exe)
        if not p.exists():
            raise HarnessError(f"agent not found: {exe}")
        if p.is_dir() or not os.access(p, os.X_OK):
            raise HarnessError(f"agent is not an executable file: {exe}")
        # abspath, not resolve(): a venv python is a symlink whose target has no venv.
        args[0] = os.path.abspath(exe)
    elif shutil.which(exe) is None:
        raise HarnessError(f"agent command not found on PATH: {exe}")
    return [args[0], *(os.path.abspath(a) if "/" in a and not a.startswith(("-", "/"))
                       and os.path.exists(a) else a for a in args[1:])]


@dataclass
class StepOutcome:
    outcome: str  # ok | error | timeout | exited | skipped
    result: Any = None
    error: Any = None


@dataclass
class _Session:
    agent_id: str
    cwd: str
    #: The session modes the agent offered for it (``modes.availableModes[].id``) and the
    #: current one, from its last new, load, resume, fork or set_mode answer.
    modes: tuple[str, ...] = ()
    mode: str | None = None
    #: Its ``select`` config options with at least two values: id -> (values, current),
    #: from the last answer that listed ``configOptions``.
    options: dict[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)

    def note_offers(self, result: Any, protocol: int = 1) -> None:
        """Read the modes and config options an answer about this session offers."""
        config = result.get("configOptions") if isinstance(result, Mapping) else None
        if isinstance(config, list):
            self.options = select_options(config, protocol)
        modes = result.get("modes") if isinstance(result, Mapping) else None
        if not isinstance(modes, Mapping):
            return
        avail = modes.get("availableModes")
        if isinstance(avail, list):
            self.modes = tuple(m["id"] for m in avail[:64]
                               if isinstance(m, Mapping) and isinstance(m.get("id"), str))
        current = modes.get("currentModeId")
        self.mode = current if isinstance(current, str) else self.mode


def select_options(config: list[Any], protocol: int = 1
                   ) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """The ``select`` options of a ``configOptions`` list that offer at least two values
    (grouped values flattened), by id (``id`` in v1, ``configId`` in v2): (values, current
    value)."""
    key = "configId" if protocol >= 2 else "id"
    out: dict[str, tuple[tuple[str, ...], str | None]] = {}
    for opt in config[:64]:
        if not isinstance(opt, Mapping) or opt.get("type") != "select" \
                or not isinstance(opt.get(key), str):
            continue
        values: list[str] = []
        for o in opt.get("options") or []:
            if not isinstance(o, Mapping):
                continue
            inner = o.get("options")
            group: list[Any] = inner if isinstance(inner, list) else [o]
            values += [g["value"] for g in group[:64]
                       if isinstance(g, Mapping) and isinstance(g.get("value"), str)]
        current = opt.get("currentValue")
        if len(set(values)) >= 2:
            out[opt[key]] = (tuple(dict.fromkeys(values)),
                              current if isinstance(current, str) else None)
    return out


@dataclass
class Run:
    """One agent under test: a sandbox, a gateway, an agent process and a history.

    ``gateway`` may be shared between runs (the fuzzer does, to save start-up); by default each
    run starts its own.
    """

    spec: TargetSpec
    history: History = field(default_factory=History)
    gateway: Gateway | None = None
    keep_sandbox: bool = False

    def __post_init__(self) -> None:
        self._own_gateway = self.gateway is None
        self._sandbox: Sandbox | None = None
        self._agent: AgentProcess | None = None
        self._policy: ClientPolicy | None = None
        self._generation = 0
        self.init_result: Any = None
        self.caps = Capabilities()
        #: The agent's id (and what it offered) of every session that exists.
        self.sessions: dict[str, _Session] = {}
        #: Which sessions exist and are open, as the agent's answers left them.
        self.life = Lifecycle()
        self.turns: dict[str, int] = {}
        #: The handle of the fork the current step sent during a turn, once the agent made it.
        self.forked: str | None = None
        #: Whether the close or delete the current step sent during a turn was accepted
        #: (the session is closed, or gone, only then).
        self.ended = False
        self._step_index = 0
        self.dead = False
        self.dialect = "standard"
        #: The protocol version the agent answered in ``initialize`` (1 until then).
        self.protocol = 1
        #: Secret values of the agent's environment (every --pass-env value, and variables
        #: named like secrets), scrubbed from saved cassettes (see :mod:`acp_fuzz.core.scrub`).
        self.secrets: set[str] = set()
        #: How the last request was waited for (its deadline; whether the full timeout).
        self.last_wait: dict[str, Any] = {}
        # Set by probe_concurrency for the one turn it runs (what the probe saw goes in it).
        self._probing: dict[str, Any] | None = None
        #: Mixed into every turn's nonce, so that no other process can forge one. Random:
        #: comparisons between runs normalise nonces away, and nothing else depends on them.
        self.salt = secrets.token_hex(8)

    # -- set-up and tear-down ----------------------------------------------------------------

    def __enter__(self) -> Run:
        try:
            self.start()
        except BaseException:
            self.close(grace=0)  # an interrupt mid-start must not leave the sandbox behind
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, *, activate: bool = True) -> None:
        """Make the sandbox and spawn the agent.

        With a shared gateway, ``activate=False`` leaves the gateway bound to whichever run
        is active now, so the next run can be prepared (pre-spawned) while the current one
        still talks to the model; call :meth:`activate` when it takes over."""
        self._sandbox = Sandbox(keep=self.keep_sandbox)
        self._sandbox.__enter__()
        # Opened now, before any agent can rename a folder in it, and kept across restarts
        # (see ClientPolicy).
        self._policy = ClientPolicy([self._sandbox.work])
        if self.gateway is None:
            self.gateway = Gateway(self.history, side_request=self.spec.side_test()).start()
        elif activate:
            self.activate()
        if self.spec.setup_home is not None:
            self.spec.setup_home(self.gateway.url, Path(self._sandbox.home))
        if self.spec.setup is not None:
            try:
                self.spec.setup.prepare(self.spec.facts(self.gateway, self._sandbox))
            except (OSError, ValueError) as e:
                raise HarnessError(f"the profile's files: {e}") from None
        self._spawn()

    def activate(self) -> None:
        """Bind the shared gateway to this run's history (and forget the last run's nonces)."""
        assert self.gateway is not None
        self.gateway.history = self.history
        self.gateway.forget_nonces()

    def detach(self) -> None:
        """Unbind a shared gateway from this run, so that the next run can take it over while
        this one is still being closed (see :meth:`close`)."""
        if self.gateway is not None and not self._own_gateway \
                and self.gateway.history is self.history:
            self.gateway.history = None

    def close(self, grace: float | None = None) -> None:
        """Stop the agent, release the gateway and remove the sandbox. Idempotent.

        ``grace`` is how long the agent may take to exit on its own once its stdin closes
        (default: the target's ``shutdown_grace``). Pass ``0`` when nothing will read the
        agent's state again (the end of an example): it is then sent ``SIGTERM`` at once.
        Nothing an agent could write while it shuts down is judged at the end of an example,
        so waiting there buys nothing (codex-acp takes 2 s to exit after its stdin closes)."""
        if self._agent is not None:
            self._agent.close(self.spec.shutdown_grace if grace is None else grace)
            self._agent = None
        if self._policy is not None:  # after the agent that asks through it
            self._policy.close()
            self._policy = None
        self.detach()
        if self.gateway is not None and self._own_gateway:
            self.gateway.stop()
        if self._sandbox is not None:
            self._sandbox.__exit__(None, None, None)
            self._sandbox = None

    @property
    def agent_env(self) -> Mapping[str, str]:
        """The environment the current agent process was started with (empty before)."""
        return self._agent.env if self._agent is not None else {}

    @property
    def sandbox(self) -> Sandbox:
        assert self._sandbox is not None, "run not started"
        return self._sandbox

    def _env(self) -> dict[str, str]:
        assert self.gateway is not None
        extra = dict(self.gateway.agent_env())
        if self.spec.extra_env is not None:
            extra.update(self.spec.extra_env(self.gateway.url, Path(self.sandbox.home)))
        if self.spec.setup is not None:
            extra.update(self.spec.setup.environment(self.spec.facts(self.gateway,
                                                                     self.sandbox)))
        # A variable the user passes on purpose (a real key for --model-upstream) wins over
        # the gateway's token in the same variable.
        for name in self.spec.passthrough_env:
            # ... and the gateway must then accept it as it accepts its own token.
            if name in os.environ and extra.pop(name, None) is not None:
                self.gateway.allow_key(os.environ[name])
        env = self.sandbox.build_env(extra, passthrough=self.spec.passthrough_env)
        self.secrets |= env_secrets(env, self.spec.passthrough_env)
        return env

    def _spawn(self) -> None:
        work = str(self.sandbox.work)
        env = self._env()
        try:
            command, how = agent_command(self.spec.argv, root=self.sandbox.root, cwd=work,
                                         env=env, pid=self.spec.sandbox_pid,
                                         fs=self.spec.sandbox_fs, read_only=self.spec.read_only)
        except SandboxError as e:
            raise HarnessError(str(e)) from None
        assert self._policy is not None
        agent = AgentProcess(
            list(self.spec.argv), env=env, cwd=work, history=self.history,
            generation=self._generation, client_handler=self._policy,
            max_recorded_notifications=MAX_RECORDED_NOTIFICATIONS,
            max_recorded_notification_bytes=MAX_RECORDED_NOTIFICATION_BYTES,
            command=command, sandbox=how)
        try:
            agent.start()
        except AgentStartError as e:
            raise HarnessError(str(e)) from None
        self._agent = agent
        self.dead = False

    @property
    def agent(self) -> AgentProcess:
        assert self._agent is not None, "agent not running"
        return self._agent

    # -- protocol ------------------------------------------------------------------------------

    def initialize(self) -> Any:
        """Send ``initialize``; raise :class:`HarnessError` when the agent cannot be initialised."""
        offer = offer_for(self.spec.protocol)
        reply = self._request("initialize", initialize_params(
            offer, choice=self.spec.protocol, info=CLIENT_INFO,
            v1_capabilities=CLIENT_CAPABILITIES), timeout=self.spec.init_timeout)
        if reply.outcome != "ok" or not isinstance(reply.result, Mapping):
            why = {"timeout": "no answer to initialize within "
                              f"{self.spec.init_timeout:g}s",
                   "exited": "the agent exited before answering initialize",
                   "error": f"initialize failed: {reply.error}"}.get(reply.outcome,
                                                                     "initialize gave no object")
            raise HarnessError(why + self.stderr_note(exited=reply.outcome == "exited"))
        self.init_result = reply.result
        try:
            self.protocol = negotiate(self.spec.protocol, reply.result)
        except NegotiationError as e:
            self.history.append("verdict", {"step": self._step_index - 1, "what": "initialize",
                                            "outcome": "error", "protocol": {
                                                "offered": offer, "problem": str(e)}})
            raise HarnessError(str(e)) from None
        try:
            self.dialect = resolve(self.spec.dialect, reply.result)
        except ValueError as e:
            raise HarnessError(str(e)) from None
        if self.protocol != 1 and self.dialect != "standard":
            raise HarnessError(f"the {self.dialect} dialect is ACP v1 only; run with "
                               f"--protocol 1 or --dialect standard")
        forced = self.spec.compaction().by
        self.caps = replace(capabilities(self.dialect, reply.result),
                            compact_usage="usage" in forced,
                            compact_overflow="overflow" in forced)
        self.history.append("verdict", {"step": self._step_index - 1, "what": "initialize",
                                        "outcome": "ok", "capabilities": self.caps.to_wire(),
                                        "dialect": self.dialect, "protocol": {
                                            "offered": offer, "answered": self.protocol},
                                        # What the fake model can force (the profile's).
                                        "compaction": list(forced)})
        return reply.result

    def stderr_note(self, *, exited: bool = False) -> str:
        """`` (stderr: <the agent's last stderr line>)``, or nothing: for one-line errors.
        ``exited``: the failure was the agent's exit, so its exit (and last words) are awaited."""
        if self._agent is None:
            return ""
        self._agent.settle_stderr(2.0 if exited else 0.5, exiting=exited)
        lines = self._agent.stderr_tail.strip().splitlines()
        return f" (stderr: {lines[-1][:200]})" if lines else ""

    def _request(self, method: str, params: Any, *, timeout: float | None = None) -> Reply:
        return self._await(self._send(method, params), method,
                           self.spec.request_timeout if timeout is None else timeout)

    def _send(self, method: str, params: Any) -> Pending:
        # A step's prompt may hold fill marks (acp_fuzz.core.fills): the agent gets them
        # expanded, the history the params as built, each filler as its mark.
        wire = expand_value(params)
        return self.agent.send_request(method, wire,
                                       recorded=None if wire is params else params)

    def _await(self, pending: Pending | _TurnWait, method: str, ceiling: float) -> Reply:
        """The answer to ``pending``, waiting as :mod:`acp_fuzz.engine.campaign.deadlines` says: up
        to the learned deadline, then (the first time ``method`` overruns it) up to ``ceiling``."""
        d = self.spec.deadlines
        first = ceiling if d is None else d.deadline(method, ceiling)
        self.last_wait = {"deadline": round(first, 3), "ceiling": ceiling}
        started = time.monotonic()
        if d is None:
            return pending.wait(ceiling)
        trusted = first >= ceiling or d.trusted(method)
        reply = pending.wait(first, give_up=trusted)
        if reply.outcome != "timeout" or trusted:
            if reply.outcome == "ok":  # every answer teaches: a deadline only grows
                d.observe(method, time.monotonic() - started)
            return reply
        # Overdue for the first time: slow or hung? The full timeout decides, once.
        reply = pending.wait(max(ceiling - first, 0.0))
        answered = time.monotonic() - started if reply.outcome != "timeout" else None
        d.overran(method, answered)
        self.last_wait["full_wait"] = True
        return reply

    # -- steps ---------------------------------------------------------------------------------

    def execute(self, step: Mapping[str, Any]) -> StepOutcome:
        """Run one step and record it. Returns the outcome of its main request."""
        interrupt.check()  # a stop the user asked for, if its KeyboardInterrupt was lost
        step = validate_step(step)
        if self.dialect != "standard" and step["op"] in RESENDS:
            # Legacy dialects carry a prompt on session/new only: never claim to re-send one.
            step.pop("systemPrompt", None)
        index = self._step_index
        self._step_index += 1
        self.forked = None
        self.ended = False
        annotations: dict[str, Any] = {}
        sp = step.get("systemPrompt", OMIT)
        if step["op"] in CARRIES_PROMPT:
            c = classify(sp, self.caps, extra_params=step.get("extra"))
            if self.dialect != "standard" and c.kind == "invalid":
                # No RFD rule governs a vendor extension's odd values: a robustness probe.
                c = Classification("probe", c.reason, "info", "EXT-META-MUSTNOT")
            annotations["class"] = {"kind": c.kind, "reason": c.reason,
                                    "severity": c.severity, "rule": c.rule}
        if step.get("mcp"):
            # The tool acp-fuzz's MCP server offers this session (mcp_servers builds it).
            annotations["mcp_tool"] = mcp_tool_for(step.get("new", step["session"]))
        if step["op"] in ("prompt", "cancel") or step.get("busy") or (
                step["op"] == "compact" and step["by"] != "command"):
            turn = self.turns.get(step["session"], 0) + 1
            annotations["turn"] = turn
            annotations["nonce"] = nonce_for(step["session"], turn, self.salt)
        if step.get("during") == "prompt":  # the session's next turn, sent during this one
            annotations["second_turn"] = annotations["turn"] + 1
            annotations["second_nonce"] = nonce_for(step["session"], annotations["turn"] + 1,
                                                    self.salt)
        beside = step.get("with", step.get("while"))
        if beside is not None:  # the other turn in flight at once, or the one a load meets
            other = self.turns.get(beside, 0) + 1
            annotations["with_turn"] = other
            annotations["with_nonce"] = nonce_for(beside, other, self.salt)
        self.history.append("step", {"index": index, "name": step["op"], "args": step,
                                     **annotations})
        if (self.dead and step["op"] != "restart") or not self._sendable(step):
            out = StepOutcome("skipped")
        else:
            out = self._doer(step["op"])(step, annotations)
        # As the tracker's: a fork not made leaves no handle, so no later step is sent to a
        # session the runner has no id for.
        self.life.apply(lived(step, forked=self.forked == step.get("new"), ended=self.ended),
                        accepted=out.outcome == "ok")
        verdict: dict[str, Any] = {"step": index, "what": "reply", "outcome": out.outcome}
        if out.outcome == "timeout":
            verdict["waited"] = dict(self.last_wait)  # the deadline, and if the full timeout
        if out.error is not None:
            verdict["error"] = out.error
        if step["op"] in TURNS and out.outcome == "ok" \
                and isinstance(out.result, Mapping) and "stopReason" in out.result:
            # How the turn ended (in v2 from its idle state_update, not from the answer).
            verdict["stopReason"] = out.result["stopReason"]
        if step["op"] in CREATES and out.outcome == "ok":
            verdict["sessionId"] = self.sessions[step.get("new", step["session"])].agent_id
        self.history.append("verdict", verdict)
        if step["op"] in CREATES and out.outcome == "error":
            self._probe_side_effect()
        return out

    def _doer(self, op: str) -> Callable[[dict[str, Any], dict[str, Any]], StepOutcome]:
        """What sends an ``op`` step: the runner's ``_do_<op>``, or for a plain op (its method
        and the session's id) :meth:`_do_plain`."""
        do: Callable[[dict[str, Any], dict[str, Any]], StepOutcome] | None = getattr(
            self, f"_do_{op}", None)
        if do is None and TABLE[Op(op)].plain:
            return self._do_plain
        assert do is not None, f"the runner cannot send a {op!r} step"
        return do

    def probe_concurrency(self, step: Mapping[str, Any]) -> tuple[StepOutcome, bool | None]:
        """Calibration's turn ``step`` (a prompt) with its model request held while the
        round trip's request (:data:`~acp_fuzz.core.calibration.ROUND_TRIP_METHOD`) is
        written, given up to :data:`~acp_fuzz.core.calibration.CONCURRENCY_PROBE_S`: the
        turn's outcome, and whether the round trip was answered while the model request was
        held (``None``: the turn never asked the model). A ``concurrency`` verdict records
        it."""
        self._probing = {}
        try:
            out = self.execute(step)
            concurrent = self._probing.get("concurrent")
        finally:
            self._probing = None
        return out, concurrent

    def _probed_turn(self, step: Mapping[str, Any], ann: Mapping[str, Any]) -> StepOutcome:
        """The turn of :meth:`probe_concurrency`."""
        assert self._probing is not None
        turn, held, _, overlapped = self._beside_held(
            step["session"], ann, lambda _: self._send(ROUND_TRIP_METHOD, {}),
            settle=CONCURRENCY_PROBE_S)
        ended = self._await(turn, "session/prompt", self.spec.request_timeout)
        # The round trip's answer, if it is to come, is not awaited: calibration's own round
        # trip follows it in the pipe and is bounded (an agent may never answer an unknown
        # method).
        self._probing["concurrent"] = overlapped if held else None
        self.history.append("verdict", {"step": self._step_index - 1, "what": "concurrency",
                                        "held": held, "overlapped": overlapped})
        return self._reply_outcome(ended)

    def _sendable(self, step: Mapping[str, Any]) -> bool:
        """Whether the runner can send ``step`` at all: a step on a session that does not
        exist (never made, its creation refused, or deleted) has no session id to send, and
        is skipped. A step on a session that exists but is not open (closed, or unloaded by a
        restart) is sent: the agent must refuse it, and that is for the oracles to judge. So
        is a turn of a deleted session (the runner keeps its id for that)."""
        if NEEDS[step["op"]] == "nothing":
            return True
        beside = step.get("with", step.get("while"))
        if beside is not None and not self.life.exists(beside):
            return False  # the other turn has no session to go to
        return self.life.exists(step["session"]) or (
            step["op"] == "prompt" and self.life.deleted(step["session"]))

    def _reply_outcome(self, reply: Reply) -> StepOutcome:
        if reply.outcome in ("exited", "timeout"):
            self.dead = True
            if reply.outcome == "timeout" and self._agent is not None:
                # A hung agent's state is unknown: stop it so that nothing later blocks on it.
                self._agent.close(0.5)
        return StepOutcome(reply.outcome, reply.result, reply.error)

    def _cwd_for(self, step: Mapping[str, Any], handle: str) -> str:
        name = "shared" if step.get("cwd") == "shared" else handle
        return self._workspace(handle, name)

    def _workspace(self, handle: str, name: str) -> str:
        """The working directory ``name`` for session ``handle``, with the instruction files
        (AGENTS.md, ...) written into it, each holding its folder's canary, and a
        ``workspace`` verdict saying which (:mod:`acp_fuzz.core.workspace`)."""
        cwd = self.sandbox.new_cwd(name)
        own = self._write_workspace(name)
        self.history.append("verdict", {"step": self._step_index - 1, "what": "workspace",
                                        "session": handle, "folder": name, "files": {
                                            f: canary_for(name, f) for f in WORKSPACE_FILES
                                            if own}})
        return cwd

    def _write_workspace(self, name: str) -> bool:
        """Write the instruction files into the session folder ``name`` through its
        descriptor, opened from the held work folder without following a link (the agent may
        have planted one at ``name``, to a folder of the host: the harness writes outside any
        sandbox); whether the folder was the harness's own. A shared folder has them from its
        first session; whatever an agent put there (a link, a folder it made read-only)
        stays: O_EXCL | O_NOFOLLOW follows no link, and a file not written only shows as not
        seen."""
        try:
            folder = self.sandbox.open_cwd(name)
        except OSError:
            return False
        try:
            for file in WORKSPACE_FILES:
                with contextlib.suppress(OSError):
                    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o666, dir_fd=folder)
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        f.write(workspace_text(name, file))
        finally:
            os.close(folder)
        return True

    def _dialect_followup(self, step: Mapping[str, Any], session_id: str) -> None:
        # Goose sets the prompt with an extension request once the session exists.
        if self.dialect != "goose" or step.get("systemPrompt") is None:
            return
        reply = self._request(GOOSE_METHOD, goose_params(session_id, step["systemPrompt"]))
        self.history.append("verdict", {"step": self._step_index - 1,
                                        "what": "dialect-followup",
                                        "outcome": reply.outcome, "error": reply.error})

    def _do_new(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """A ``session/new`` (with ``cancel_request``, its ``$/cancel_request`` right behind
        it: :meth:`_lifecycle_request`). The ``session/list`` probe after a refused new says
        whether one was left behind."""
        handle = step["session"]
        cwd = self._cwd_for(step, handle)
        method, params = lifecycle_request(step, protocol=self.protocol, dialect=self.dialect,
                                           cwd=cwd, mcp_servers=mcp_servers(step))
        out = self._reply_outcome(self._lifecycle_request(step, method, params))
        if out.outcome == "ok":
            sid = out.result.get("sessionId") if isinstance(out.result, Mapping) else None
            if isinstance(sid, str):
                self.sessions[handle] = _Session(sid, cwd)
                self.sessions[handle].note_offers(out.result, self.protocol)
                self._dialect_followup(step, sid)
            else:
                out = StepOutcome("error", out.result, {"harness": "no sessionId in result"})
        return out

    def _lifecycle_request(self, step: Mapping[str, Any], method: str, params: Any) -> Reply:
        """The answer to a new, load, resume or fork. With ``cancel_request``, its
        ``$/cancel_request`` goes in the same write right behind it
        (:meth:`AgentProcess.one_write`): the agent has both in its pipe when it reads the
        request, on a loaded machine too. It must still be answered: a result is the op's
        as any, an error (``-32800`` or another) makes or reattaches nothing."""
        if not step.get("cancel_request"):
            return self._request(method, params)
        with self.agent.one_write():
            pending = self._send(method, params)
            self.agent.notify("$/cancel_request", {"requestId": pending.id})
        return self._await(pending, method, self.spec.request_timeout)

    def _do_fork(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """A ``session/fork`` (with ``cancel_request``, its ``$/cancel_request`` right behind
        it; a refused one is followed by the ``session/list`` probe, as for new)."""
        src = self.sessions[step["session"]]
        cwd, roots = self._dirs(step, step["new"], src.cwd)
        method, params = lifecycle_request(step, protocol=self.protocol, dialect=self.dialect,
                                           session_id=src.agent_id, cwd=cwd, roots=roots,
                                           mcp_servers=mcp_servers(step))
        out = self._reply_outcome(self._lifecycle_request(step, method, params))
        if out.outcome == "ok":
            sid = out.result.get("sessionId") if isinstance(out.result, Mapping) else None
            if isinstance(sid, str):
                self.sessions[step["new"]] = _Session(sid, cwd)
                self.sessions[step["new"]].note_offers(out.result, self.protocol)
            else:
                out = StepOutcome("error", out.result, {"harness": "no sessionId in result"})
        return out

    def _do_load(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        # Under v2 there is no session/load: lifecycle_request sends a resume that replays
        # from the start (SP-V2-NOLOAD-DEF), and it owes what a load owes.
        return self._reattach(step, ann)

    def _do_resume(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        return self._reattach(step, ann)

    def _busy(self, method: str, params: dict[str, Any], handle: str,
              ann: Mapping[str, Any]) -> StepOutcome:
        """A load or resume of ``handle`` sent while a turn of it runs: the turn's
        ``session/prompt`` is written, the reattach right behind it (an agent reads them in
        that order, so the reattach arrives while the turn is in flight, whatever the
        version), and both are waited for. The step's outcome is the reattach's, unless the
        turn hung or the agent died; how the turn ended goes in a ``busy-turn`` verdict. A
        busy agent may refuse the reattach; what must hold is that it then changes nothing,
        and that an accepted one is applied whole (the oracles judge the turns after)."""
        with self.agent.one_write():  # the reattach is in the pipe when the prompt is read
            turn = self._send_turn(handle, ann)
            pending = self._send(method, params)
        reply = self._await(pending, method, self.spec.request_timeout)
        if reply.outcome in ("timeout", "exited"):
            return self._reply_outcome(reply)  # hung or gone: the turn cannot end either
        ended = self._await(turn, "session/prompt", self.spec.request_timeout)
        self.history.append("verdict", {
            "step": self._step_index - 1, "what": "busy-turn", "outcome": ended.outcome,
            **({"stopReason": ended.result.get("stopReason")}
               if isinstance(ended.result, Mapping) else {})})
        if ended.outcome in ("timeout", "exited"):
            return self._reply_outcome(ended)
        return self._reply_outcome(reply)

    def _while_turn(self, method: str, params: dict[str, Any], other: str,
                    ann: Mapping[str, Any]) -> StepOutcome:
        """A load or resume sent while a turn of another session (``other``) runs: that turn is sent
        and its first model request held; once it has arrived, the reattach is written, and given
        as :meth:`_beside_wait` says (an agent that handles one request at a time answers it only
        after the turn; one that answers during a turn is waited for). Then the hold is let go
        and both are awaited. A prompt kept in one process-wide place that the reattach fills
        shows in ``other``'s turns after it (the prompt oracles judge them); a ``while-turn``
        verdict records whether the turn was held, whether the reattach was answered while it was
        (``overlapped``) and how the turn ended. The step's outcome is the reattach's, unless the
        turn hung or the agent died."""
        turn, held, pending, overlapped = self._beside_held(
            other, {"turn": ann["with_turn"], "nonce": ann["with_nonce"]},
            lambda _: self._send(method, params))
        ended = self._await(turn, "session/prompt", self.spec.request_timeout)
        reply = self._await(pending, method, self.spec.request_timeout) \
            if pending is not None else self._request(method, params)
        self.history.append("verdict", {"step": self._step_index - 1, "what": "while-turn",
                                        "session": other, "held": held,
                                        "overlapped": overlapped, "turn": _ending(ended)})
        if reply.outcome in ("ok", "error") and ended.outcome in ("timeout", "exited"):
            return self._reply_outcome(ended)
        return self._reply_outcome(reply)

    def _reattach(self, step: dict[str, Any], ann: Mapping[str, Any]) -> StepOutcome:
        s = self.sessions[step["session"]]
        cwd, roots = self._dirs(step, step["session"], s.cwd)
        method, params = lifecycle_request(step, protocol=self.protocol, dialect=self.dialect,
                                           session_id=s.agent_id, cwd=cwd, roots=roots,
                                           mcp_servers=mcp_servers(step))
        if step.get("busy"):
            out = self._busy(method, params, step["session"], ann)
        elif step.get("while"):
            out = self._while_turn(method, params, step["while"], ann)
        else:  # (with cancel_request, a refused one leaves the session as it was)
            out = self._reply_outcome(self._lifecycle_request(step, method, params))
        if out.outcome == "ok":
            s.cwd = cwd
            s.note_offers(out.result, self.protocol)
        return out

    def _dirs(self, step: Mapping[str, Any], handle: str, cwd: str
              ) -> tuple[str, list[str]]:
        """The ``cwd`` a load, resume or fork sends, and its ``additionalDirectories``: the
        session's own directory, or a new one (``"cwd": "moved"``), and ``roots`` new
        directories as extra workspace roots (none: the field is not sent)."""
        if step.get("cwd") == "moved":
            cwd = self._workspace(handle, f"{handle}-moved-{self._step_index}")
        roots = int(step.get("roots", 0))
        return cwd, [self.sandbox.new_cwd(f"{handle}-root-{self._step_index}-{i}")
                     for i in range(roots)]

    def _probe_side_effect(self) -> None:
        # After a rejected new/fork, look for a half-created session (SP-AGENT-ERROR-
        # NOSIDEEFFECT-MUST). Doing it inside the same step keeps minimal reproductions short.
        if self.caps.list and not self.dead:
            reply = self._request("session/list", {})
            self.history.append("verdict", {"step": self._step_index - 1, "what": "probe-list",
                                            "outcome": reply.outcome,
                                            "sessions": _listed_ids(reply.result)})

    def _turn(self, handle: str, ann: Mapping[str, Any]) -> dict[str, Any]:
        """Register the turn's nonce with the gateway and build its ``session/prompt``."""
        s = self.sessions[handle]
        turn = ann["turn"]
        self.turns[handle] = turn
        assert self.gateway is not None
        self.gateway.register_nonce(ann["nonce"], handle, turn)
        return {"sessionId": s.agent_id,
                "prompt": [{"type": "text", "text": prompt_text(handle, turn, self.salt)}]}

    def _send_turn(self, handle: str, ann: Mapping[str, Any], text: str | None = None
                   ) -> Pending | _TurnWait:
        """Send the turn's ``session/prompt`` (with ``text``: that text, a command, instead of
        the harness's turn, and no nonce). In v1 its answer ends the turn; in v2 the
        answer only says the message was inserted, and the turn ends with the session's
        ``idle`` ``state_update`` (docs/rules.md), which is watched for before the
        request is written, since it may overtake the answer."""
        if text is None:
            params = self._turn(handle, ann)
        else:
            params = {"sessionId": self.sessions[handle].agent_id,
                      "prompt": [{"type": "text", "text": text}]}
        if self.protocol < 2:
            return self.agent.send_request("session/prompt", params)
        ends = _TurnEnd(self.sessions[handle].agent_id)
        idle = self.agent.expect(ends)
        ends.request = self.agent.send_request("session/prompt", params)
        return _TurnWait(ends.request, idle)

    def _do_prompt(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """A turn. With a ``during``, see :meth:`_held`. With a ``fault``, the gateway
        fails the turn's first model request once (:meth:`Gateway.fail_next`: a retry gets
        the normal answer); a ``fault`` verdict
        says how many requests it failed (``faulted``: 0 when the turn never asked)."""
        if self._probing is not None:
            return self._probed_turn(step, ann)
        if "during" in step:
            return self._held(step, ann)
        if "with" in step:
            return self._together(step, ann)
        fault = step.get("fault")
        if fault is not None:
            assert self.gateway is not None
            self.gateway.fail_next(fault, session=step["session"])
        try:
            pending = self._send_turn(step["session"], ann)
            out = self._reply_outcome(self._await(pending, "session/prompt",
                                                  self.spec.request_timeout))
        finally:
            faulted = self.gateway.disarm(step["session"]) \
                if fault is not None and self.gateway is not None else 0
        if fault is not None:
            self.history.append("verdict", {"step": self._step_index - 1, "what": "fault",
                                            "outcome": out.outcome, "fault": fault,
                                            "faulted": faulted})
        return out

    def _held(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """A turn with a request sent while the model is thinking: the gateway holds the turn's
        first model request open (:meth:`Gateway.hold_next`); once it has arrived, ``during``
        (:data:`~acp_fuzz.core.steps.DURING`) is written, and after a settle
        (:meth:`_beside_wait`: none at an agent that answers one request at a time, until
        answered at one that answers during a turn) the request is let go and the turn, and a
        close's, a set_mode's or a second turn's answer, are awaited. A turn that never asked the
        model (refused, or answered at once) gets nothing sent during it. A ``during`` verdict
        records what was sent, whether the prompt was still unanswered then, and how the turn and
        the close (``close``), the mode switch (``set_mode``, with its ``modeId``), the second
        turn (``second``, with whether its prompt was ``answered`` and whether it ended while the
        first was held, ``overlapped``) or the fork (``fork``, with its ``new`` handle and, once
        made, its ``sessionId``) ended; the step's outcome is the close's for ``close``, else the
        turn's (a ``-32800`` answer to a cancelled request is a turn that stopped as
        ``cancelled``)."""
        handle, what = step["session"], step["during"]
        sent: dict[str, Any] = {}
        pending = False

        def during(turn: Pending | _TurnWait) -> Pending | _TurnWait | None:
            nonlocal pending
            request = turn if isinstance(turn, Pending) else turn.request
            pending = not request.done
            return self._send_during(step, ann, request.id, sent)

        turn, held, side, overlapped = self._beside_held(handle, ann, during)
        if what == "prompt" and side is not None:
            sent["overlapped"] = overlapped  # it ended while the first waited
        ended = self._await(turn, "session/prompt", self.spec.request_timeout)
        record: dict[str, Any] = {"step": self._step_index - 1, "what": "during",
                                  "during": what, "held": held, "pending": pending,
                                  "turn": _ending(ended)}
        answer = self._side_answer(what, handle, side, sent, ended)
        if answer is not None:
            record[SIDE_KEY[what]] = {**_ending(answer), **sent}
        self.history.append("verdict", record)
        if what in ENDING and answer is not None:
            return self._reply_outcome(answer)
        if answer is not None and answer.outcome == "timeout":
            self._reply_outcome(answer)  # a hung request: the agent's state is unknown
        if ended.outcome == "error" and isinstance(ended.error, Mapping) \
                and ended.error.get("code") == REQUEST_CANCELLED and what in CANCELLING:
            ended = Reply("ok", result={"stopReason": "cancelled"}, id=ended.id)
        return self._reply_outcome(ended)

    def _side_answer(self, what: str, handle: str, side: Pending | _TurnWait | None,
                     sent: dict[str, Any], ended: Reply) -> Reply | None:
        """The answer to the request written during a held turn (a close, a set_mode or a
        second turn), once the turn (``ended``) was awaited; a mode switch the agent accepted
        is the session's mode now. A refused one is sent again once the turn has ended, as a
        control (``sent["control"]``): a switch refused then too is not the turn's doing. For
        a second turn, ``sent`` records whether its ``session/prompt`` was answered (in v2
        the turn may then still not have ended)."""
        if side is None:
            return None
        method = {"close": "session/close", "set-mode": "session/set_mode",
                  "fork": "session/fork", "set-config": "session/set_config_option",
                  "delete": "session/delete"}.get(what, "session/prompt")
        answer = self._await(side, method, self.spec.request_timeout)
        s = self.sessions[handle]
        if what == "fork":
            self._made_fork(s, answer, sent)
        if what == "set-mode" and answer.outcome == "error" and ended.outcome in ("ok", "error"):
            control = self._request("session/set_mode", {"sessionId": s.agent_id,
                                                         "modeId": sent["modeId"]})
            sent["control"] = _ending(control)
            if control.outcome == "ok":
                s.mode = str(sent["modeId"])
            elif control.outcome == "timeout":
                self._reply_outcome(control)  # a hung request: the agent's state is unknown
        if what == "set-mode" and answer.outcome == "ok":
            s.mode = str(sent["modeId"])
        if what == "set-config" and answer.outcome == "ok":
            config_id = str(sent["configId"])
            _config_set(s, (config_id, s.options[config_id][0], str(sent["value"])),
                        answer.result, self.protocol)
        self.ended = what in ENDING and answer.outcome == "ok"
        if what == "prompt":
            sent["answered"] = (side if isinstance(side, Pending) else side.request).done
        return answer

    def _made_fork(self, source: _Session, answer: Reply, sent: dict[str, Any]) -> None:
        """A fork sent during a turn and accepted: its copy is session ``sent["new"]`` from
        now on (in the source's folder, as a fork step's ``cwd: same``), its id recorded in
        ``sent``. An answer without a session id makes no session."""
        sid = answer.result.get("sessionId") if isinstance(answer.result, Mapping) else None
        if answer.outcome != "ok" or not isinstance(sid, str):
            return
        new = str(sent["new"])
        self.sessions[new] = _Session(sid, source.cwd)
        self.sessions[new].note_offers(answer.result, self.protocol)
        sent["sessionId"] = sid
        self.forked = new

    def _together(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """Two turns at once: the turn of ``session`` is sent and its first model request
        held; once it has arrived, the turn of ``with`` is sent, and it runs while the first
        waits (as :meth:`_beside_wait` says: an agent that runs one turn at a time answers it
        only after the first). Then the hold is let go and both turns are
        awaited. Every model request of either is tied to its own session by its nonce, and
        judged as any turn's; a ``together`` verdict records whether the first was held,
        whether the second ended while it was (``overlapped``: the agent runs turns at once)
        and how each turn ended. The step's outcome is the first turn's."""
        second = step["with"]
        turn, held, other, overlapped = self._beside_held(step["session"], ann, lambda _: (
            self._send_turn(second, {"turn": ann["with_turn"], "nonce": ann["with_nonce"]})))
        ended = self._await(turn, "session/prompt", self.spec.request_timeout)
        record: dict[str, Any] = {"step": self._step_index - 1, "what": "together",
                                  "held": held, "overlapped": overlapped,
                                  "turn": _ending(ended)}
        if other is not None:
            record["with"] = _ending(self._await(other, "session/prompt",
                                                 self.spec.request_timeout))
        self.history.append("verdict", record)
        return self._reply_outcome(ended)

    def _beside_held(self, handle: str, ann: Mapping[str, Any],
                     send: Callable[[Pending | _TurnWait], Pending | _TurnWait | None], *,
                     settle: float | None = None
                     ) -> tuple[Pending | _TurnWait, bool, Pending | _TurnWait | None, bool]:
        """The turn of ``handle`` (``ann``: its turn and nonce) with its first model request
        held; once it has arrived, ``send(turn)`` writes what goes during it (a turn of
        another session, a reattach, a ``during`` request; ``None`` for a notification),
        given until it is over or ``settle`` seconds pass (by default as
        :meth:`_beside_wait` says; after a notification, until the turn is over). Then the
        hold is let go (:meth:`_held`, :meth:`_together`, :meth:`_while_turn` share this).
        Returns the turn, whether it was held, the request in flight beside it (``None``: a
        notification, or nothing sent: the turn never asked the model) and whether that was
        over while the turn was held (``overlapped``: the agent works on both at once)."""
        assert self.gateway is not None
        hold = self.gateway.hold_next(session=handle)
        other: Pending | _TurnWait | None = None
        overlapped = False
        try:
            turn = self._send_turn(handle, ann)
            held = self._wait_held(hold, turn)
            if held:
                other = send(turn)
                wait = self._beside_wait(other) if settle is None else settle
                # In the pipe before the hold ends, however briefly it is kept.
                self.agent.written(SETTLE_S)
                _settle(turn if other is None else other, wait)
                overlapped = other is not None and _turn_over(other)
                if overlapped and settle is None and self._concurrent():
                    # What the answer set going lands before the model answers: pi-acp
                    # signals another session's process to exit just before it answers a
                    # load, and the process takes a moment to go (up to SETTLE_S, or
                    # until the turn is over).
                    _settle(turn, SETTLE_S)
        finally:
            hold.release()  # lets the held request go (once taken, the plan is no longer armed)
            self.gateway.disarm(handle)  # or drops it, never taken
        return turn, held, other, overlapped

    def _beside_wait(self, other: Pending | _TurnWait | None) -> float:
        """How long what was written beside a held turn is given before the hold ends
        (:mod:`acp_fuzz.core.calibration`): a request, nothing at an agent that answers one
        request at a time (its answer cannot come before the turn's), until it is answered
        (up to :data:`BESIDE_S`) at one that answers during a turn, so that what it does
        beside the turn is done when the hold ends (and then :data:`SETTLE_S` more, or until
        the turn is over, for what the answer set going), and :data:`SETTLE_S` where that was
        not measured; a notification, :data:`SETTLE_S` (whether the agent reads one mid-turn is
        not measured: one may read its cancels on a thread of their own)."""
        concurrent = self._concurrent()
        if other is None or concurrent is None:
            return SETTLE_S
        return BESIDE_S if concurrent else 0.0

    def _concurrent(self) -> bool | None:
        """Whether calibration found the agent answering requests during a turn (``None``:
        not measured)."""
        learned = self.spec.learned
        return learned.concurrent if learned is not None else None

    def _wait_held(self, hold: Hold, turn: Pending | _TurnWait) -> bool:
        """Whether the held model request arrived before the turn ended without it (a
        refused turn never asks the model), the agent died or the request timeout passed.
        Once it arrived, what the agent wrote before it (in v2, the prompt's answer) is read
        before this returns: whether the turn was still unanswered is then the agent's
        doing, not the scheduler's, on a busy machine too."""
        until = time.monotonic() + self.spec.request_timeout
        while not hold.wait_arrived(HELD_POLL_S):
            if _turn_over(turn) or self.dead or time.monotonic() > until:
                break
        if hold.arrived:
            self.agent.caught_up(CAUGHT_UP_S)
        return hold.arrived

    def _send_during(self, step: Mapping[str, Any], ann: Mapping[str, Any], request_id: Any,
                     sent: dict[str, Any]) -> Pending | _TurnWait | None:
        """Write the step's ``during`` for its session (whose ``session/prompt`` is
        ``request_id``); a close, a set_mode or a second turn is a request, whose pending
        answer (the turn, in v2) is returned. A set_mode goes to choice ``pick`` of the
        session's modes other than its current one, as :meth:`_do_set_mode` picks (its
        ``modeId`` put in ``sent``); nothing is sent where it offered no other. A second turn
        is the session's next, with its own nonce (``second_turn``, ``second_nonce``)."""
        what, s = step["during"], self.sessions[step["session"]]
        sid = s.agent_id
        if what == "prompt":
            return self._send_turn(step["session"], {"turn": ann["second_turn"],
                                                     "nonce": ann["second_nonce"]})
        if what == "close":
            return self.agent.send_request("session/close", {"sessionId": sid})
        if what == "fork":
            # No systemPrompt: the copy inherits its source's (what the oracles then judge).
            sent["new"] = step["new"]
            fork = {"op": "fork", "session": step["session"], "new": step["new"]}
            return self.agent.send_request(*lifecycle_request(
                fork, protocol=self.protocol, dialect=self.dialect, session_id=sid, cwd=s.cwd,
                roots=[], mcp_servers=[]))
        if what == "set-mode":
            mode = _other_mode(s, step)
            if mode is None:
                return None
            sent["modeId"] = mode
            return self.agent.send_request("session/set_mode", {"sessionId": sid, "modeId": mode})
        if what == "set-config":
            choice = _config_choice(s, step)
            if choice is None:
                return None
            sent["configId"], sent["value"] = choice[0], choice[2]
            return self.agent.send_request("session/set_config_option",
                                           self._config_params(sid, choice))
        if what == "delete":
            return self.agent.send_request("session/delete", {"sessionId": sid})
        if what == "cancel":
            self.agent.notify("session/cancel", {"sessionId": sid})
        else:
            self.agent.notify("$/cancel_request", {"requestId": request_id})
        return None

    def _do_compact(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """Make the agent compact session ``H``, and wait for the turn that does it.

        ``by: command``: a ``session/prompt`` whose text is ``/`` and the name of the
        compaction command the agent advertised (a command named ``compact``, in an
        ``available_commands_update`` for any session of this run, or in v2 in a
        ``session/new`` or ``session/resume`` result), awaited like a turn. It
        carries no nonce: what the agent then asks the model is its summary, not a turn of
        the harness's. Skipped when no such command was advertised in this run.

        ``by: usage`` and ``by: overflow``: the gateway is armed (:meth:`Gateway.press`) so
        that H's next model turn gets a reply whose usage reports the profile's
        ``usage_tokens``, or its API's context-length error naming ``context_window``, once;
        then an ordinary turn is sent, nonce and all. A ``compact`` verdict says whether a
        request took the pressure (``pressed``)."""
        handle = step["session"]
        if step["by"] == "command":
            name = self.compact_command()
            if name is None:
                return StepOutcome("skipped")
            pending = self._send_turn(handle, ann, text=f"/{name}")
            return self._reply_outcome(self._await(pending, "session/prompt",
                                                   self.spec.request_timeout))
        assert self.gateway is not None
        c = self.spec.compaction()
        self.gateway.press(handle, step["by"], tokens=c.usage_tokens, window=c.context_window)
        try:
            out = self._do_prompt(step, ann)
        finally:
            pressed = self.gateway.release(handle)
        self.history.append("verdict", {"step": self._step_index - 1, "what": "compact",
                                        "outcome": out.outcome, "by": step["by"],
                                        "pressed": pressed})
        return out

    def compact_command(self) -> str | None:
        """The name of the compaction command the agent advertised (``compact``), or
        ``None``: calibration's fact when the target has one (the same in every run of a
        campaign and on replay), else whether an agent process of this run advertised it."""
        if self.spec.learned is not None:
            return self.spec.learned.compact_command
        for _, msg in self.history.acp_messages("recv"):
            if not isinstance(msg, Mapping):
                continue
            params = msg.get("params")
            if (isinstance(params, Mapping) and advertises_compact(params.get("update"))) \
                    or ("id" in msg and advertises_compact(msg.get("result"))):
                return COMPACT_COMMAND
        return None

    def _do_cancel(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """A prompt turn cancelled mid-flight: ``session/cancel`` is written right behind the
        ``session/prompt``. Whether the agent sees it before or after finishing the turn is a
        race it must handle either way: it must answer the prompt (``cancelled`` or a normal
        stop reason), never with an error (CANCEL-AGENT-STOPREASON-MUST), and stay healthy.
        In v2 a prompt the cancel stopped before its message was inserted is answered with
        ``-32800`` (Request Cancelled), which is as good as a ``cancelled`` turn."""
        handle = step["session"]
        with self.agent.one_write():  # the cancel is in the pipe when the prompt is read
            pending = self._send_turn(handle, ann)
            self.agent.notify("session/cancel", {"sessionId": self.sessions[handle].agent_id})
        reply = self._await(pending, "session/prompt", self.spec.request_timeout)
        if self.protocol >= 2 and reply.outcome == "error" and isinstance(reply.error, Mapping) \
                and reply.error.get("code") == REQUEST_CANCELLED:
            reply = Reply("ok", result={"stopReason": "cancelled", "inserted": False},
                          id=reply.id)
        return self._reply_outcome(reply)

    def _do_plain(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """An op whose request is its method and the session's id (:attr:`OpSpec.plain
        <acp_fuzz.core.ops.OpSpec.plain>`: a close, a delete). A deleted session's id is kept:
        a later turn of it is sent to see it refused; any other step on it is skipped (it no
        longer exists, see _sendable)."""
        s = self.sessions[step["session"]]
        method = TABLE[Op(step["op"])].method
        return self._reply_outcome(self._request(method, {"sessionId": s.agent_id}))

    def _do_set_mode(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """``session/set_mode`` to another of the modes the agent offered for the session:
        choice ``pick`` (modulo their number) among those other than the current one. Skipped
        when the session offered none: the step is data, the modes are the agent's."""
        s = self.sessions[step["session"]]
        mode = _other_mode(s, step)
        if mode is None:
            return StepOutcome("skipped")
        out = self._reply_outcome(self._request("session/set_mode",
                                                {"sessionId": s.agent_id, "modeId": mode}))
        if out.outcome == "ok":
            s.mode = mode
        return out

    def _do_set_config_option(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """``session/set_config_option``: option ``option`` (modulo their number, in the
        agent's order) of the session's select options, set to choice ``pick`` among its
        other values. Skipped when the session offered none."""
        s = self.sessions[step["session"]]
        choice = _config_choice(s, step)
        if choice is None:
            return StepOutcome("skipped")
        out = self._reply_outcome(self._request("session/set_config_option",
                                                self._config_params(s.agent_id, choice)))
        if out.outcome == "ok":
            _config_set(s, choice, out.result, self.protocol)
        return out

    def _config_params(self, session_id: str, choice: tuple[str, tuple[str, ...], str]
                       ) -> dict[str, Any]:
        """The params of a ``session/set_config_option`` that sets ``choice``
        (:func:`_config_choice`). v2 tags the value with its type; a select's values are
        ids."""
        tag = {"type": "id"} if self.protocol >= 2 else {}
        return {"sessionId": session_id, "configId": choice[0], **tag, "value": choice[2]}

    def _do_set_title(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        """``session/set_title``: the client retitles a session, open or not (any session
        ``session/list`` would show may be retitled)."""
        s = self.sessions[step["session"]]
        return self._reply_outcome(self._request(
            "session/set_title", {"sessionId": s.agent_id, "title": str(step.get("title", ""))}))

    def _do_list(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        out = self._reply_outcome(self._request("session/list", {}))
        self.history.append("verdict", {"step": self._step_index - 1, "what": "probe-list",
                                        "outcome": out.outcome,
                                        "sessions": _listed_ids(out.result)})
        return out

    def _do_invalid(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        # Built by acp-fuzz from the method alone (validate_step refused any other params).
        return self._reply_outcome(self._request(*lifecycle_request(step)))

    def _do_restart(self, step: dict[str, Any], ann: dict[str, Any]) -> StepOutcome:
        old = self._agent
        if old is not None:
            # A fair chance to persist its sessions: the next process is asked to load them.
            old.close(self.spec.restart_wait())
        self._generation += 1
        self.history.append("process", {"what": "restart", "generation": self._generation})
        if self._policy is not None:  # the new process starts with no cancelled session
            self._policy.forget_sessions()
        self._spawn()
        try:
            self.initialize()
        except HarnessError as e:
            self.dead = True
            return StepOutcome("exited", error={"harness": str(e)})
        return StepOutcome("ok")


#: The name acp-fuzz's MCP server is given in ``mcpServers`` (an agent may prefix its tools
#: with it: ``mcp__acp-fuzz__<tool>``).
MCP_SERVER_NAME = "acp-fuzz"


def mcp_servers(step: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``mcpServers`` of a step that says ``"mcp": true``: acp-fuzz's own stdio MCP
    server (:mod:`acp_fuzz.mcp_server`, this interpreter, read-only in the sandbox), offering
    the session's canary tool (:func:`~acp_fuzz.core.steps.mcp_tool_for`). Built here from
    the handle alone: a cassette never chooses a command."""
    if not step.get("mcp"):
        return []
    tool = mcp_tool_for(step.get("new", step["session"]))
    return [{"name": MCP_SERVER_NAME, "command": sys.executable,
             "args": ["-m", "acp_fuzz.mcp_server", "--tool", tool], "env": []}]


#: The key of a ``during`` verdict that says how the request written during the turn ended.
SIDE_KEY = {"close": "close", "set-mode": "set_mode", "prompt": "second", "fork": "fork",
            "set-config": "set_config", "delete": "delete"}
#: JSON-RPC's Request Cancelled (v2: a prompt cancelled before its message was inserted).
REQUEST_CANCELLED = -32800
#: How long a held turn's request stays held after ``during`` was written, at most: an agent
#: that reads its input while the model is thinking acts on it in this time (the turn's or
#: the close's answer ends the wait at once); one that reads it only after the model answered
#: costs this much a held turn.
SETTLE_S = 0.25
#: How long a request written beside a held turn is waited for, at most, at an agent that
#: answers requests during a turn (calibration's ``concurrent``): its answer ends the wait,
#: so this is paid only where the agent keeps one request waiting for the turn (a second turn
#: of the same session, a close that waits for the turn to stop).
BESIDE_S = 5.0
#: How often a held turn looks whether its prompt was answered before its model request came.
HELD_POLL_S = 0.02
#: How long a held turn waits, at most, for what the agent wrote before its model request to
#: be read (AgentProcess.caught_up: at once unless the reader thread is behind).
CAUGHT_UP_S = 2.0


def _config_choice(s: _Session, step: Mapping[str, Any]
                   ) -> tuple[str, tuple[str, ...], str] | None:
    """Option ``option`` (modulo their number, in the agent's order) of session ``s``'s
    select options, its values, and choice ``pick`` among the values other than its current
    one (``None``: it offered none)."""
    if not s.options:
        return None
    config_id = list(s.options)[int(step.get("option", 0)) % len(s.options)]
    values, current = s.options[config_id]
    others = [v for v in values if v != current]
    return config_id, values, others[int(step.get("pick", 0)) % len(others)]


def _config_set(s: _Session, choice: tuple[str, tuple[str, ...], str], result: Any,
                protocol: int) -> None:
    """A ``session/set_config_option`` of ``choice`` that the agent accepted: the option's
    value now, and the full list as the agent answered it."""
    s.options[choice[0]] = (choice[1], choice[2])
    s.note_offers(result, protocol)


def _other_mode(s: _Session, step: Mapping[str, Any]) -> str | None:
    """Choice ``pick`` (modulo their number) among the modes session ``s`` offered other
    than its current one (``None``: it offered no other)."""
    others = [m for m in s.modes if m != s.mode]
    return others[int(step.get("pick", 0)) % len(others)] if others else None


def _turn_over(turn: Pending | _TurnWait) -> bool:
    """Whether a turn in flight has ended: v1's answer came; in v2 the answer refused it, or
    its idle ``state_update`` came."""
    if isinstance(turn, Pending):
        return turn.done
    if turn.idle.event.is_set():
        return True
    return turn.request.done and turn.request.wait(0, give_up=False).outcome != "ok"


def _settle(pending: Pending | _TurnWait, seconds: float) -> None:
    """Wait up to ``seconds`` for ``pending``'s answer (a v2 turn: its end), leaving it in
    flight."""
    if isinstance(pending, Pending):
        pending.wait(seconds, give_up=False)
    else:
        pending.idle.event.wait(seconds)


def _ending(reply: Reply) -> dict[str, Any]:
    """How a request of a held turn ended, for its ``during`` verdict."""
    out: dict[str, Any] = {"outcome": reply.outcome}
    if isinstance(reply.result, Mapping) and "stopReason" in reply.result:
        out["stopReason"] = reply.result["stopReason"]
    if isinstance(reply.error, Mapping) and isinstance(reply.error.get("code"), int):
        out["code"] = reply.error["code"]
    return out


class _TurnEnd:
    """Recognises the ``idle`` ``state_update`` that ends a v2 turn of session ``sid``.

    Called on the transport's reader thread in arrival order. An idle that comes before the
    turn began (before the prompt's answer or a ``running`` update) belongs to something
    earlier, such as the state snapshot of a resume, and is not the turn's end."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.running = False
        self.request: Pending | None = None

    def __call__(self, method: str, params: Any) -> bool:
        if method != "session/update" or not isinstance(params, Mapping) \
                or params.get("sessionId") != self.sid:
            return False
        upd = params.get("update")
        if not isinstance(upd, Mapping) or upd.get("sessionUpdate") != "state_update":
            return False
        if upd.get("state") == "running":
            self.running = True
        # Until ``request`` is set the prompt is being written; its answer may already be
        # in (a fast agent): take the idle then, rather than wait for a turn that has ended.
        answered = self.request is None or self.request.done
        return upd.get("state") == "idle" and (self.running or answered)


class _TurnWait:
    """A v2 turn in flight, awaited like a request (:meth:`Run._await`): the answer to
    ``session/prompt`` (its ``messageId``), then the ``idle`` ``state_update``, both within
    the wait's time. The result is the answer's with the idle update's ``stopReason``."""

    def __init__(self, request: Pending, idle: Expectation) -> None:
        self.request = request
        self.idle = idle
        self._answer: Reply | None = None

    def wait(self, timeout: float, *, give_up: bool = True) -> Reply:
        until = time.monotonic() + timeout
        if self._answer is None:
            answer = self.request.wait(timeout, give_up=give_up)
            if answer.outcome == "timeout":
                if give_up:
                    self.idle.cancel()
                return answer
            self._answer = answer
            if answer.outcome != "ok":  # refused (or the agent went away): no turn runs
                self.idle.cancel()
                return answer
        answer = self._answer
        end = self.idle.wait(max(until - time.monotonic(), 0.0), give_up=give_up)
        if end.outcome != "ok":
            return Reply(end.outcome, id=answer.id)
        update = end.result.get("update", {}) if isinstance(end.result, Mapping) else {}
        result = dict(answer.result) if isinstance(answer.result, Mapping) else {}
        result["stopReason"] = update.get("stopReason")
        return Reply("ok", result=result, id=answer.id)


def _listed_ids(result: Any) -> list[str] | None:
    if not isinstance(result, Mapping) or not isinstance(result.get("sessions"), list):
        return None
    return [s["sessionId"] for s in result["sessions"]
            if isinstance(s, Mapping) and isinstance(s.get("sessionId"), str)]


def run_steps(spec: TargetSpec, steps: Sequence[Mapping[str, Any]], *, baseline: Baseline,
              strict: bool = False, gateway: Gateway | None = None,
              stop_on_failure: bool = False, ignore: Iterable[str] = (),
              fresh: Callable[[], Run] | None = None) -> tuple[History, list[Finding]]:
    """Run ``steps`` on a fresh agent and return the history and the findings over it.

    ``stop_on_failure`` ends the run at the first failing finding of an oracle not in
    ``ignore``. ``fresh`` hands out a fresh agent already started and initialized (a
    pre-spawned one, :meth:`_WarmRuns.take`); by default one is started here."""
    skip = set(ignore)
    judge = Evaluator(baseline=baseline, strict=strict)
    run = fresh() if fresh is not None else Run(spec, gateway=gateway).__enter__()
    try:
        if fresh is None:
            run.initialize()
        for step in steps:
            run.execute(step)
            if stop_on_failure:
                judge.feed(run.history.snapshot())
                if any(f.oracle not in skip and is_reported(f.severity)
                       for f in judge.findings()):
                    break
        run.close(grace=0)  # no restart follows: nothing will read the agent's state again
        events = run.history.snapshot()
    finally:
        run.close(grace=0)
    judge.feed(events)  # what arrived while closing (an exit, late stderr) counts too
    return History.from_events(events), judge.findings()
