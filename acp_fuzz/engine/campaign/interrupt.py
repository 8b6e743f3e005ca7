"""A stop the user asked for (Ctrl-C, SIGTERM), as state the engine can check.

The CLI's signal handler raises ``KeyboardInterrupt`` at once, so that a blocked wait ends
without waiting out its deadline. That exception can be lost: raised while the main thread
runs a finalizer (``__del__``, a weakref callback, a generator's ``finally`` during garbage
collection), Python prints it as "Exception ignored" and goes on. A campaign would then run
to its end after the user asked it to stop. So the handler also calls :func:`request`, and
the runner calls :func:`check` before every step: a lost interrupt is raised again at the
next step, and a campaign stops within one step of the signal.

The campaign calls :func:`acknowledge` once it has caught the interrupt, so that writing
what was found so far is not interrupted in turn. Nothing here is set unless an interface
installs a handler that calls :func:`request`: library users and the pytest plugin never
see it.
"""

from __future__ import annotations

import threading

__all__ = ["acknowledge", "check", "request", "requested", "reset"]

_requested = threading.Event()
_acknowledged = threading.Event()


def request() -> None:
    """Record that the user asked to stop (safe to call from a signal handler)."""
    _requested.set()


def requested() -> bool:
    """Whether a stop was asked for since the last :func:`reset`."""
    return _requested.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a stop was asked for and not yet acknowledged."""
    if _requested.is_set() and not _acknowledged.is_set():
        raise KeyboardInterrupt


def acknowledge() -> None:
    """The interrupt reached its handler: :func:`check` stops raising it."""
    _acknowledged.set()


def reset() -> None:
    """Forget any earlier stop (an interface calls this when it installs its handler)."""
    _requested.clear()
    _acknowledged.clear()
