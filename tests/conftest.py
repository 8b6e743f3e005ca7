"""Shared fixtures for the whole test suite. Keep this small and generic."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import psutil
import pytest

#: The tiers that plain ``pytest`` (no path, no ``-m``) leaves out: campaign-sized tests. The
#: quick loop is tests/cover plus the fast integration and security tests (tests/README.md);
#: ``pytest --all-tiers``, a path (``pytest tests/quality``) or ``-m`` runs them, and .ci/run
#: runs every tier.
SLOW_TIERS = ("quality", "realagent", "slow")

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all-tiers", action="store_true",
                     help="also run the campaign-sized tiers (quality, realagent, slow) that "
                          "plain `pytest` leaves out")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        # The pinned real agents are heavy node processes: under xdist (--dist loadgroup) they
        # run one at a time on one worker, while the other worker takes everything else.
        for item in items:
            if item.get_closest_marker("realagent"):
                item.add_marker(pytest.mark.xdist_group("realagent"))
    if config.getoption("--all-tiers") or config.option.file_or_dir or config.option.markexpr:
        return  # the user chose what to run
    slow = [any(i.get_closest_marker(m) for m in SLOW_TIERS) for i in items]
    if any(slow):
        config.hook.pytest_deselected(items=[i for i, s in zip(items, slow, strict=True) if s])
        items[:] = [i for i, s in zip(items, slow, strict=True) if not s]
