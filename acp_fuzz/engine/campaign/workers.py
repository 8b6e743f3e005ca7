"""Parallel campaigns: ``acp-fuzz target --workers N`` and ``acp-fuzz client --workers N``
(engine).

Each worker is a separate process with its own agent processes, gateway and sandboxes, and
runs :func:`~acp_fuzz.engine.campaign.search.run_campaign` with its own seed (``seed + i``) and a
share of the examples: its share of the covering examples (worker ``i`` of ``n`` runs the covering
examples ``i``, ``i + n``, ...; within a shard, its share of the shard's: :func:`worker_share`),
then its own search. They share one Hypothesis example
database (``--db``: a folder or a Redis URL; without it, a temporary folder removed at the
end): an interesting or failing
example one worker finds is replayed first by the others. See ``docs/scaling.md`` for running
workers on many machines.

A client campaign runs on workers the same way (:func:`run_client_parallel`, through the same
:func:`run_workers`): each worker with its own clients, stand-ins and sandboxes, ``seed + i``,
its share of ``max_examples`` and of the covering capability sets, and the shared database
(a client worker replays what it holds only as it starts: what one worker stores there, the
next run with that ``--db`` tries first).

Determinism: with one worker a campaign is a pure function of the seed and the agent. With
several, what each worker replays from the shared database depends on timing, so the *path*
to a failure can differ between runs; the reported failure is still confirmed by re-runs and
shrunk the same way.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import importlib
import math
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from acp_fuzz.core.protocol import agent_info
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.engine.campaign.plugins import loaded, reload_in_worker
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import (
    Calibrated,
    CampaignEvent,
    CampaignResult,
    CampaignSettings,
    ExampleDone,
    Started,
    learn,
    run_campaign,
)
from acp_fuzz.engine.client.campaign import (
    ClientCampaignEvent,
    ClientCampaignResult,
    ClientSettings,
    run_client_campaign,
)

__all__ = ["merge_results", "run_client_parallel", "run_parallel", "run_workers",
           "spec_from_wire", "spec_to_wire", "worker_share"]

T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")


def _kinds() -> dict[str, str]:
    """How each field of :class:`TargetSpec` travels, from its type: ``hook`` (a function),
    ``deadlines``, ``tuple`` (of strings) or ``plain`` (str, int, float, bool, or None)."""
    out: dict[str, str] = {}
    hints = typing.get_type_hints(TargetSpec)
    for f in dataclasses.fields(TargetSpec):
        hint = hints[f.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        members = [t for t in (typing.get_args(hint) if union else (hint,))
                   if t is not type(None)]
        origins = {typing.get_origin(t) or t for t in members}
        if origins == {collections.abc.Callable}:
            out[f.name] = "hook"
        elif len(origins) == 1 and all(hasattr(t, "from_wire") for t in origins):
            out[f.name] = "data"
        elif origins == {tuple}:
            out[f.name] = "tuple"
        elif origins <= {str, int, float, bool}:
            out[f.name] = "plain"
        else:
            raise TypeError(f"TargetSpec.{f.name}: no wire form for {hint}")
    return out


def _reference(name: str, fn: Callable[..., Any]) -> str:
    """``module:qualname`` of the hook ``fn``; ValueError unless that imports back as ``fn``."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    ref = f"{module}:{qualname}"
    try:
        same = isinstance(module, str) and isinstance(qualname, str) and _resolve(ref) is fn
    except (ImportError, AttributeError):
        same = False
    if not same:
        raise ValueError(f"TargetSpec.{name} ({fn!r}) cannot go to a worker process: only a "
                         "function importable by module and name (not a lambda, a closure "
                         "or a bound method) can")
    return ref


def _resolve(ref: str) -> Any:
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def spec_to_wire(spec: TargetSpec) -> dict[str, Any]:
    """What a worker process needs to rebuild ``spec``, as JSON-plain data: every field of
    :class:`TargetSpec`, by name. Strings, numbers, booleans and None travel as they are,
    tuples as lists, the deadlines and a profile file's setup by their ``to_wire``, and
    each hook (``extra_env``, ``setup_home``, ``side_request``) as a ``module:qualname``
    reference, imported again in the worker. Raises ValueError for a hook that cannot be
    imported by its reference (a lambda, a closure, a bound method)."""
    wire: dict[str, Any] = {}
    for name, kind in _kinds().items():
        value = getattr(spec, name)
        if value is None:
            wire[name] = None
        elif kind == "hook":
            wire[name] = _reference(name, value)
        elif kind == "data":
            wire[name] = value.to_wire()
        elif kind == "tuple" and all(isinstance(v, str) for v in value):
            wire[name] = list(value)
        elif kind == "plain" and isinstance(value, (str, int, float, bool)):
            wire[name] = value
        else:
            raise ValueError(f"TargetSpec.{name}: {value!r} is not of its field's type")
    return wire


def spec_from_wire(wire: Mapping[str, Any]) -> TargetSpec:
    """The :class:`TargetSpec` that :func:`spec_to_wire` described, every field (``argv``
    included: a profile's is not looked up again) from the wire. Raises ValueError for a
    key missing or unknown."""
    kinds = _kinds()
    hints = typing.get_type_hints(TargetSpec)
    data_types = {n: next(t for t in typing.get_args(hints[n]) if t is not type(None))
                  for n, k in kinds.items() if k == "data"}
    if set(wire) != set(kinds):
        missing, unknown = sorted(set(kinds) - set(wire)), sorted(set(wire) - set(kinds))
        raise ValueError(f"not a TargetSpec wire form: missing {missing}, unknown {unknown}")
    fields: dict[str, Any] = {}
    for name, kind in kinds.items():
        value = wire[name]
        if value is None:
            fields[name] = None
        elif kind == "hook":
            fields[name] = _resolve(value)
        elif kind == "data":
            fields[name] = data_types[name].from_wire(value)
        elif kind == "tuple":
            fields[name] = tuple(value)
        else:
            fields[name] = value
    return TargetSpec(**fields)


_events: Any = None  # this worker's end of the parent's event queue (set by _start_worker)


def _start_worker(events: Any) -> None:
    # The queue travels as the pool's initargs, at spawn time: the one way a plain
    # multiprocessing queue may reach another process. (A Manager's queue would also
    # travel as an argument, but its server listens on a Unix socket under $TMPDIR, and
    # a long $TMPDIR makes that path longer than the 108 bytes a socket path may have.)
    global _events
    _events = events


def _agent_campaign(wire: Mapping[str, Any], cfg: CampaignSettings,
                    on_event: Callable[[CampaignEvent], None]) -> CampaignResult:
    """An agent worker's campaign: the spec rebuilt from its wire form (its hooks imported
    again), then :func:`run_campaign`."""
    return run_campaign(spec_from_wire(wire), cfg, on_event)


def _worker(work: Callable[[Any, Any, Callable[[Any], None]], Any], target: Any, cfg: Any,
            index: int, plugins: Sequence[str] = ()) -> Any:
    # A spawned process starts empty: the checks users registered in the parent must judge
    # this worker's examples too.
    reload_in_worker(plugins)
    events = _events

    def forward(ev: Any) -> None:
        # Counts are summed over the workers by the parent; the start and the calibration
        # are the parent's own events; every other event goes up as it is (they are
        # small frozen dataclasses, pickled through the queue).
        if isinstance(ev, ExampleDone):
            events.put(("example", index, ev))
        elif not isinstance(ev, (Started, Calibrated)):
            events.put(("event", index, ev))

    return work(target, cfg, forward)


def run_parallel(spec: TargetSpec, cfg: CampaignSettings, workers: int,
                 on_event: Callable[[CampaignEvent], None] = lambda e: None) -> CampaignResult:
    """Run ``workers`` campaigns in parallel and merge their results."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be at least 1")
    if workers == 1:
        return run_campaign(spec, cfg, on_event)
    wire = spec_to_wire(spec)  # before anything starts: a hook that cannot travel fails here
    cal = learn(spec)
    agent = dict(agent_info(cal.init))
    on_event(Started(agent, cal.caps, cal.init))
    on_event(Calibrated(cal.baseline, cal.learned))
    per = math.ceil(cfg.max_examples / workers)

    def worker_cfg(i: int, database: str) -> CampaignSettings:
        return replace(cfg, seed=cfg.seed + i, max_examples=per, database=database,
                       cover_share=worker_share(cfg.cover_share, i, workers))

    def progress(last: Sequence[ExampleDone]) -> ExampleDone:
        return ExampleDone(sum(e.examples for e in last), sum(e.steps for e in last),
                           last[-1].failing)

    results = run_workers(_agent_campaign, wire, worker_cfg, workers, database=cfg.database,
                          on_event=on_event, progress=progress)
    return merge_results(results, cfg)


def run_client_parallel(scenario: Scenario, cfg: ClientSettings, workers: int,
                        on_event: Callable[[ClientCampaignEvent], None] = lambda e: None
                        ) -> ClientCampaignResult:
    """``acp-fuzz client --workers N``: run ``workers`` client campaigns in parallel, as
    :func:`run_parallel` runs an agent's (:func:`run_workers`), and merge their results
    (:meth:`ClientCampaignResult.merge`). Worker ``i`` has the seed ``seed + i``, its share
    of ``max_examples`` and of the covering sets, and the shared database; its cassettes are
    named by its own seed, so no two workers write one name. With one worker the campaign
    runs in this process."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be at least 1")
    if workers == 1:
        return run_client_campaign(scenario, cfg, on_event)
    scenario.check()  # a scenario that cannot run fails here, once, not in each worker
    per = math.ceil(cfg.max_examples / workers)

    def worker_cfg(i: int, database: str) -> ClientSettings:
        return replace(cfg, seed=cfg.seed + i, max_examples=per, db=database,
                       cover_share=worker_share(cfg.cover_share, i, workers))

    def progress(last: Sequence[ExampleDone]) -> ExampleDone:
        # A client example's ``steps`` are its scenario's: only the examples add up.
        return replace(last[-1], examples=sum(e.examples for e in last))

    results = run_workers(run_client_campaign, scenario, worker_cfg, workers, database=cfg.db,
                          on_event=on_event, progress=progress)
    return ClientCampaignResult.merge(results, cfg)


def run_workers(work: Callable[[T, S, Callable[[Any], None]], R], target: T,
                settings: Callable[[int, str], S], workers: int, *, database: str | None,
                on_event: Callable[[Any], None],
                progress: Callable[[Sequence[ExampleDone]], ExampleDone]) -> list[R]:
    """Run ``work(target, settings(i, db), forward)`` in ``workers`` spawned processes (``i``
    from 0) and return their results in that order: the engine of ``acp-fuzz target
    --workers`` and ``acp-fuzz client --workers``. ``work`` must be a module-level function
    and ``target`` and the settings picklable. ``db`` is ``database`` (``--db``), or else a
    temporary folder of this run only, removed at the end: the workers share examples
    through it either way. The plugins loaded here are loaded again in each worker.

    Their events come back through one queue, to ``on_event`` on one thread: each
    :class:`ExampleDone` as ``progress`` makes it from every worker's latest (the newest
    last), the others as they are. An interrupt (SIGINT, or SIGTERM made one) is passed on
    to every worker, which stops and returns what it found so far."""
    # Without --db the workers still share examples, through a folder of this run only.
    shared = database or tempfile.mkdtemp(prefix="acp-fuzz-db-")
    own_db = None if database else shared
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    latest: dict[int, ExampleDone] = {}

    def pump() -> None:
        # Merge the workers' progress into one stream of events for the interface layer.
        while (msg := events.get()) is not None:
            if msg[0] == "example":
                latest.pop(msg[1], None)  # the newest last
                latest[msg[1]] = msg[2]
                on_event(progress(list(latest.values())))
            elif msg[0] == "event":
                on_event(msg[2])

    pumper = threading.Thread(target=pump, name="acp-fuzz-workers", daemon=True)
    pumper.start()
    try:
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker,
                                 initargs=(events,)) as pool:
            futures = [pool.submit(_worker, work, target, settings(i, shared), i, loaded())
                       for i in range(workers)]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                # A SIGTERM reaches only this process: pass the interrupt on, and let every
                # worker stop, close its agents and return what it found so far.
                for proc in list(pool._processes.values()):
                    if proc.pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(proc.pid, signal.SIGINT)
                return [f.result() for f in futures]
    finally:
        events.put(None)
        pumper.join()
        events.close()
        events.join_thread()
        if own_db is not None:
            shutil.rmtree(own_db, ignore_errors=True)


def worker_share(share: tuple[int, int], i: int, workers: int) -> tuple[int, int]:
    """Worker ``i``'s share of the covering examples, within its campaign's own ``share``
    (``(k, n)``: shard ``k`` of ``n``): the plan examples ``p`` with ``p % n == k`` and
    ``(p // n) % workers == i``, which is ``p % (n * workers) == k + n * i``. So shards with
    any number of workers each still run every plan example once between them."""
    k, n = share
    return k + n * i, n * workers


def merge_results(results: Sequence[CampaignResult], cfg: CampaignSettings) -> CampaignResult:
    """One result from the results of workers or shards (``acp-fuzz report merge``):
    :meth:`CampaignResult.merge`, each field as its policy says, each bug reported once."""
    return CampaignResult.merge(results, cfg)
