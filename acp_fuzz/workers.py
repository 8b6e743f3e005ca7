"""Parallel campaigns: ``acp-fuzz target --workers N`` (engine).

Each worker is a separate process with its own agent processes, gateway and sandboxes, and
runs :func:`~acp_fuzz.campaign.run_campaign` with its own seed (``seed + i``) and a share of
the examples. They share one Hypothesis example database (``--db``: a folder or a Redis URL;
without it, a temporary folder removed at the end): an interesting or failing
example one worker finds is replayed first by the others. See ``docs/scaling.md`` for running
workers on many machines.

Determinism: with one worker a campaign is a pure function of the seed and the agent. With
several, what each worker replays from the shared database depends on timing, so the *path*
to a failure can differ between runs; the reported failure is still confirmed by re-runs and
shrunk the same way.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from acp_fuzz.campaign import (
    Calibrated,
    CampaignEvent,
    CampaignResult,
    CampaignSettings,
    ExampleDone,
    Finished,
    InfoReport,
    Started,
    calibrate,
    run_campaign,
)
from acp_fuzz.minimize import Shape, refusals, shape_of
from acp_fuzz.protocol import agent_info
from acp_fuzz.runner import TargetSpec

__all__ = ["run_parallel", "spec_from_wire", "spec_to_wire"]


def spec_to_wire(spec: TargetSpec) -> dict[str, Any]:
    """What a worker process needs to rebuild ``spec``, as plain picklable data.

    A profile's spec carries functions (environment, HOME set-up, side-request test), so it
    travels by the profile's name; every plain field travels as is, ``passthrough_env``
    (``--pass-env``) included."""
    return {"argv": list(spec.argv), "profile": spec.profile,
            "passthrough_env": list(spec.passthrough_env),
            "init_timeout": spec.init_timeout, "request_timeout": spec.request_timeout,
            "shutdown_grace": spec.shutdown_grace, "dialect": spec.dialect}


def spec_from_wire(wire: Mapping[str, Any]) -> TargetSpec:
    """The :class:`TargetSpec` that :func:`spec_to_wire` described."""
    plain = {"passthrough_env": tuple(wire["passthrough_env"]), "dialect": wire["dialect"],
             "init_timeout": wire["init_timeout"], "request_timeout": wire["request_timeout"],
             "shutdown_grace": wire["shutdown_grace"]}
    if wire["profile"] is None:
        return TargetSpec(argv=tuple(wire["argv"]), **plain)
    spec = TargetSpec.from_profile(wire["profile"], timeout=wire["request_timeout"],
                                   dialect=wire["dialect"])
    return replace(spec, **plain)


def _worker(spec: Mapping[str, Any], cfg: CampaignSettings, index: int,
            events: Any) -> CampaignResult:
    def forward(ev: CampaignEvent) -> None:
        # Counts are summed over the workers by the parent; the start, the calibration and
        # the end are the parent's own events; every other event goes up as it is (they are
        # small frozen dataclasses, pickled through the queue).
        if isinstance(ev, ExampleDone):
            events.put(("example", index, ev.examples, ev.steps, ev.failing))
        elif not isinstance(ev, (Started, Calibrated, Finished)):
            events.put(("event", index, ev))

    return run_campaign(spec_from_wire(spec), cfg, forward)


def run_parallel(spec: TargetSpec, cfg: CampaignSettings, workers: int,
                 on_event: Callable[[CampaignEvent], None] = lambda e: None) -> CampaignResult:
    """Run ``workers`` campaigns in parallel and merge their results."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be at least 1")
    if workers == 1:
        return run_campaign(spec, cfg, on_event)
    init, caps, baseline = calibrate(spec)
    agent = dict(agent_info(init))
    on_event(Started(agent, caps, init))
    on_event(Calibrated(baseline))
    # Without --db the workers still share examples, through a folder of this run only.
    own_db = None if cfg.database else tempfile.mkdtemp(prefix="acp-fuzz-db-")
    database = cfg.database or own_db
    per = math.ceil(cfg.max_examples / workers)
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    events = manager.Queue()
    counts: dict[int, tuple[int, int]] = {}

    def pump() -> None:
        # Merge the workers' progress into one stream of events for the interface layer.
        while (msg := events.get()) is not None:
            if msg[0] == "example":
                counts[msg[1]] = (msg[2], msg[3])
                on_event(ExampleDone(sum(c[0] for c in counts.values()),
                                     sum(c[1] for c in counts.values()), msg[4]))
            elif msg[0] == "event":
                on_event(msg[2])

    pumper = threading.Thread(target=pump, name="acp-fuzz-workers", daemon=True)
    pumper.start()
    try:
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = [pool.submit(_worker, spec_to_wire(spec),
                                   replace(cfg, seed=cfg.seed + i, max_examples=per,
                                           database=database), i, events)
                       for i in range(workers)]
            try:
                results = [f.result() for f in futures]
            except KeyboardInterrupt:
                # A SIGTERM reaches only this process: pass the interrupt on, and let every
                # worker stop, close its agents and return what it found so far.
                for proc in list(pool._processes.values()):
                    if proc.pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(proc.pid, signal.SIGINT)
                results = [f.result() for f in futures]
    finally:
        events.put(None)
        pumper.join()
        manager.shutdown()
        if own_db is not None:
            shutil.rmtree(own_db, ignore_errors=True)
    merged = CampaignResult(agent=results[0].agent, initialize=results[0].initialize,
                            caps=results[0].caps, settings=cfg)
    # Workers find the same bugs: one report per oracle set and shape of the minimal steps
    # (the campaign's own rule for "distinct"), the first worker's.
    seen: set[tuple[tuple[str, ...], Shape]] = set()
    refused_seen: set[tuple[str, object, str]] = set()  # one refusal, one bug (minimize.refusals)
    info: dict[tuple[str, Any], InfoReport] = {}
    for r in results:
        merged.examples_run += r.examples_run
        merged.steps_run += r.steps_run
        for k, n in r.model_requests.items():
            merged.model_requests[k] = merged.model_requests.get(k, 0) + n
        merged.interrupted = merged.interrupted or r.interrupted
        merged.explained += r.explained
        merged.add_judged(r.judged)
        merged.out_of_time = merged.out_of_time or r.out_of_time
        for rep in r.reports:
            key = (tuple(rep.oracles), shape_of(rep.steps))
            refused = refusals(rep.findings)
            if key not in seen and not refused & refused_seen:
                seen.add(key)
                refused_seen |= refused
                merged.reports.append(rep)
        for i in r.info_reports:
            key2 = (i.finding.oracle, i.finding.evidence.get("choice"))
            if key2 not in info or len(i.steps) < len(info[key2].steps):
                info[key2] = i
    merged.info_reports = sorted(info.values(), key=lambda i: i.finding.oracle)
    merged.info = [i.finding for i in merged.info_reports]
    return merged
