"""The process groups of agents (engine): which are still open, and what is left in one.

Each :class:`~acp_fuzz.engine.process.transport.AgentProcess` leads its own process group and
registers it in :data:`_LIVE_GROUPS` until it is closed, so that :func:`kill_all_agents` (a
forced exit, a second Ctrl-C) still leaves no orphan behind; the client campaigns register
the clients they start there too. :func:`group_left` tells whether a closed agent left
anything in its group, which then gets a last ``SIGKILL``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

__all__ = ["group_left", "kill_all_agents"]

#: Process groups of agents started and not yet closed, for a forced exit (a second Ctrl-C)
#: that must still leave no orphan behind.
_LIVE_GROUPS: set[int] = set()
_LIVE_LOCK = threading.Lock()
#: How long a sandboxed agent's PID namespace may take to empty after the agent exited.
_TEARDOWN_WAIT = 0.5


def kill_all_agents() -> int:
    """SIGKILL the process group of every agent that is still open; return how many.

    For emergencies only (a forced exit): it skips the orderly shutdown of :meth:`close`."""
    with _LIVE_LOCK:
        groups = list(_LIVE_GROUPS)
        _LIVE_GROUPS.clear()
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return len(groups)


def _group_has_live_member(pgid: int) -> bool:
    """Does process group ``pgid`` hold a process that is not a zombie? Read from /proc
    (``killpg(pgid, 0)`` also counts zombies); without /proc, whatever ``killpg`` says."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def group_left(pgid: int, *, sandboxed: bool) -> bool:
    """Is anything left in the group? In a PID namespace (``sandboxed``) the sandbox's init may
    still be tearing it down for a moment after the agent's exit was reported, and then
    lingers as a zombie until the system reaps it: wait up to :data:`_TEARDOWN_WAIT` for the
    group to hold nothing but zombies (the namespace kills everything in it when its init
    ends)."""
    if not sandboxed:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    deadline = time.monotonic() + _TEARDOWN_WAIT
    while _group_has_live_member(pgid):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.005)  # polled: a process that is not our child cannot be waited for
    return False
