"""The fuzz campaign: probe, calibrate, search, shrink, confirm, record (engine).

:func:`run_campaign` is what ``acp-fuzz target`` runs:

1. **Probe**: start the agent, ``initialize``, read what it advertises.
2. **Calibrate**: two sessions without a client prompt, in different directories, one turn
   each; the system-slot lines they share are the agent's default instructions (the
   baseline that ``override.not-applied`` and ``append.replaced-default`` need).
3. **Cover**: the examples of an example database are replayed first; then the covering
   examples (:mod:`acp_fuzz.strategies.cover`) send every lifecycle op the agent supports and
   every invalid payload variant on every request that carries a prompt, whatever the seed.
   They count as examples, and are judged, shrunk and confirmed as any other.
4. **Search**: Hypothesis drives :class:`~acp_fuzz.strategies.LifecycleMachine`; every example
   gets a fresh agent process and a fresh HOME, and the oracles run after every step. A MUST or
   SHOULD finding fails the example, and Hypothesis shrinks it to the fewest steps and the
   smallest payload.
5. **Confirm**: the minimal steps are re-run ``confirm_runs`` times on fresh agents. A failure
   seen every time is ``failed``; one seen only sometimes is ``flaky``, with its rate.
6. **Record**: the minimal run is written as a cassette, the durable artifact for replay.

The engine reports progress as events (:class:`CampaignEvent` subclasses) to a callback; it
never prints and never imports the CLI.
"""

from __future__ import annotations

import re
import time
import unittest
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, cast

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings, statistics
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from acp_fuzz.core.calibration import (
    ROUND_TRIP_METHOD,
    SETTLE_SECONDS,
    Learned,
    choose_restart_grace,
    exit_path,
)
from acp_fuzz.core.cassette import Header
from acp_fuzz.core.dialects import resolve
from acp_fuzz.core.events import (
    Calibrated,
    CampaignEvent,
    Confirming,
    ExampleDone,
    FailureFound,
    ShrankToKnown,
    Shrinking,
    Started,
)
from acp_fuzz.core.facts import Codes, add_codes, refusal_codes
from acp_fuzz.core.findings import CATALOG, Finding, Status, is_failure, is_reported
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.minimize import (
    Failure,
    Shape,
    Shrinker,
    interesting,
    refusals,
    same_bug,
    shape_of,
)
from acp_fuzz.core.oracles import Baseline, Evaluator, learn_baseline
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.protocol import agent_info
from acp_fuzz.core.reports import Report
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.core.side_requests import SideLog, beside_turns
from acp_fuzz.core.steps import advertises_compact, steps_of
from acp_fuzz.core.version import __version__
from acp_fuzz.core.workspace import Facts as WorkspaceFacts
from acp_fuzz.core.workspace import add_facts, workspace_facts
from acp_fuzz.engine.campaign import interrupt
from acp_fuzz.engine.campaign.database import AgentScoped, open_database
from acp_fuzz.engine.campaign.deadlines import Deadlines
from acp_fuzz.engine.campaign.diagnosis import CalibrationError, diagnose_run
from acp_fuzz.engine.campaign.literals import no_source_literals
from acp_fuzz.engine.campaign.merging import COMMON, merge_fields
from acp_fuzz.engine.campaign.recording import scrubber_for, target_settings, write_scrubbed
from acp_fuzz.engine.campaign.runner import HarnessError, Run, StepOutcome, TargetSpec, run_steps
from acp_fuzz.engine.gateway import Gateway, UpstreamRecorder
from acp_fuzz.engine.process.transport import Expectation
from acp_fuzz.strategies import (
    Cover,
    LifecycleMachine,
    cover_keys,
    cover_share,
    covering_examples,
    example_digest,
    step_keys,
)

__all__ = [
    "Calibrated",
    "Calibration",
    "CampaignEvent",
    "CampaignResult",
    "CampaignSettings",
    "Confirming",
    "ExampleDone",
    "FailureFound",
    "FindingReport",
    "InfoReport",
    "SearchMachine",
    "SearchState",
    "ShrankToKnown",
    "Shrinking",
    "Started",
    "agent_scope",
    "calibrate",
    "learn",
    "run_campaign",
    "run_steps",
    "steps_of",
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
    #: A Hypothesis example database: a folder or a Redis URL (see
    #: :mod:`acp_fuzz.engine.campaign.database`).
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
    #: Stop after this many distinct failures (``--max-failures``; ``-x`` is 1). Each costs a
    #: shrink and ``confirm_runs`` re-runs, minutes against a slow agent: ten is more than
    #: the distinct bugs of any agent measured so far, and bounds an agent broken so badly
    #: that every oracle fails in many shapes.
    max_failures: int = 10
    #: Oracles whose findings do not fail an example and are not reported
    #: (``--exclude-oracle``: a known bug, while the search looks for others).
    exclude_oracles: tuple[str, ...] = ()
    #: Write a cassette for each distinct info observation too (``--keep-info``).
    keep_info: bool = False
    #: Generate no new example after this many seconds of search (``acp-fuzz matrix
    #: --time-budget``); a failure being shrunk when it runs out is still shrunk and
    #: confirmed. ``None``: no limit. A wall-clock budget makes *how many* examples run
    #: depend on the machine, so a budgeted campaign is deterministic only up to that count.
    time_budget: float | None = None
    #: Write cassettes without this machine's paths (:func:`acp_fuzz.core.scrub.portable`: the
    #: interpreter and the agents cache): for cassettes meant to be committed or published
    #: (``acp-fuzz matrix`` sets it).
    portable: bool = False
    #: Open the search with the covering examples (:mod:`acp_fuzz.strategies.cover`): every
    #: lifecycle op and every invalid payload variant, sent at every seed. They count towards
    #: ``max_examples`` (16 for the reference agent; a smaller ``max_examples`` runs only the
    #: first ones).
    cover: bool = True
    #: Run only the covering examples (``--cover-only``): no search after them.
    cover_only: bool = False
    #: ``(i, n)``: this campaign is worker ``i`` of ``n`` (``--workers``, ``--shard``), and runs
    #: the covering examples ``i``, ``i + n``, ``i + 2n``, ... of the plan, so that the workers
    #: share them.
    cover_share: tuple[int, int] = (0, 1)
    #: ``(k, n)``: this campaign is shard ``k`` (0-based) of ``n`` (``--shard K/N``, on as many
    #: machines): its search runs the examples ``k``, ``k + n``, ``k + 2n``, ... of what
    #: Hypothesis draws at the seed, so that the shards never run one example twice
    #: (:meth:`SearchState.skips`); ``max_examples`` is the shard's own. Set ``cover_share``
    #: to the same share for its covering examples.
    shard: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        if self.max_examples < 1:
            raise ValueError(f"max_examples={self.max_examples} must be at least 1")
        if self.max_steps < 1:
            raise ValueError(f"max_steps={self.max_steps} must be at least 1")
        if self.shrink_examples < 0:
            raise ValueError(f"shrink_examples={self.shrink_examples} must not be negative")
        if self.confirm_runs < 1:
            raise ValueError(f"confirm_runs={self.confirm_runs} must be at least 1")
        if self.max_failures < 1:
            raise ValueError(f"max_failures={self.max_failures} must be at least 1")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ValueError(f"time_budget={self.time_budget} must be positive")
        if self.cover_only and not self.cover:
            raise ValueError("cover_only needs cover: there would be nothing to run")
        for name, (i, n) in (("cover_share", self.cover_share), ("shard", self.shard)):
            if not 0 <= i < n:
                raise ValueError(f"{name}={(i, n)} must be (i, n) with 0 <= i < n")
        unknown = sorted(set(self.exclude_oracles) - set(CATALOG))
        if unknown:
            raise ValueError(f"unknown oracle {unknown[0]!r} (known: {', '.join(sorted(CATALOG))})")

    def to_wire(self) -> dict[str, Any]:
        return {"max_examples": self.max_examples, "seed": self.seed, "strict": self.strict,
                "max_steps": self.max_steps, "confirm_runs": self.confirm_runs,
                "long_texts": self.long_texts}


@dataclass(kw_only=True)
class FindingReport(Report):
    """A confirmed (or flaky) failure of an agent with its minimal reproduction: the
    :class:`~acp_fuzz.core.reports.Report` of both directions, with the steps of that
    reproduction and the requests they sent."""

    steps: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    #: What shrinking did (:meth:`~acp_fuzz.core.minimize.Shrinker.summary`): steps before
    #: and after, trials, and each pass's trials and successes; empty when not shrunk here.
    shrink: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        shared = super().to_wire()
        cassette = shared.pop("cassette")  # after the steps and requests, as it always was
        return {**shared, "steps": self.steps, "requests": self.requests,
                "cassette": cassette, "shrink": self.shrink}


@dataclass
class InfoReport:
    """A distinct info observation (oracle and choice) with its evidence: the shortest
    steps that showed it (a prefix of the example that did: never longer), an excerpt of
    the system slot of the model request it rests on, and with ``keep_info`` a cassette."""

    finding: Finding
    steps: list[dict[str, Any]]
    excerpt: str = ""
    cassette: Path | None = None

    def to_wire(self) -> dict[str, Any]:
        return {**self.finding.to_wire(), "steps": self.steps, "excerpt": self.excerpt,
                "cassette": str(self.cassette) if self.cassette else None}


@dataclass
class CampaignResult:
    agent: Mapping[str, Any]
    initialize: Any
    caps: Capabilities
    settings: CampaignSettings
    examples_run: int = 0
    steps_run: int = 0
    #: One report per distinct failure, in the order found.
    reports: list[FindingReport] = field(default_factory=list)
    #: One finding per distinct info observation (oracle and choice), by oracle.
    info: list[Finding] = field(default_factory=list)
    #: The same observations with their evidence: the shortest steps that showed each, an
    #: excerpt of what reached the model, and (``keep_info``) a cassette.
    info_reports: list[InfoReport] = field(default_factory=list)
    #: Failing examples that a failure already found explained (counted, not shrunk again).
    explained: int = 0
    interrupted: bool = False
    #: Model requests the gateway served over the whole campaign (calibration, search,
    #: shrinking, confirmation): ``turn`` (tied to a harness session), ``side`` and
    #: ``untied`` (not a side request, yet tied to no session; see ``Gateway.counts``).
    model_requests: dict[str, int] = field(default_factory=dict)
    #: The deadlines learned from the agent, and how many waits took the full timeout
    #: (:meth:`acp_fuzz.engine.campaign.deadlines.Deadlines.to_wire`).
    deadlines: dict[str, Any] = field(default_factory=dict)
    #: (oracle, rule) -> how many times the examples gave that oracle something to judge
    #: (:meth:`acp_fuzz.core.oracles.Evaluator.judged`): a rule with checks and no finding was
    #: *tested and followed*; one with none was not tested at all.
    judged: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The error codes of the examples' refused requests that carried a prompt, by payload
    #: class (:func:`acp_fuzz.core.facts.refusal_codes`): information, never a verdict.
    error_codes: Codes = field(default_factory=dict)
    #: Which workspace instruction files reached the model, per prompt mode
    #: (:func:`acp_fuzz.core.workspace.workspace_facts`): information, never a verdict.
    workspace: WorkspaceFacts = field(default_factory=dict)
    #: The search stopped generating examples at ``settings.time_budget``.
    out_of_time: bool = False
    #: What the covering examples cover for this agent, whether they ran or not
    #: (``strategies.cover.cover_keys``: ``op:load``, ``new:content-empty``,
    #: ``fork:mode-spelling:"replace"``, ...) ...
    cover_keys: list[str] = field(default_factory=list)
    #: ... and, for every key any example sent (covering or drawn), the example (1-based, in
    #: this campaign; with workers, the earliest in any worker) that first sent it.
    coverage: dict[str, int] = field(default_factory=dict)
    #: How many covering examples ran, and the seconds they took (shrinking, confirming and
    #: recording their failures included).
    covering_examples: int = 0
    covering_seconds: float = 0.0
    #: The digest (:func:`acp_fuzz.strategies.example_digest`) of each covering example run,
    #: in order: shards and workers together run each example of the plan once.
    covering: list[str] = field(default_factory=list)
    #: What calibration learned, and how (None: a result made by hand).
    learned: Learned | None = None
    #: The model requests beside the turns (side and untied), each distinct one with its
    #: count, from calibration (example 0) and every example.
    side_requests: SideLog = field(default_factory=SideLog)
    #: The cassette of the shortest example that sent an untied request (``None``: none did,
    #: or it could not be written).
    untied_cassette: Path | None = None
    #: Of ``examples_run``, the runs Hypothesis made to shrink a failure (the engine's own
    #: count), and the draws it discarded (invalid or overrun test cases outside its shrink
    #: phase, from its statistics): the rest were drawn (:attr:`drawn`).
    shrink_runs: int = 0
    discarded: int = 0
    #: Runs outside the examples: the campaign's own shrink passes' trials
    #: (:func:`~acp_fuzz.core.minimize.minimize`) and the confirmation runs.
    shrink_trials: int = 0
    confirm_runs: int = 0
    #: Every oracle that failed an example of the search, with its finding in the shortest
    #: such example (:meth:`note_failing`): the ones no report names are :meth:`absorbed`.
    seen_failing: dict[str, Finding] = field(default_factory=dict)

    @property
    def drawn(self) -> int:
        """The examples drawn (covering, replayed from a database, generated) that counted:
        neither shrinking runs nor discarded draws. ``--max-examples`` is their budget (the
        search's rounds count its discarded draws against it too)."""
        return max(self.examples_run - self.shrink_runs - self.discarded, 0)

    def unsent(self) -> list[str]:
        """The cover keys no example sent (a ``max_examples`` smaller than the covering
        examples, a time budget, a request that could not be sent)."""
        return [k for k in self.cover_keys if k not in self.coverage]

    def add_judged(self, judged: Mapping[tuple[str, str], int]) -> None:
        for key, n in judged.items():
            self.judged[key] = self.judged.get(key, 0) + n

    def note_failing(self, findings: Sequence[Finding],
                     steps: Sequence[Mapping[str, Any]] = ()) -> None:
        """Keep, for each oracle that failed an example, its finding in the shortest such
        example, with that example's ``steps`` as its evidence (what a reader of an
        unconfirmed failure has to go on)."""
        for f in findings:
            kept = self.seen_failing.get(f.oracle)
            if kept is None or len(steps) < len(kept.evidence.get("example_steps", ())):
                self.seen_failing[f.oracle] = Finding(
                    f.oracle, f.severity, f.rule, f.message, f.step, f.session,
                    {"example_steps": [dict(s) for s in steps]})

    def absorbed(self) -> list[Finding]:
        """The oracles that failed an example of the search but that no report names: the
        example's failure shrank to one found already (or one found already explained it),
        so this oracle's failure was never confirmed on its own. Never a pass: the matrix
        shows such a rule as unconfirmed, and the report says how to search for it alone
        (``--oracle``)."""
        named = {f.oracle for r in self.reports for f in r.findings}
        return [f for o, f in sorted(self.seen_failing.items()) if o not in named]

    def failing(self) -> bool:
        strict = self.settings.strict
        return any(is_failure(f, strict=strict) for r in self.reports for f in r.findings)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failing() else 0

    @classmethod
    def merge(cls, results: Sequence[CampaignResult],
              settings: CampaignSettings) -> CampaignResult:
        """One result from several campaigns of one agent (the workers of ``--workers``):
        each field as :data:`MERGE` says, so a field added to this class must say how it
        merges (``tests/cover/test_target_wire.py`` fails until it does). Each bug is
        reported once: a report is kept unless one kept before is the same bug
        (:func:`acp_fuzz.core.minimize.same_bug`, the campaign's own rule)."""
        first = results[0]
        out = cls(agent=first.agent, initialize=first.initialize, caps=first.caps,
                  settings=settings)
        merge_fields(out, results, MERGE, _MERGERS)
        out.info = [i.finding for i in out.info_reports]
        return out


def _same_bug_once(reports: Sequence[Sequence[FindingReport]]) -> list[FindingReport]:
    kept: list[tuple[set[str], Any, set[tuple[str, object, str]]]] = []
    out = []
    for rep in (r for rs in reports for r in rs):
        new = (set(rep.oracles), shape_of(rep.steps), refusals(rep.findings))
        if not any(same_bug(*k, *new) for k in kept):
            kept.append(new)
            out.append(rep)
    return out


def _shortest_info(reports: Sequence[Sequence[InfoReport]]) -> list[InfoReport]:
    best: dict[tuple[str, Any], InfoReport] = {}
    for i in (i for rs in reports for i in rs):
        key = (i.finding.oracle, i.finding.evidence.get("choice"))
        if key not in best or len(i.steps) < len(best[key].steps):
            best[key] = i
    return sorted(best.values(), key=lambda i: i.finding.oracle)


def _sum_codes(codes: Sequence[Codes]) -> Codes:
    out: Codes = {}
    for c in codes:
        add_codes(out, c)
    return out


def _sum_workspace(facts: Sequence[WorkspaceFacts]) -> WorkspaceFacts:
    out: WorkspaceFacts = {}
    for f in facts:
        add_facts(out, f)
    return out


def _earliest(maps: Sequence[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for k, n in m.items():
            out[k] = min(n, out.get(k, n))
    return out


#: How each field of :class:`CampaignResult` merges (:meth:`CampaignResult.merge`): ``first``
#: the first result's, ``given`` the merge's own argument, ``derived`` computed from other
#: fields, and otherwise the name of a merger in :data:`_MERGERS`.
MERGE: dict[str, str] = {
    "agent": "first", "initialize": "first", "caps": "first", "settings": "given",
    "examples_run": "sum", "steps_run": "sum", "reports": "same-bug-once",
    "info": "derived", "info_reports": "shortest-info", "explained": "sum",
    "interrupted": "any", "model_requests": "sum-counts", "deadlines": "deadlines",
    "judged": "sum-counts", "error_codes": "sum-codes", "workspace": "sum-workspace",
    "out_of_time": "any",
    "cover_keys": "union", "coverage": "earliest", "covering_examples": "sum",
    # The seconds each spent on its share (workers run theirs at once, shards on other
    # machines): summed, the work the covering examples cost, not a wall time.
    "covering_seconds": "sum", "covering": "concat",
    # Each worker calibrates on its own; the facts of the first stand for all (they are the
    # same agent's, learned by the same rule).
    "learned": "first", "side_requests": "side-log", "untied_cassette": "first-set",
    "shrink_runs": "sum", "discarded": "sum", "shrink_trials": "sum", "confirm_runs": "sum",
    "seen_failing": "first-by-key",
}
_MERGERS: dict[str, Callable[[list[Any]], Any]] = {
    **COMMON, "max": lambda xs: max(xs, default=0.0),
    "same-bug-once": _same_bug_once, "shortest-info": _shortest_info,
    # Workers' deadlines once were dropped from the merged result.
    "sum-codes": _sum_codes, "sum-workspace": _sum_workspace,
    "earliest": _earliest,
    "deadlines": Deadlines.merged,
    "union": lambda xs: list(dict.fromkeys(k for x in xs for k in x)),
    "side-log": SideLog.merged,
    "first-by-key": lambda xs: {k: v for x in reversed(xs) for k, v in x.items()},
}


# -- running steps ---------------------------------------------------------------------------------

class AgentBug(Exception):
    """Raised inside a Hypothesis example when an oracle fails; carries the findings."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        super().__init__("; ".join(f"{f.oracle} ({f.severity})" for f in findings))
        self.findings = list(findings)


@dataclass(frozen=True)
class Calibration:
    """What :func:`learn` found: the ``initialize`` result, the capabilities (with what the
    calibration sessions offered), the baseline, and the facts learned and how
    (:class:`~acp_fuzz.core.calibration.Learned`)."""

    init: Any
    caps: Capabilities
    baseline: Baseline
    learned: Learned
    #: The calibration run's history.
    events: list[Event] = field(default_factory=list)


def calibrate(spec: TargetSpec, *, gateway: Gateway | None = None
              ) -> tuple[Any, Capabilities, Baseline]:
    """Probe and calibrate: return the ``initialize`` result, the capabilities and the
    baseline (the agent's own default instructions); :func:`learn` gives the learned facts
    too. A failed prompt turn raises :class:`~acp_fuzz.engine.campaign.diagnosis.CalibrationError`,
    which carries the diagnosis."""
    c = learn(spec, gateway=gateway)
    return c.init, c.caps, c.baseline


def learn(spec: TargetSpec, *, gateway: Gateway | None = None) -> Calibration:
    """Probe and calibrate (see :func:`calibrate`), collect what arrives after the
    calibration turns by the rule of :mod:`acp_fuzz.core.calibration` (a round trip, then a
    bounded wait only if no command list came), and measure how the agent exits."""
    # The gateway's counts of this calibration alone: a shared gateway may have served more.
    before = dict(gateway.counts) if gateway is not None else None
    with Run(spec, gateway=gateway) as run:
        init = run.initialize()
        # Watched before the first session exists: the list may come before its answer.
        listed = run.agent.expect(_lists_commands)
        texts: list[str] = []
        first: float | None = None
        concurrent: bool | None = None
        for handle in ("baseline-1", "baseline-2"):
            out = run.execute({"op": "new", "session": handle, "cwd": "distinct"})
            if out.outcome != "ok":
                raise HarnessError("calibration: session/new without a systemPrompt failed: "
                                   + _why(run, out))
            first = time.monotonic() if first is None else first
            # The second turn is held at the fake model while a request is written: whether
            # the agent answers it then (acp_fuzz.core.calibration).
            step = {"op": "prompt", "session": handle}
            if handle == "baseline-2":
                out, concurrent = run.probe_concurrency(step)
            else:
                out = run.execute(step)
            if out.outcome != "ok":
                # What the gateway saw of the turn, and what to do (acp-fuzz doctor's text).
                raise CalibrationError("calibration: the first prompt turn failed: "
                                       + _why(run, out),
                                       diagnose_run(run, out, counts_before=before))
            for _, x in run.history.model_exchanges():
                if x.session == handle and not x.side:
                    texts.append("\n".join(instruction_texts(x.texts("system"),
                                                             run.sessions[handle].cwd)))
                    break
        learned = replace(_settle_facts(run, listed, first), concurrent=concurrent)
        # Modes and config options are offered per session, not in initialize: the strategies
        # draw set_mode (set_config_option) only where the calibration sessions had some.
        # v2 has no session/set_mode: modes are config options there.
        # Likewise a compaction command: advertised per session (available_commands_update),
        # so a compact step sends it only where the calibration sessions were offered one.
        caps = replace(run.caps, set_mode=learned.modes and run.protocol == 1,
                       set_config_option=learned.config_options,
                       compact_command=learned.compact_command is not None)
        learned = _measure_exit(run, learned)
    return Calibration(init, caps, learn_baseline(texts), learned, run.history.snapshot())


def _lists_commands(method: str, params: Any) -> bool:
    """An ``available_commands_update`` (any commands): the agent has listed its commands."""
    update = params.get("update") if isinstance(params, Mapping) else None
    return method == "session/update" and isinstance(update, Mapping) \
        and update.get("sessionUpdate") == "available_commands_update"


def _settle_facts(run: Run, listed: Expectation, first: float | None) -> Learned:
    """The facts the calibration sessions showed, read after the round trip and, when no
    command list came by then, a wait bounded at :data:`SETTLE_SECONDS` from ``first`` (the
    first session's answer)."""
    reply = run.agent.request(ROUND_TRIP_METHOD, {},
                              timeout=min(run.spec.request_timeout, ROUND_TRIP_TIMEOUT))
    in_result = any("id" in m and advertises_compact(m.get("result"))
                   for _, m in run.history.acp_messages("recv") if isinstance(m, Mapping))
    waited = 0.0
    if not (listed.event.is_set() or in_result):
        waited = SETTLE_SECONDS
        spent = time.monotonic() - first if first is not None else 0.0
        listed.wait(max(SETTLE_SECONDS - spent, 0.0))
    listed.cancel()
    sessions = [run.sessions[h] for h in ("baseline-1", "baseline-2") if h in run.sessions]
    return Learned(compact_command=run.compact_command(),
                   modes=any(len(s.modes) >= 2 for s in sessions),
                   config_options=any(bool(s.options) for s in sessions),
                   round_trip=reply.outcome, waited=waited,
                   commands_listed=(listed.event.is_set() and listed.reply.outcome == "ok")
                   or in_result)


def _measure_exit(run: Run, learned: Learned) -> Learned:
    """Close the calibration agent's input and see how it exits (within the shutdown grace,
    then ``SIGTERM``): the restart grace that calls for (:func:`choose_restart_grace`),
    unless the profile sets one (then the agent is stopped at once, nothing measured)."""
    spec = run.spec
    if spec.restart_grace is not None:
        run.close(grace=0)
        return replace(learned, restart_grace=spec.restart_grace, grace_source="profile")
    mark = run.history.append("process", {"what": "exit-probe", "grace": spec.shutdown_grace})
    run.agent.close(spec.shutdown_grace)
    path, seconds = exit_path(run.history.snapshot(), mark.seq)
    grace = choose_restart_grace(path, seconds, spec.shutdown_grace)
    measured = path in ("end-of-input", "sigterm", "sigkill")
    return replace(learned, exit=path, exit_seconds=seconds, restart_grace=grace,
                   grace_source="measured" if measured else "default")


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
    return why + run.stderr_note(exited=out.outcome == "exited")


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) < 200 else s[:200] + "..."


def requests_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The JSON-RPC requests and notifications the harness sent, in order."""
    return [dict(e.data["msg"]) for e in events
            if e.kind == "acp" and e.data.get("dir") == "send"
            and isinstance(e.data.get("msg"), Mapping) and "method" in e.data["msg"]]


# -- the campaign ----------------------------------------------------------------------------------

#: The round trip waits at most this long (or the request timeout, if shorter): every agent
#: answers an unknown method at once, and one that does not must not cost a whole timeout.
ROUND_TRIP_TIMEOUT = 10.0

#: How many runs ``_WarmRuns`` keeps prepared ahead. Two: an example of a real agent can be
#: shorter than its start-up (codex-acp's initialize is 0.6 s on a quiet machine, several
#: seconds on a busy one; see docs/performance.md, "real agents").
PRESPAWN_DEPTH = 2


class _WarmRuns:
    """Hands out started and initialized runs, each a fresh agent (examples, shrink trials,
    confirmations); with ``prespawn``, the next :data:`PRESPAWN_DEPTH` are prepared in
    background threads while the current one runs.

    A prepared run leaves the shared gateway bound to the active run until :meth:`take`
    activates it, so model requests are never recorded in the wrong history."""

    def __init__(self, spec: TargetSpec, gateway: Gateway, *, prespawn: bool) -> None:
        self.spec = spec
        self.gateway = gateway
        self._pool = ThreadPoolExecutor(PRESPAWN_DEPTH, thread_name_prefix="acp-fuzz-prespawn") \
            if prespawn else None
        self._ready: deque[Future[tuple[Run, HarnessError | None]]] = deque()
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
            while len(self._ready) <= PRESPAWN_DEPTH:
                self._ready.append(self._pool.submit(self._prepare))
            current = self._ready.popleft()
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
        while self._ready:
            run, _ = self._ready.popleft().result()
            run.close(grace=0)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._closer.shutdown(wait=True)


@dataclass
class _Known:
    """A distinct failure found so far: its minimal shape and oracles, and its report."""

    shape: Shape
    oracles: frozenset[str]
    report: FindingReport | None
    seen: int = 1

    def refusals(self) -> set[tuple[str, object, str]]:
        return refusals(self.report.findings) if self.report is not None else set()


#: After this many shrinks of one oracle's failures ended in a known reproduction, further
#: failures of that oracle that no known reproduction explains are counted, not shrunk: a
#: bug that shows in many shapes (a global prompt leaks into every later session) would
#: otherwise cost a full shrink for each example it fails.
DUPLICATE_SHRINKS = 2


@dataclass
class SearchState:
    """What the search machine's examples share: the target, the settings, the runs, and
    what the campaign found so far. :func:`run_campaign` builds one per campaign and binds it
    to :class:`SearchMachine` with :meth:`SearchMachine.bound`."""

    spec: TargetSpec
    cfg: CampaignSettings
    baseline: Baseline
    warm: _WarmRuns
    result: CampaignResult
    on_event: Callable[[CampaignEvent], None]
    known: list[_Known] = field(default_factory=list)
    info: dict[str, InfoReport] = field(default_factory=dict)
    #: Shrinks per oracle that ended in a reproduction already known.
    duplicates: dict[str, int] = field(default_factory=dict)
    #: The current round's new failure (None until one is seen).
    failure: Failure | None = None
    #: Shrink examples left in this round; -1 until its failure.
    shrink_left: int = -1
    #: Examples the current round generated (its failing example included).
    generated: int = 0
    #: Failing examples that a known failure explained (not shrunk again).
    explained_count: int = 0
    #: The shortest example that sent an untied request: its steps, events and secrets.
    untied: tuple[list[dict[str, Any]], list[Event], frozenset[str]] | None = None
    #: When the search started (``time.monotonic``), for ``cfg.time_budget``.
    started: float = field(default_factory=time.monotonic)
    #: In a shard's search round: its share of the draws (``cfg.shard``; None outside such a
    #: round), the examples Hypothesis drew in the round, and how many the shard may still
    #: run in it (None: as many as its share of the draws).
    share: tuple[int, int] | None = None
    drawn: int = 0
    budget: int | None = None

    def out_of_time(self) -> bool:
        budget = self.cfg.time_budget
        return budget is not None and time.monotonic() - self.started >= budget

    def new_round(self) -> None:
        self.failure, self.shrink_left, self.generated, self.drawn = None, -1, 0, 0

    def skips(self) -> bool:
        """Whether the example Hypothesis just drew is not this shard's to run: another
        shard's (each runs every ``n``-th draw of the round), or one past its budget.

        Why a shard's share is every n-th draw at the one seed, not a seed of its own (``seed
        + k``): the machine is blind to the agent (:mod:`acp_fuzz.strategies.lifecycle`), so
        what Hypothesis draws at a seed is the same in every shard (its one other input, the
        round's ``max_examples``, is the same in every shard too: see :func:`run_campaign`),
        and N shards of M examples run what one campaign of N * M examples runs, split N
        ways (tests/integration/test_shards.py). At seeds of their own, every shard would
        open with Hypothesis' simplest example (its first draw, whatever the seed) and the
        small ones grown from it: the same examples in every shard. Nor a database key per
        shard: the key does not change what is drawn, and the shards would no longer share
        the failures they found. A draw a shard does not run costs no agent, only the
        drawing (about 20 ms for the reference agent's machine)."""
        if self.share is None:
            return False
        k, n = self.share
        self.drawn += 1
        return (self.drawn - 1) % n != k or (self.budget is not None
                                             and self.generated >= self.budget)

    def failing(self, findings: Sequence[Finding]) -> list[Finding]:
        """The findings that fail an example (MUST, SHOULD), minus ``--exclude-oracle``."""
        skip = set(self.cfg.exclude_oracles)
        return [f for f in interesting(findings) if f.oracle not in skip]

    def explained(self, steps: Sequence[Mapping[str, Any]], oracles: set[str],
                  findings: Sequence[Finding] = ()) -> bool:
        """Whether known failures account for a failing example: each of its oracles is one
        of a known failure that is the same bug (:func:`acp_fuzz.core.minimize.same_bug`: its
        minimal steps occur in it, ending at its failing step, or it refused with the same
        error), or one whose failures were shrunk into known ones often enough already."""
        shape = shape_of(steps)
        refused = refusals(findings)
        covered: set[str] = set()
        for k in self.known:
            if same_bug(k.oracles, k.shape, k.refusals(), oracles, shape, refused):
                covered |= k.oracles
                k.seen += 1
        known = set().union(*(k.oracles for k in self.known)) if self.known else set()
        for o in oracles - covered:
            # ``duplicates`` counts shrinks that ended in a known reproduction, also for an
            # oracle the report does not name but that came with it (a global prompt leaks
            # into B *and* is lost from A). Such an oracle is covered only beside a known
            # one: failing alone, it may be a bug of its own, and is shrunk.
            if self.duplicates.get(o, 0) >= DUPLICATE_SHRINKS and (o in known or oracles & known):
                covered.add(o)
        return oracles <= covered

    def note_beside(self, steps: Sequence[Mapping[str, Any]], run: Run) -> None:
        """Keep an example's side and untied requests as evidence, and the shortest example
        that sent an untied one (its cassette is written at the end)."""
        events = run.history.snapshot()
        found = self.result.side_requests.add(events, self.result.examples_run + 1)
        if any(r.kind == "untied" for r in found) and (
                self.untied is None or len(steps) < len(self.untied[0])):
            self.untied = ([dict(x) for x in steps], events, frozenset(run.secrets))

    def note_info(self, findings: Sequence[Finding], steps: Sequence[Mapping[str, Any]],
                  events: Sequence[Event]) -> None:
        """Keep each distinct info observation with the shortest steps that showed it."""
        for f in findings:
            if is_reported(f.severity):
                continue
            key = f"{f.oracle}:{f.evidence.get('choice', '')}"
            upto = [dict(s) for s in (steps[:f.step + 1] if f.step >= 0 else steps)]
            seen = self.info.get(key)
            if seen is None or len(upto) < len(seen.steps):
                self.info[key] = InfoReport(f, upto, _excerpt(events, f))


def _shrink_budget(cfg: CampaignSettings, bad: Sequence[Finding]) -> int:
    """Examples Hypothesis may shrink a failure with. None for a hang alone: each of its trials
    that hangs costs a whole (learned) deadline, and :func:`~acp_fuzz.core.minimize.minimize`
    reaches the minimum anyway (a hang is most often one request: its first short form)."""
    if all(f.oracle == "agent.hang" for f in bad):
        return 0
    return cfg.shrink_examples


class SearchMachine(LifecycleMachine):
    """The campaign's Hypothesis machine: each example runs on a fresh agent, and the oracles
    judge it after every step.

    A failure that known failures explain (:meth:`SearchState.explained`) ends the example
    quietly, so that the search goes on; a new one raises :class:`AgentBug`, and Hypothesis
    shrinks it within the shrink budget. Use :meth:`bound` to get a class to run."""

    search: ClassVar[SearchState]

    @classmethod
    def bound(cls, search: SearchState, *, caps: Capabilities, long_texts: bool,
              resend_on_lifecycle: bool) -> type[SearchMachine]:
        """A subclass bound to ``search``. Named ``AcpFuzzLifecycle`` whatever the agent:
        the example database's key is derived from the name."""
        return type("AcpFuzzLifecycle", (cls,), {
            "search": search, "caps": caps, "long_texts": long_texts, "huge_texts": True,
            "resend_on_lifecycle": resend_on_lifecycle, "__qualname__": "AcpFuzzLifecycle"})

    def __init__(self) -> None:
        super().__init__()
        s = self.search
        self.steps: list[dict[str, Any]] = []
        self.done = False  # a known failure ended this example: the rest does nothing
        #: A covering example goes on after a failure that known ones explain (its later
        #: requests are still to be sent); those findings are set aside here, by (oracle, step).
        self.persist = False
        self.excused: set[tuple[str, int]] = set()
        # Past the shrink budget an example does nothing and passes: Hypothesis then
        # cannot improve on the round's failure and stops quickly.
        self.spent = s.shrink_left == 0
        #: A run Hypothesis makes to shrink the round's failure (counted apart).
        self.shrinking = s.shrink_left > 0
        if s.shrink_left > 0:
            s.shrink_left -= 1
        if not self.spent and s.shrink_left < 0 and s.out_of_time():
            # Out of time: no new example runs (a no-op passes at once, so Hypothesis
            # runs out of examples quickly). Shrinking a failure already found goes on.
            self.spent = True
            s.result.out_of_time = True
        if not self.spent and s.shrink_left < 0 and s.skips():
            self.spent = True
        if self.spent:
            return
        if s.shrink_left < 0:
            s.generated += 1
        self.judge = Evaluator(baseline=s.baseline, strict=s.cfg.strict)
        try:
            self.run = s.warm.take()
        except HarnessError as e:
            self.spent = True  # nothing to tear down
            crash = [Finding("agent.crash", "MUST", "SES-AGENT-BASELINE-MUST",
                             f"the agent did not initialize: {e}")]
            if not s.failing(crash):
                return
            raise AgentBug(crash) from None

    def execute(self, step: dict[str, Any]) -> None:
        if self.spent or self.done:
            return
        s = self.search
        self.steps.append(step)
        out = self.run.execute(step)
        s.result.steps_run += 1
        if out.outcome != "skipped":
            for key in step_keys(step, self.caps, self.steps[:-1]):
                s.result.coverage.setdefault(key, s.result.examples_run + 1)
        events = self.run.history.snapshot()
        self.judge.feed(events)
        findings = [f for f in self.judge.findings() if (f.oracle, f.step) not in self.excused]
        s.note_info(findings, self.steps, events)
        bad = s.failing(findings)
        if not bad:
            return
        s.result.note_failing(bad, self.steps)
        if s.failure is None and s.explained(self.steps, {f.oracle for f in bad}, bad):
            if not self.excused:
                s.explained_count += 1
            if self.persist:
                self.excused |= {(f.oracle, f.step) for f in bad}
                return
            self.done = True
            return
        self.run.close(grace=0)
        s.failure = Failure(list(self.steps), self.run.history.snapshot(), findings,
                            frozenset(self.run.secrets))
        if s.shrink_left < 0:
            s.shrink_left = _shrink_budget(s.cfg, bad)
            s.on_event(FailureFound(tuple(sorted({f.oracle for f in bad}))))
        raise AgentBug(bad)

    def teardown(self) -> None:
        if self.spent:
            return
        s = self.search
        s.note_beside(self.steps, self.run)
        s.warm.retire(self.run)
        s.result.add_judged(self.judge.judged())
        events = self.run.history.snapshot()
        add_codes(s.result.error_codes, refusal_codes(events))
        add_facts(s.result.workspace, workspace_facts(events))
        s.result.examples_run += 1
        s.result.shrink_runs += self.shrinking
        s.on_event(ExampleDone(s.result.examples_run, s.result.steps_run,
                               s.failure is not None, example_digest(self.steps)))


def run_campaign(spec: TargetSpec, cfg: CampaignSettings,
                 on_event: Callable[[CampaignEvent], None] = lambda e: None,
                 *, database: ExampleDatabase | None = None) -> CampaignResult:
    """Run a whole campaign against ``spec``. Raises :class:`HarnessError` when the agent
    cannot be driven at all (it does not start, or cannot create a plain session).

    The search goes on after a failure: each new failure is shrunk, compared with the ones
    found before (by oracle and by the shape of its minimal steps), and, when it is a new
    one, confirmed and written as a cassette. It ends after ``max_examples`` generated
    examples, or at ``max_failures`` distinct failures."""
    recorder = UpstreamRecorder() if cfg.model_upstream else None
    # Every run of the campaign learns from the agent's answer times and waits accordingly.
    spec = replace(spec, deadlines=Deadlines(spec.request_timeout))
    with Gateway(None, side_request=spec.side_test(), upstream=cfg.model_upstream,
                 upstream_recorder=recorder) as gateway:
        cal = learn(spec, gateway=gateway)
        init, caps, baseline = cal.init, cal.caps, cal.baseline
        # Every run of the campaign (and, through the cassettes, every replay) uses these.
        spec = replace(spec, learned=cal.learned)
        agent = dict(agent_info(init))
        result = CampaignResult(agent=agent, initialize=init, caps=caps, settings=cfg,
                                learned=cal.learned)
        result.side_requests.add(cal.events, 0)
        warm = _WarmRuns(spec, gateway, prespawn=cfg.prespawn)
        search = SearchState(spec, cfg, baseline, warm, result, on_event)
        resend = resolve(spec.dialect, init) == "standard"
        machine = SearchMachine.bound(search, caps=caps, long_texts=cfg.long_texts,
                                      resend_on_lifecycle=resend)
        db = _database(database, cfg, agent, spec)
        result.cover_keys = cover_keys(caps, resend_on_lifecycle=resend)
        rounds = _Rounds(search, machine, gateway, init, db, resend=resend)
        try:
            # Inside the try: an interrupt while the CLI renders these is an interrupt of
            # the campaign (exit 130 with a report), not of its start.
            on_event(Started(agent, caps, init))
            on_event(Calibrated(baseline, cal.learned))
            rounds.run()
        except BaseException as exc:
            # Ctrl-C or SIGTERM: Hypothesis has torn the example down (its agent is closed).
            # Keep what was found so far, the last failure unconfirmed, and stop. An interrupt
            # that lands in Hypothesis' own set-up can come out as another error (an
            # AssertionError raised while handling it): a stop was asked for all the same.
            if not isinstance(exc, KeyboardInterrupt) and not interrupt.requested():
                raise
            interrupt.acknowledge()
            result.interrupted = True
            rounds.pending = rounds.pending or search.failure
        finally:
            warm.close()
        rounds.finish()
    return result


def _database(database: ExampleDatabase | None, cfg: CampaignSettings,
              agent: Mapping[str, Any], spec: TargetSpec) -> ExampleDatabase | None:
    """The example database of the campaign (the one given, else ``cfg.database`` opened),
    keyed by the agent; ``None`` without one."""
    db = database
    if db is None and cfg.database:
        db = open_database(cfg.database)
    if db is not None:
        db = AgentScoped(db, agent_scope(agent, spec))
    return db


def agent_scope(agent: Mapping[str, Any], spec: TargetSpec) -> str:
    """What keeps an agent campaign's examples apart in a shared database: the agent's
    ``agentInfo`` name and version, and its profile (else the last word of its command)."""
    # One database may serve many campaigns (workers, machines, agents, clients): keep each
    # agent's examples to itself, keyed by what it is, not by where it runs.
    return f"{agent.get('name')}@{agent.get('version')}|{spec.profile or spec.argv[-1]}"


class _Rounds:
    """The rounds of one calibrated campaign (the database's failures, the covering
    examples, then Hypothesis' search at successive seeds) and what they share: how many
    examples they generated, and the failure not yet settled."""

    def __init__(self, search: SearchState, machine: type[SearchMachine], gateway: Gateway,
                 init: Any, db: ExampleDatabase | None, *, resend: bool) -> None:
        self.search, self.machine, self.gateway, self.init, self.db = (
            search, machine, gateway, init, db)
        self.cfg, self.result, self.resend = search.cfg, search.result, resend
        # A shard's search rounds draw for all the shards (see hypothesis() below).
        self.planned = len(covering_examples(machine.caps, resend_on_lifecycle=resend,
                                             max_steps=self.cfg.max_steps)) \
            if self.cfg.cover and self.cfg.shard[1] > 1 else 0
        self.generated = 0
        self.pending: Failure | None = None  # a failure not yet confirmed when interrupted

    def run(self) -> None:
        """Run every round the settings ask for, while :meth:`more` allows."""
        cfg = self.cfg
        if self.db is not None:
            # What the database holds first: the failures other campaigns found (the
            # covering examples' own failures are found again by the covering examples).
            self.hypothesis(cfg.seed, [Phase.reuse, Phase.shrink])
        if cfg.cover and self.more():
            _cover(self.search, self.machine, resend=self.resend, settle=self.settle,
                   more=self.more)
        round_ = 0
        while self.more() and not cfg.cover_only:
            # Each round at its own seed: the same seed would re-draw the examples the
            # last round already ran. Only the first lets Hypothesis shrink: the
            # campaign's own passes reach the same minimum (tests/quality), and
            # Hypothesis' budget was most of a round. No round replays the database
            # again: its failures are known by then, and a replay that no longer fails
            # would delete them from it.
            phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if round_ == 0
                                                         else [])
            if not self.hypothesis(cfg.seed + round_, phases, first=round_ == 0):
                break  # the examples ran out without a new failure
            round_ += 1

    def settle(self, flaky: bool) -> bool:
        """Count the examples of the stage that ended, and shrink, confirm and record its
        failure; whether it had one."""
        self.generated += self.search.generated
        self.pending = self.search.failure
        if self.pending is None:
            return False
        _settle(self.search, self.pending, self.gateway, self.init, flaky_hint=flaky)
        self.pending = None
        return True

    def more(self) -> bool:
        """Whether the campaign may run another example."""
        cfg, result = self.cfg, self.result
        return self.generated < cfg.max_examples and len(result.reports) < cfg.max_failures \
            and not result.out_of_time

    def hypothesis(self, seed_: int, phases: list[Phase], *, first: bool = True) -> bool:
        """One Hypothesis round: until its first new failure, or the examples run out;
        whether it had a failure (``first``: the search's first round)."""
        cfg, search = self.cfg, self.search
        search.new_round()
        budget = cfg.max_examples - self.generated
        if cfg.shard[1] > 1 and Phase.generate in phases:
            # A shard's round draws for all the shards, and each runs its share
            # (SearchState.skips). Hypothesis draws what the seed and its max_examples
            # say, so every shard gives it the same count: what one campaign of N * M
            # examples has left after all the covering examples (the whole plan, which
            # the shards run between them). The first round runs its share of those
            # whole; a later one (after this shard's own failure) up to its budget.
            search.share = cfg.shard
            search.budget = None if first else budget
            budget = max(1, cfg.shard[1] * cfg.max_examples - self.planned)
        hyp = settings(
            max_examples=budget,
            stateful_step_count=cfg.max_steps,
            deadline=None,
            database=self.db,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
            print_blob=False,
            phases=phases,
        )
        flaky = False
        try:
            # Typed as holding None (its default); it takes a callback.
            collector = cast(Any, statistics.collector)
            with collector.with_value(_count_discarded(self.result)), no_source_literals():
                run_state_machine_as_test(seed(seed_)(self.machine), settings=hyp)
        except AgentBug:
            pass
        except (Flaky, ExceptionGroup):
            # Hypothesis could not reproduce the failure it shrank to. Past the shrink
            # budget that is by design (the replay was a no-op); otherwise the failure
            # is flaky. The confirm runs below decide in both cases.
            flaky = search.shrink_left != 0
        except unittest.SkipTest:
            pass  # a database replay with nothing to replay
        finally:
            search.share = search.budget = None
        return self.settle(flaky)

    def finish(self) -> None:
        """Fill in the rest of the result once the rounds ended: the failure an interrupt
        left unconfirmed, the info observations (and their cassettes with ``keep_info``),
        the untied requests, the model requests counted and the deadlines learned."""
        search, cfg, result, gateway, init = (self.search, self.cfg, self.result,
                                              self.gateway, self.init)
        spec, baseline, pending = search.spec, search.baseline, self.pending
        if pending is not None and result.interrupted:
            report = FindingReport(status=Status.UNCONFIRMED, runs=0, reproduced=0,
                                   findings=_kept(cfg, pending.findings), steps=pending.steps,
                                   requests=requests_of(pending.events), cassette=None)
            report.cassette = save_finding(spec, cfg, pending.events, report, baseline, init,
                                           gateway, secrets=pending.secrets,
                                           suffix=_suffix(result, report))
            result.reports.append(report)
        result.info_reports = sorted(search.info.values(), key=lambda i: i.finding.oracle)
        result.info = [i.finding for i in result.info_reports]
        result.explained = search.explained_count
        if cfg.keep_info and not result.interrupted:
            for i, rep in enumerate(result.info_reports):
                _keep_info(search, rep, gateway, init, i)
        if search.untied is not None:
            result.untied_cassette = save_untied(spec, cfg, *search.untied, baseline, init)
        result.model_requests = dict(gateway.counts)
        result.deadlines = spec.deadlines.to_wire() if spec.deadlines else {}


#: Hypothesis' phases whose test cases are drawn (the rest shrink or explain a failure).
_DRAWING_PHASES = ("explicit-phase", "reuse-phase", "generate-phase", "target-phase")


def _count_discarded(result: CampaignResult) -> Callable[[Mapping[str, Any]], None]:
    """A Hypothesis statistics callback that adds the round's discarded draws (invalid or
    overrun test cases of the drawing phases) to ``result.discarded``. The statistics are
    Hypothesis' own format, read defensively: a field it renames counts nothing."""
    def note(stats: Mapping[str, Any]) -> None:
        for phase in _DRAWING_PHASES:
            cases = stats.get(phase, {}).get("test-cases", []) \
                if isinstance(stats.get(phase), Mapping) else []
            result.discarded += sum(1 for c in cases if isinstance(c, Mapping)
                                    and c.get("status") in ("invalid", "overrun"))
    return note


def _cover(search: SearchState, machine: type[SearchMachine], *, resend: bool,
           settle: Callable[[bool], bool], more: Callable[[], bool]) -> None:
    """Run this campaign's share of the covering examples (:mod:`acp_fuzz.strategies.cover`),
    each on a fresh agent like a search example, judged after every step; a new failure is
    shrunk, confirmed and recorded (``settle``) before the next.

    An example that ends before all its requests were sent (a new failure, a crash, a hang)
    leaves them to the next covering example, which is built for what is still unsent; one
    that sends nothing new gives its requests up (they cannot be sent to this agent, e.g.
    after every ``session/new`` with a prompt was refused). A failure that a known one
    explains does not end a covering example: the rest of its requests still go out."""
    cfg, caps, result = search.cfg, machine.caps, search.result
    index, n = cfg.cover_share
    todo = [k for k in cover_share(caps, index, n, resend_on_lifecycle=resend,
                                   max_steps=cfg.max_steps) if k not in result.coverage]
    # One of several (--workers, --shard) runs the plan's own examples i, i + n, ... as they
    # are, so that the n campaigns together run each once, and builds new ones only for what
    # those left unsent. Alone, it builds each next example for all that is unsent (the
    # plan's next one when nothing was cut short), so what a failure cut short goes out next.
    planned = covering_examples(caps, resend_on_lifecycle=resend,
                                max_steps=cfg.max_steps)[index::n] if n > 1 else []
    t0 = time.monotonic()
    try:
        _cover_plan(search, machine, todo, planned, resend=resend, settle=settle, more=more)
    finally:
        result.covering_seconds += time.monotonic() - t0


def _cover_plan(search: SearchState, machine: type[SearchMachine], todo: list[str],
                planned: list[Cover], *, resend: bool, settle: Callable[[bool], bool],
                more: Callable[[], bool]) -> None:
    """Run the ``planned`` covering examples, then new ones until the keys ``todo`` are sent
    (or cannot be)."""
    cfg, caps, result = search.cfg, machine.caps, search.result
    while todo and more():
        if planned:
            example = planned.pop(0)
            if not set(example.keys) & set(todo):
                continue  # all sent already (by an example of the database)
        else:
            examples = covering_examples(caps, resend_on_lifecycle=resend,
                                         max_steps=cfg.max_steps, keys=todo)
            if not examples:
                return  # nothing sends what is left (a key only a neighbour's step covered)
            example = examples[0]
        search.new_round()
        m: SearchMachine | None = None
        try:
            m = machine()
            if m.spent:
                return  # out of time
            m.persist = True
            for step in example.steps:
                m.execute(dict(step))
        except AgentBug:
            if m is None:
                return  # the agent does not initialize: the search's first example says so
        finally:
            if m is not None:
                m.teardown()
        result.covering_examples += 1
        result.covering.append(example.digest)
        settle(False)
        gave_up = set() if set(todo) & set(result.coverage) else set(example.keys)
        todo = [k for k in todo if k not in result.coverage and k not in gave_up]


def _excerpt(events: Sequence[Event], f: Finding, width: int = 300) -> str:
    """The system slot of the model request a finding rests on, clipped to ``width``."""
    seq = f.evidence.get("model_event")
    for e, x in History.from_events(events).model_exchanges():
        if e.seq == seq:
            text = "\n".join(x.texts("system"))
            return text if len(text) <= width else text[:width] + "..."
    return ""


def _keep_info(search: SearchState, rep: InfoReport, gateway: Gateway, init: Any,
               index: int) -> None:
    """Re-run an info observation's steps and write them as a cassette (``--keep-info``)."""
    history, findings = run_steps(search.spec, rep.steps, baseline=search.baseline,
                                  strict=search.cfg.strict, gateway=gateway)
    shown = [f for f in findings if f.oracle == rep.finding.oracle]
    report = FindingReport(status=Status.INFO, runs=1, reproduced=1 if shown else 0,
                           findings=shown or [rep.finding], steps=rep.steps,
                           requests=requests_of(history.snapshot()), cassette=None)
    rep.cassette = save_finding(search.spec, search.cfg, history.snapshot(), report,
                                search.baseline, init, gateway,
                                suffix=f"-info{index + 1}")


def _kept(cfg: CampaignSettings, findings: Sequence[Finding]) -> list[Finding]:
    skip = set(cfg.exclude_oracles)
    return [f for f in findings if f.oracle not in skip]


def _suffix(result: CampaignResult, report: FindingReport) -> str:
    """``-2``, ``-3``, ... for the second, third, ... report whose cassette would have the
    same name (the same primary oracle)."""
    primary = report.oracles[:1]
    n = sum(1 for r in result.reports if r.oracles[:1] == primary)
    return f"-{n + 1}" if n else ""


def _settle(search: SearchState, failure: Failure, gateway: Gateway, init: Any, *,
            flaky_hint: bool) -> None:
    """Shrink a round's failure; if it is a new one, confirm it and write its cassette."""
    cfg, spec, baseline = search.cfg, search.spec, search.baseline

    def run(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        search.result.shrink_trials += 1
        history, findings = run_steps(spec, trial, baseline=baseline, strict=cfg.strict,
                                      gateway=gateway, stop_on_failure=True,
                                      ignore=cfg.exclude_oracles, fresh=search.warm.take)
        return history.snapshot(), findings

    search.on_event(Shrinking(len(failure.steps)))
    shrinker = Shrinker(failure, run, oracles=failure.oracles() - set(cfg.exclude_oracles))
    small = shrinker.shrink()
    oracles = frozenset(o for o in small.oracles() if o not in cfg.exclude_oracles)
    shape = shape_of(small.steps)
    refused = refusals(small.findings)
    for k in search.known:
        if same_bug(k.oracles, k.shape, k.refusals(), oracles, shape, refused):
            k.seen += 1
            # Count the oracles the example failed before shrinking too: shrinking kept only
            # what the known bug shows, and the others came with it.
            absorbed = oracles | (failure.oracles() - set(cfg.exclude_oracles))
            for o in absorbed:
                search.duplicates[o] = search.duplicates.get(o, 0) + 1
            search.on_event(ShrankToKnown(tuple(sorted(absorbed)), tuple(sorted(k.oracles))))
            return
    search.on_event(Confirming(len(small.steps)))
    report = _confirm(spec, cfg, small, baseline, gateway, init, flaky_hint=flaky_hint,
                      suffix_of=search.result, fresh=search.warm.take)
    report.shrink = shrinker.summary(len(failure.steps))
    search.result.confirm_runs += report.runs
    search.result.reports.append(report)
    search.known.append(_Known(shape, oracles, report))


def _confirm(spec: TargetSpec, cfg: CampaignSettings, failure: Failure, baseline: Baseline,
             gateway: Gateway, init: Any, *, flaky_hint: bool,
             suffix_of: CampaignResult, fresh: Callable[[], Run] | None = None
             ) -> FindingReport:
    """Re-run the minimal steps ``confirm_runs`` times on fresh agents; write the cassette."""
    oracles = failure.oracles()
    reproduced = 0
    for i in range(cfg.confirm_runs):
        last = i == cfg.confirm_runs - 1
        if last and gateway.upstream_recorder is not None:
            # With a real model upstream, the cassette must carry exactly the calls of its own
            # run: the last confirmation run records into a fresh recorder and becomes it.
            gateway.upstream_recorder = UpstreamRecorder()
        history, findings = run_steps(spec, failure.steps, baseline=baseline,
                                      strict=cfg.strict, gateway=gateway, fresh=fresh)
        if oracles & {f.oracle for f in interesting(findings)}:
            reproduced += 1
            if last and gateway.upstream_recorder is not None:
                failure = Failure(failure.steps, history.snapshot(), findings,
                                  failure.secrets)
    status = Status.FLAKY if flaky_hint else Status.of(reproduced, cfg.confirm_runs)
    report = FindingReport(status=status, runs=cfg.confirm_runs, reproduced=reproduced,
                           findings=_kept(cfg, failure.findings), steps=failure.steps,
                           requests=requests_of(failure.events), cassette=None)
    report.cassette = save_finding(spec, cfg, failure.events, report, baseline, init, gateway,
                                   secrets=failure.secrets, suffix=_suffix(suffix_of, report))
    return report


def save_finding(spec: TargetSpec, cfg: CampaignSettings, events: Sequence[Event],
                 report: FindingReport, baseline: Baseline, init: Any,
                 gateway: Gateway | None = None, *, secrets: Iterable[str] = (),
                 suffix: str = "") -> Path | None:
    """Write the minimal failing run as a cassette named after its oracle (``suffix`` tells
    apart the distinct failures of one oracle in one campaign), and return its path;
    ``None`` (with a warning) when not even a clipped cassette could be written.

    Everything is scrubbed first (:mod:`acp_fuzz.core.scrub`): header, events, attachments, and
    the report's own findings, steps and requests, which the JSON and JUnit reports show.
    A cassette too large or odd to write as recorded is written clipped
    (:func:`~acp_fuzz.core.cassette.write_cassette_bounded`): the finding is never lost."""
    scrubber = scrubber_for(spec, secrets)
    report.findings = [Finding.from_wire(scrubber.value(f.to_wire())) for f in report.findings]
    report.steps = scrubber.value(report.steps)
    report.requests = scrubber.value(report.requests)
    primary = report.oracles[0] if report.oracles else "finding"
    path = cfg.cassette_dir / f"{_stem(primary, cfg.seed, suffix)}.cassette"
    header = Header(
        format=1, acp_fuzz_version=__version__, target=list(spec.argv), seed=cfg.seed,
        settings={**cfg.to_wire(), "baseline": baseline.to_wire(),
                  **target_settings(spec, init)},
        kind="finding", initialize=init,
        meta={"status": report.status, "runs": report.runs, "reproduced": report.reproduced,
              "findings": [f.to_wire() for f in report.findings]})
    attachments = {}
    if gateway is not None and gateway.upstream_recorder is not None:
        attachments["vcr"] = gateway.upstream_recorder.to_bytes()
    return _write(path, header, events, scrubber, attachments, cfg.portable, "the finding")


def save_untied(spec: TargetSpec, cfg: CampaignSettings, steps: Sequence[Mapping[str, Any]],
                events: Sequence[Event], secrets: Iterable[str], baseline: Baseline,
                init: Any) -> Path | None:
    """Write the run of an example that sent untied requests as a cassette
    (``untied-seedN.cassette``, kind ``untied``: evidence, no finding), so that they can be
    read (``acp-fuzz show --full``) and replayed; its path, or ``None`` with a warning."""
    untied = sum(1 for r in beside_turns(events) if r.kind == "untied")
    header = Header(
        format=1, acp_fuzz_version=__version__, target=list(spec.argv), seed=cfg.seed,
        settings={**cfg.to_wire(), "baseline": baseline.to_wire(),
                  **target_settings(spec, init)},
        kind="untied", initialize=init,
        meta={"status": "evidence", "untied": untied, "steps": len(steps), "findings": []})
    path = cfg.cassette_dir / f"{_stem('untied', cfg.seed)}.cassette"
    return _write(path, header, events, scrubber_for(spec, secrets), {}, cfg.portable,
                  "the list of untied requests")


def _stem(what: str, seed: int, suffix: str = "") -> str:
    """A cassette's file name without its extension: ``prompt.leak-seed0-2``."""
    return re.sub(r"[^a-z0-9.-]+", "-", f"{what}-seed{seed}{suffix}").strip("-")


def _write(path: Path, header: Header, events: Sequence[Event], scrubber: Scrubber,
           attachments: Mapping[str, bytes], make_portable: bool, what: str) -> Path | None:
    """:func:`~acp_fuzz.engine.campaign.recording.write_scrubbed`, or ``None`` with a warning that
    says where ``what`` is instead."""
    try:
        return write_scrubbed(path, header, events, scrubber, attachments=attachments,
                              make_portable=make_portable)
    except (OSError, ValueError, TypeError, MemoryError) as e:
        warnings.warn(f"acp-fuzz: the cassette {path} could not be written "
                      f"({type(e).__name__}: {e}); {what} is in the report",
                      RuntimeWarning, stacklevel=3)
        return None
