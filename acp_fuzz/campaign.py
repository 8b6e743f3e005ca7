"""The fuzz campaign: probe, calibrate, search, shrink, confirm, record (engine).

:func:`run_campaign` is what ``acp-fuzz target`` runs:

1. **Probe**: start the agent, ``initialize``, read what it advertises.
2. **Calibrate**: two sessions without a client prompt, in different directories, one turn
   each; the system-slot lines they share are the agent's default instructions (the
   baseline that ``override.not-applied`` and ``append.replaced-default`` need).
3. **Search**: Hypothesis drives :class:`~acp_fuzz.strategies.LifecycleMachine`; every example
   gets a fresh agent process and a fresh HOME, and the oracles run after every step. A MUST or
   SHOULD finding fails the example, and Hypothesis shrinks it to the fewest steps and the
   smallest payload.
4. **Confirm**: the minimal steps are re-run ``confirm_runs`` times on fresh agents. A failure
   seen every time is ``failed``; one seen only sometimes is ``flaky``, with its rate.
5. **Record**: the minimal run is written as a cassette, the durable artifact for replay.

The engine reports progress as events (:class:`CampaignEvent` subclasses) to a callback; it
never prints and never imports the CLI.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from acp_fuzz import __version__
from acp_fuzz.cassette import Header, write_cassette_bounded
from acp_fuzz.database import AgentScoped, open_database
from acp_fuzz.dialects import resolve
from acp_fuzz.findings import Finding
from acp_fuzz.gateway import Gateway, UpstreamRecorder
from acp_fuzz.history import Event, History
from acp_fuzz.oracles import Baseline, Evaluator, learn_baseline
from acp_fuzz.payloads import Capabilities
from acp_fuzz.runner import HarnessError, Run, StepOutcome, TargetSpec
from acp_fuzz.scrub import Scrubber
from acp_fuzz.strategies import LifecycleMachine

__all__ = [
    "Calibrated",
    "CampaignEvent",
    "CampaignResult",
    "CampaignSettings",
    "Confirming",
    "ExampleDone",
    "FailureFound",
    "FindingReport",
    "Finished",
    "Started",
    "calibrate",
    "run_campaign",
    "run_steps",
]


@dataclass(frozen=True)
class CampaignSettings:
    """Knobs of a campaign. The defaults are what ``acp-fuzz target`` uses with no flags."""

    max_examples: int = 100
    seed: int = 0
    strict: bool = False
    max_steps: int = 12
    cassette_dir: Path = Path("cassettes")
    confirm_runs: int = 3
    #: A Hypothesis example database: a folder or a Redis URL (see :mod:`acp_fuzz.database`).
    database: str | None = None
    long_texts: bool = True
    #: Examples Hypothesis may run while shrinking a failure. A count, not a time limit, so
    #: that the same seed gives the same result on a fast and a slow machine.
    shrink_examples: int = 20
    #: Prepare the next example's agent (sandbox, spawn, initialize) while the current
    #: example runs. Agent start-up is most of an example's cost for fast agents.
    prespawn: bool = True
    #: Forward model requests to this real provider (base URL) instead of the fake replies;
    #: the upstream exchanges are recorded with vcrpy into each finding cassette ("vcr").
    model_upstream: str | None = None

    def __post_init__(self) -> None:
        if self.max_examples < 1:
            raise ValueError(f"max_examples={self.max_examples} must be at least 1")
        if self.max_steps < 1:
            raise ValueError(f"max_steps={self.max_steps} must be at least 1")
        if self.shrink_examples < 0:
            raise ValueError(f"shrink_examples={self.shrink_examples} must not be negative")
        if self.confirm_runs < 1:
            raise ValueError(f"confirm_runs={self.confirm_runs} must be at least 1")

    def to_wire(self) -> dict[str, Any]:
        return {"max_examples": self.max_examples, "seed": self.seed, "strict": self.strict,
                "max_steps": self.max_steps, "confirm_runs": self.confirm_runs,
                "long_texts": self.long_texts}


# -- events ----------------------------------------------------------------------------------------

class CampaignEvent:
    """Base class of what the engine reports while it works."""


@dataclass(frozen=True)
class Started(CampaignEvent):
    agent: Mapping[str, Any]
    caps: Capabilities
    initialize: Any


@dataclass(frozen=True)
class Calibrated(CampaignEvent):
    baseline: Baseline


@dataclass(frozen=True)
class ExampleDone(CampaignEvent):
    examples: int
    steps: int
    failing: bool


@dataclass(frozen=True)
class Confirming(CampaignEvent):
    steps: int


@dataclass(frozen=True)
class FailureFound(CampaignEvent):
    """The first failing example: shrinking starts."""

    oracles: tuple[str, ...]


@dataclass
class FindingReport:
    """A confirmed (or flaky) failure with its minimal reproduction."""

    status: str  # failed | flaky | unconfirmed (interrupted before the confirm runs)
    runs: int
    reproduced: int
    findings: list[Finding]
    steps: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    cassette: Path | None

    @property
    def rate(self) -> str:
        return f"{self.reproduced}/{self.runs}"

    @property
    def oracles(self) -> list[str]:
        return sorted({f.oracle for f in self.findings if f.severity != "info"})

    def to_wire(self) -> dict[str, Any]:
        return {"status": self.status, "runs": self.runs, "reproduced": self.reproduced,
                "findings": [f.to_wire() for f in self.findings], "steps": self.steps,
                "requests": self.requests,
                "cassette": str(self.cassette) if self.cassette else None}


@dataclass
class CampaignResult:
    agent: Mapping[str, Any]
    initialize: Any
    caps: Capabilities
    settings: CampaignSettings
    examples_run: int = 0
    steps_run: int = 0
    reports: list[FindingReport] = field(default_factory=list)
    info: list[Finding] = field(default_factory=list)
    interrupted: bool = False
    #: Model requests the gateway served over the whole campaign (calibration, search,
    #: shrinking, confirmation): ``turn`` (tied to a harness session), ``side`` and
    #: ``untied`` (not a side request, yet tied to no session; see ``Gateway.counts``).
    model_requests: dict[str, int] = field(default_factory=dict)

    def failing(self) -> bool:
        strict = self.settings.strict
        return any(f.severity == "MUST" or (strict and f.severity == "SHOULD")
                   for r in self.reports for f in r.findings)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failing() else 0


@dataclass(frozen=True)
class Finished(CampaignEvent):
    result: CampaignResult


# -- running steps ---------------------------------------------------------------------------------

class AgentBug(Exception):
    """Raised inside a Hypothesis example when an oracle fails; carries the findings."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        super().__init__("; ".join(f"{f.oracle} ({f.severity})" for f in findings))
        self.findings = list(findings)


def _interesting(findings: Sequence[Finding], strict: bool) -> list[Finding]:
    # SHOULD findings fail a Hypothesis example even without --strict, so that they are
    # shrunk and reported; --strict only decides the exit code (and promotes deferrals).
    return [f for f in findings if f.severity in ("MUST", "SHOULD")]


def run_steps(spec: TargetSpec, steps: Sequence[Mapping[str, Any]], *, baseline: Baseline,
              strict: bool = False, gateway: Gateway | None = None,
              stop_on_failure: bool = False) -> tuple[History, list[Finding]]:
    """Run ``steps`` on a fresh agent and return the history and the findings over it."""
    judge = Evaluator(baseline=baseline, strict=strict)
    with Run(spec, gateway=gateway) as run:
        run.initialize()
        for step in steps:
            run.execute(step)
            if stop_on_failure:
                judge.feed(run.history.snapshot())
                if _interesting(judge.findings(), strict):
                    break
        run.close(grace=0)  # no restart follows: nothing will read the agent's state again
        events = run.history.snapshot()
    judge.feed(events)  # what arrived while closing (an exit, late stderr) counts too
    return History.from_events(events), judge.findings()


def calibrate(spec: TargetSpec, *, gateway: Gateway | None = None
              ) -> tuple[Any, Capabilities, Baseline]:
    """Probe and calibrate: return the ``initialize`` result, the capabilities and the
    baseline (the agent's own default instructions)."""
    with Run(spec, gateway=gateway) as run:
        init = run.initialize()
        texts: list[str] = []
        for handle in ("baseline-1", "baseline-2"):
            out = run.execute({"op": "new", "session": handle, "cwd": "distinct"})
            if out.outcome != "ok":
                raise HarnessError("calibration: session/new without a systemPrompt failed: "
                                   + _why(run, out))
            out = run.execute({"op": "prompt", "session": handle})
            if out.outcome != "ok":
                raise HarnessError("calibration: the first prompt turn failed: " + _why(run, out))
            cwd = run.sessions[handle].cwd
            for _, x in run.history.model_exchanges():
                if x.session == handle and not x.side:
                    texts.append("\n".join(instruction_texts(x.texts("system"), cwd)))
                    break
        caps = run.caps
        run.close(grace=0)
    return init, caps, learn_baseline(texts)


def instruction_texts(system: Sequence[str], cwd: str) -> list[str]:
    """The system-slot texts of a baseline request that hold the agent's own instructions.

    A system-slot text that names the session's working directory is environment context
    (claude-agent-acp's ``role: "system"`` ``# Environment`` message with its skill and
    agent listings; codex's permission block): under ``override`` the agent may keep it
    (SP-AGENT-OVERRIDE-CONTEXT-MAY), so it is not part of the default instructions that
    ``override.not-applied`` looks for. When every text names the directory (one system
    message holding both, like the reference agent), all are kept: there is nothing to
    tell apart.
    """
    own = [t for t in system if cwd not in t]
    return own if any(t.strip() for t in own) else list(system)


def _why(run: Run, out: StepOutcome) -> str:
    """What went wrong with a step, in one line, with the agent's last stderr line."""
    if out.outcome == "error":
        why = f"error {_short(out.error)}"
    elif out.outcome == "timeout":
        why = f"no answer within {run.spec.request_timeout:g}s"
    elif out.outcome == "exited":
        why = "the agent exited"
    else:
        why = out.outcome
    return why + run.stderr_note()


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) < 200 else s[:200] + "..."


def requests_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The JSON-RPC requests and notifications the harness sent, in order."""
    return [dict(e.data["msg"]) for e in events
            if e.kind == "acp" and e.data.get("dir") == "send"
            and isinstance(e.data.get("msg"), Mapping) and "method" in e.data["msg"]]


def steps_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    return [dict(e.data["args"]) for e in events if e.kind == "step"]


# -- the campaign ----------------------------------------------------------------------------------

class _WarmRuns:
    """Hands out started and initialized runs; with ``prespawn``, the next one is prepared in
    a background thread while the current example runs.

    A prepared run leaves the shared gateway bound to the active run until :meth:`take`
    activates it, so model requests are never recorded in the wrong history."""

    def __init__(self, spec: TargetSpec, gateway: Gateway, *, prespawn: bool) -> None:
        self.spec = spec
        self.gateway = gateway
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="acp-fuzz-prespawn") \
            if prespawn else None
        self._next: Future[tuple[Run, HarnessError | None]] | None = None
        # Finished runs are stopped here, so that the next example starts at once.
        self._closer = ThreadPoolExecutor(1, thread_name_prefix="acp-fuzz-close")

    def retire(self, run: Run) -> None:
        """Stop a finished example's agent at once (no restart follows, so its state is
        never read again) on a background thread; the gateway is released first."""
        try:
            run.detach()
        finally:
            self._closer.submit(run.close, 0)

    def _prepare(self) -> tuple[Run, HarnessError | None]:
        run = Run(self.spec, gateway=self.gateway)
        try:
            run.start(activate=False)
            run.initialize()
        except HarnessError as e:
            return run, e
        return run, None

    def take(self) -> Run:
        """The next run, active. Raises :class:`HarnessError` if it could not initialize."""
        if self._pool is None:
            run, error = self._prepare()
        else:
            current = self._next or self._pool.submit(self._prepare)
            self._next = self._pool.submit(self._prepare)
            try:
                run, error = current.result()
            except BaseException:
                # Interrupted while waiting (Ctrl-C): the run being prepared is still ours
                # to close, whenever it is ready; close() waits for the pool to finish it.
                current.add_done_callback(lambda f: f.result()[0].close(grace=0))
                raise
        run.activate()
        if error is not None:
            run.close(grace=0)
            raise error
        return run

    def close(self) -> None:
        if self._next is not None:
            run, _ = self._next.result()
            run.close(grace=0)
            self._next = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._closer.shutdown(wait=True)


@dataclass
class _Failure:
    steps: list[dict[str, Any]]
    events: list[Event]
    findings: list[Finding]
    #: Values to scrub from the cassette (the same for every run of one target).
    secrets: frozenset[str] = frozenset()


def run_campaign(spec: TargetSpec, cfg: CampaignSettings,
                 on_event: Callable[[CampaignEvent], None] = lambda e: None,
                 *, database: ExampleDatabase | None = None) -> CampaignResult:
    """Run a whole campaign against ``spec``. Raises :class:`HarnessError` when the agent
    cannot be driven at all (it does not start, or cannot create a plain session)."""
    recorder = UpstreamRecorder() if cfg.model_upstream else None
    with Gateway(None, side_request=spec.side_request, upstream=cfg.model_upstream,
                 upstream_recorder=recorder) as gateway:
        init, caps, baseline = calibrate(spec, gateway=gateway)
        agent = init.get("agentInfo") if isinstance(init, Mapping) else None
        agent = dict(agent) if isinstance(agent, Mapping) else {}
        result = CampaignResult(agent=agent, initialize=init, caps=caps, settings=cfg)

        last: dict[str, _Failure] = {}
        info: dict[str, Finding] = {}
        budget = {"left": -1}  # shrink examples left; -1 until the first failure
        warm = _WarmRuns(spec, gateway, prespawn=cfg.prespawn)

        class Machine(LifecycleMachine):
            def __init__(self) -> None:
                super().__init__()
                self.steps: list[dict[str, Any]] = []
                # Past the shrink budget an example does nothing and passes: Hypothesis then
                # cannot improve on the last failure and stops quickly.
                self.spent = budget["left"] == 0
                if budget["left"] > 0:
                    budget["left"] -= 1
                if self.spent:
                    return
                self.judge = Evaluator(baseline=baseline, strict=cfg.strict)
                try:
                    self.run = warm.take()
                except HarnessError as e:
                    self.spent = True  # nothing to tear down
                    raise AgentBug([Finding("agent.crash", "MUST", "SES-AGENT-BASELINE-MUST",
                                            f"the agent did not initialize: {e}")]) from None

            def execute(self, step: dict[str, Any]) -> None:
                if self.spent:
                    return
                self.steps.append(step)
                self.run.execute(step)
                result.steps_run += 1
                self.judge.feed(self.run.history.snapshot())
                findings = self.judge.findings()
                for f in findings:
                    if f.severity == "info":
                        info.setdefault(f"{f.oracle}:{f.evidence.get('choice', '')}", f)
                bad = _interesting(findings, cfg.strict)
                if bad:
                    self.run.close(grace=0)
                    last["failure"] = _Failure(list(self.steps), self.run.history.snapshot(),
                                               findings, frozenset(self.run.secrets))
                    if budget["left"] < 0:
                        budget["left"] = cfg.shrink_examples
                        on_event(FailureFound(tuple(sorted({f.oracle for f in bad}))))
                    raise AgentBug(bad)

            def teardown(self) -> None:
                if self.spent:
                    return
                warm.retire(self.run)
                result.examples_run += 1
                on_event(ExampleDone(result.examples_run, result.steps_run,
                                     "failure" in last))

        Machine.caps = caps
        Machine.long_texts = cfg.long_texts
        Machine.resend_on_lifecycle = resolve(spec.dialect, init) == "standard"
        Machine.__name__ = Machine.__qualname__ = "AcpFuzzLifecycle"
        db = database
        if db is None and cfg.database:
            db = open_database(cfg.database)
        if db is not None:
            # One database may serve many campaigns (workers, machines, agents): keep each
            # agent's examples to itself, keyed by what it is, not by where it runs.
            db = AgentScoped(db, f"{agent.get('name')}@{agent.get('version')}"
                                  f"|{spec.profile or spec.argv[-1]}")
        hyp = settings(
            max_examples=cfg.max_examples,
            stateful_step_count=cfg.max_steps,
            deadline=None,
            database=db,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
            print_blob=False,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        )
        flaky = False
        try:
            on_event(Started(agent, caps, init))
            on_event(Calibrated(baseline))
            run_state_machine_as_test(seed(cfg.seed)(Machine), settings=hyp)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: Hypothesis has torn the example down (its agent is closed).
            # Keep what was found so far, unconfirmed, and stop.
            result.interrupted = True
        except AgentBug:
            pass
        except (Flaky, ExceptionGroup):
            # Hypothesis could not reproduce the failure it shrank to. Past the shrink budget
            # that is by design (the replay was a no-op); otherwise the failure is flaky. The
            # confirm runs below decide in both cases.
            flaky = budget["left"] != 0
        finally:
            warm.close()
        failure = last.get("failure")
        if failure is not None and not result.interrupted:
            on_event(Confirming(len(failure.steps)))
            try:
                result.reports.append(_confirm(spec, cfg, failure, baseline, gateway, init,
                                               flaky_hint=flaky))
            except KeyboardInterrupt:
                result.interrupted = True
        if failure is not None and result.interrupted and not result.reports:
            report = FindingReport(status="unconfirmed", runs=0, reproduced=0,
                                   findings=failure.findings, steps=failure.steps,
                                   requests=requests_of(failure.events), cassette=None)
            report.cassette = save_finding(spec, cfg, failure.events, report, baseline, init,
                                           gateway, secrets=failure.secrets)
            result.reports.append(report)
        result.info = sorted(info.values(), key=lambda f: f.oracle)
        result.model_requests = dict(gateway.counts)
    on_event(Finished(result))
    return result


def minimize_steps(spec: TargetSpec, failure: _Failure, baseline: Baseline, gateway: Gateway,
                   *, strict: bool) -> _Failure:
    """Make the failing steps 1-minimal: no single step can be dropped and still fail.

    Hypothesis shrinks the draws, but for stateful tests it does not promise that no step can
    be deleted (a restart that changes nothing for the failure can survive its shrinker, and a
    step that a later one refers to can only go once that one is gone). So, on top:

    1. the smallest forms first (:func:`_short_forms`): each payload the steps sent on a
       fresh ``session/new``, alone, with one turn, or re-sent by the load, resume or fork
       the failure used (what most systemPrompt bugs reduce to);
    2. delete steps one at a time, sweeping again until a whole sweep deletes nothing;
    3. simplify each payload (fewer, shorter blocks), where the failure allows;
    4. rename the sessions A, B, ... in order of appearance.

    A trial only counts when it fails with one of the same oracles.
    """
    oracles = {f.oracle for f in _interesting(failure.findings, strict)}

    def attempt(trial: list[dict[str, Any]]) -> _Failure | None:
        if not trial or not _references_ok(trial):
            return None
        history, findings = run_steps(spec, trial, baseline=baseline, strict=strict,
                                      gateway=gateway, stop_on_failure=True)
        if oracles & {f.oracle for f in _interesting(findings, strict)}:
            return _Failure(trial, history.snapshot(), findings, failure.secrets)
        return None

    best = failure
    for trial in _short_forms(best.steps):
        if len(trial) >= len(best.steps):
            continue
        found = attempt(trial)
        if found is not None:
            best = found
            break
    changed = True
    while changed and len(best.steps) > 1:
        changed = False
        i = 0
        while i < len(best.steps) and len(best.steps) > 1:
            found = attempt(best.steps[:i] + best.steps[i + 1:])
            if found is not None:
                best, changed = found, True
            else:
                i += 1
    # 3. the smallest payload: each one simplified everywhere it occurs (a re-sent prompt
    #    must stay identical to the original), keeping the canary at the end of its text.
    for sp in _payloads(best.steps):
        for smaller in _simpler_payloads(sp):
            found = attempt(_replace_payload(best.steps, sp, smaller))
            if found is not None:
                best = found
                break
    # 4. readable names: sessions A, B, ... in order of appearance (checked like the rest).
    renamed = _canonical_handles(best.steps)
    if renamed != best.steps and (found := attempt(renamed)) is not None:
        best = found
    return best


def _canonical_handles(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    names: dict[str, str] = {}

    def name(h: str) -> str:
        return names.setdefault(h, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(names) % 26])

    out = []
    for s in steps:
        t = dict(s)
        for key in ("session", "new"):
            if isinstance(t.get(key), str):
                t[key] = name(t[key])
        out.append(t)
    return out


def _payloads(steps: Sequence[Mapping[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for s in steps:
        if "systemPrompt" in s and s["systemPrompt"] not in out:
            out.append(s["systemPrompt"])
    return out


def _simpler_payloads(sp: Any) -> list[dict[str, Any]]:
    """Smaller variants of a valid payload: one short block, then every block cut to its
    last 64 characters (the canary sits at the end of the last non-blank block)."""
    if not (isinstance(sp, Mapping) and isinstance(sp.get("content"), list)
            and all(isinstance(b, Mapping) and isinstance(b.get("text"), str)
                    for b in sp["content"]) and sp["content"]):
        return []
    blocks = sp["content"]
    tail = next((b["text"] for b in reversed(blocks) if b["text"].strip()), "")
    one = {**sp, "content": [{"type": "text", "text": tail[-64:]}]}
    cut = {**sp, "content": [{**b, "text": b["text"][-64:]} for b in blocks]}
    return [c for c in (one, cut) if c != sp]


def _replace_payload(steps: Sequence[Mapping[str, Any]], old: Any, new: Any
                     ) -> list[dict[str, Any]]:
    return [{**s, "systemPrompt": new} if "systemPrompt" in s and s["systemPrompt"] == old
            else dict(s) for s in steps]


def _short_forms(steps: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
    """Canonical short sequences built from the payloads and operations of ``steps``,
    shortest first: most systemPrompt bugs reduce to one of these shapes, which step
    deletion alone cannot always reach (a prompt set by ``load`` rather than ``new``)."""
    payloads = _payloads(steps)
    ops = [s["op"] for s in steps]
    forms: list[list[dict[str, Any]]] = []
    for sp in payloads:
        new = {"op": "new", "session": "A", "systemPrompt": sp}
        turn = {"op": "prompt", "session": "A"}
        forms += [[new], [new, turn],
                  # the shape of a leak: the prompt given to one session, a turn in another
                  [new, {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}]]
        for op in ("load", "resume"):
            if op in ops:
                again = {"op": op, "session": "A", "systemPrompt": sp}
                forms.append([new, again, turn])
                if "restart" in ops:
                    forms.append([new, {"op": "restart"}, again, turn])
        if "fork" in ops:
            forms.append([new, {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp},
                          {"op": "prompt", "session": "B"}])
    return sorted(forms, key=len)


def _references_ok(steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a trial obeys the lifecycle machine's own preconditions.

    A step on a session no earlier step created would be skipped by the runner, and a turn on
    a session that a restart or a close unloaded (and no load or resume re-attached) asks a
    correct agent for an error: such trials prove nothing, or prove the wrong thing, so they
    are not tried."""
    made: set[str] = set()
    loaded: set[str] = set()
    for s in steps:
        op, handle = s["op"], str(s.get("session"))
        if op == "new":
            made.add(handle)
            loaded.add(handle)
        elif op == "restart":
            loaded.clear()
        elif op in ("load", "resume"):
            if handle not in made:
                return False
            loaded.add(handle)
        elif op in ("prompt", "cancel", "close", "fork"):
            if handle not in loaded:
                return False
            if op == "close":
                loaded.discard(handle)
            elif op == "fork":
                made.add(s["new"])
                loaded.add(s["new"])
    return True


def _confirm(spec: TargetSpec, cfg: CampaignSettings, failure: _Failure, baseline: Baseline,
             gateway: Gateway, init: Any, *, flaky_hint: bool) -> FindingReport:
    failure = minimize_steps(spec, failure, baseline, gateway, strict=cfg.strict)
    oracles = {f.oracle for f in _interesting(failure.findings, cfg.strict)}
    reproduced = 0
    for i in range(cfg.confirm_runs):
        last = i == cfg.confirm_runs - 1
        if last and gateway.upstream_recorder is not None:
            # With a real model upstream, the cassette must carry exactly the calls of its own
            # run: the last confirmation run records into a fresh recorder and becomes it.
            gateway.upstream_recorder = UpstreamRecorder()
        history, findings = run_steps(spec, failure.steps, baseline=baseline,
                                      strict=cfg.strict, gateway=gateway)
        if oracles & {f.oracle for f in _interesting(findings, cfg.strict)}:
            reproduced += 1
            if last and gateway.upstream_recorder is not None:
                failure = _Failure(failure.steps, history.snapshot(), findings,
                                   failure.secrets)
    status = "failed" if reproduced == cfg.confirm_runs and not flaky_hint else "flaky"
    report = FindingReport(status=status, runs=cfg.confirm_runs, reproduced=reproduced,
                           findings=failure.findings, steps=failure.steps,
                           requests=requests_of(failure.events), cassette=None)
    report.cassette = save_finding(spec, cfg, failure.events, report, baseline, init, gateway,
                                   secrets=failure.secrets)
    return report


def save_finding(spec: TargetSpec, cfg: CampaignSettings, events: Sequence[Event],
                 report: FindingReport, baseline: Baseline, init: Any,
                 gateway: Gateway | None = None, *, secrets: Iterable[str] = ()) -> Path | None:
    """Write the minimal failing run as a cassette named after its oracle, and return its
    path; ``None`` (with a warning) when not even a clipped cassette could be written.

    Everything is scrubbed first (:mod:`acp_fuzz.scrub`): header, events, attachments, and
    the report's own findings, steps and requests, which the JSON and JUnit reports show.
    A cassette too large or odd to write as recorded is written clipped
    (:func:`~acp_fuzz.cassette.write_cassette_bounded`): the finding is never lost."""
    scrubber = Scrubber(secrets)
    report.findings = [Finding.from_wire(scrubber.value(f.to_wire())) for f in report.findings]
    report.steps = scrubber.value(report.steps)
    report.requests = scrubber.value(report.requests)
    primary = report.oracles[0] if report.oracles else "finding"
    name = re.sub(r"[^a-z0-9.-]+", "-", f"{primary}-seed{cfg.seed}").strip("-")
    path = cfg.cassette_dir / f"{name}.cassette"
    try:
        header = Header(
            format=1, acp_fuzz_version=__version__, target=list(spec.argv), seed=cfg.seed,
            settings={**cfg.to_wire(), "baseline": baseline.to_wire(), "profile": spec.profile,
                      "dialect": resolve(spec.dialect, init)},
            kind="finding", initialize=init,
            meta={"status": report.status, "runs": report.runs, "reproduced": report.reproduced,
                  "findings": [f.to_wire() for f in report.findings]})
        attachments = {}
        if gateway is not None and gateway.upstream_recorder is not None:
            attachments["vcr"] = gateway.upstream_recorder.to_bytes()
        # A secret the agent echoed (stderr, a model request, its agentInfo, the baseline,
        # an upstream recording) must not travel with a bug report.
        header, clean, attachments = scrubber.cassette(header, events, attachments)
        cfg.cassette_dir.mkdir(parents=True, exist_ok=True)
        return write_cassette_bounded(path, header, clean, attachments)
    except (OSError, ValueError, TypeError, MemoryError) as e:
        warnings.warn(f"acp-fuzz: the cassette {path} could not be written "
                      f"({type(e).__name__}: {e}); the finding is in the report",
                      RuntimeWarning, stacklevel=2)
        return None
