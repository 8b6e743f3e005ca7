"""Shared fixtures for the whole test suite. Keep this small and generic."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import psutil
import pytest

#: How long teardown waits for processes that were just sent SIGKILL to disappear.
_REAP_TIMEOUT = 10.0


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            # A zombie is dead; it only waits for its (possibly non-reaping) parent.
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


@pytest.fixture
def no_orphans() -> Iterator[Callable[[int | None], None]]:
    """Assert that no process started by the test outlives it.

    Yields ``track(pgid)``: call it with the process group id of every agent (or other process
    group) the test starts. At teardown the fixture fails the test if any tracked group still
    has a live member, or if a child of the test process that did not exist at setup is still
    alive. It waits (bounded) for processes to disappear rather than sleeping."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    groups: list[int] = []

    def track(pgid: int | None) -> None:
        assert pgid is not None, "track() needs a started process (pgid is None)"
        groups.append(pgid)

    yield track

    leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
    for pgid in groups:
        leftovers.extend(_group_members(pgid))
    _, still = psutil.wait_procs(_alive(leftovers), timeout=_REAP_TIMEOUT)
    still = _alive(still)
    assert not still, "processes outlived the test: " + ", ".join(_describe(p) for p in still)


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} ({' '.join(p.cmdline()[:3])})"
    except psutil.Error:
        return str(p.pid)
