"""Parallel campaigns: ``acp-fuzz target --workers N`` (engine).

Each worker is a separate process with its own agent processes, gateway and sandboxes, and
runs :func:`~acp_fuzz.engine.campaign.search.run_campaign` with its own seed (``seed + i``) and a
share of the examples: its share of the covering examples (worker ``i`` of ``n`` runs the covering
examples ``i``, ``i + n``, ...; within a shard, its share of the shard's: :func:`worker_share`),
then its own search. They share one Hypothesis example
database (``--db``: a folder or a Redis URL; without it, a temporary folder removed at the
end): an interesting or failing
example one worker finds is replayed first by the others. See ``docs/scaling.md`` for running
workers on many machines.

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
from typing import Any

from acp_fuzz.core.protocol import agent_info
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

__all__ = ["merge_results", "run_parallel", "spec_from_wire", "spec_to_wire", "worker_share"]


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


def _worker(spec: Mapping[str, Any], cfg: CampaignSettings, index: int,
            plugins: Sequence[str] = ()) -> CampaignResult:
    # A spawned process starts empty: the checks users registered in the parent must judge
    # this worker's examples too.
    reload_in_worker(plugins)
    events = _events

    def forward(ev: CampaignEvent) -> None:
        # Counts are summed over the workers by the parent; the start and the calibration
        # are the parent's own events; every other event goes up as it is (they are
        # small frozen dataclasses, pickled through the queue).
        if isinstance(ev, ExampleDone):
            events.put(("example", index, ev.examples, ev.steps, ev.failing))
        elif not isinstance(ev, (Started, Calibrated)):
            events.put(("event", index, ev))

    return run_campaign(spec_from_wire(spec), cfg, forward)


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
    # Without --db the workers still share examples, through a folder of this run only.
    own_db = None if cfg.database else tempfile.mkdtemp(prefix="acp-fuzz-db-")
    database = cfg.database or own_db
    per = math.ceil(cfg.max_examples / workers)
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
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
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker,
                                 initargs=(events,)) as pool:
            futures = [pool.submit(_worker, wire,
                                   replace(cfg, seed=cfg.seed + i, max_examples=per,
                                           database=database,
                                           cover_share=worker_share(cfg.cover_share, i,
                                                                    workers)),
                                   i, loaded())
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
        events.close()
        events.join_thread()
        if own_db is not None:
            shutil.rmtree(own_db, ignore_errors=True)
    return merge_results(results, cfg)


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
