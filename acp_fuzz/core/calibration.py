"""What calibration learned of an agent, and by which rule (pure).

Calibration (:func:`acp_fuzz.engine.campaign.search.learn`) runs two prompt-less sessions with one
turn each. Besides the baseline (the agent's own instructions, :mod:`acp_fuzz.core.baseline`)
it learns facts that steer the whole campaign: whether the agent offers a compaction command
(``compact`` steps by command are drawn only then), session modes and config options, and
how long a ``restart`` step lets the old process take to exit.

Some of these facts arrive as notifications the agent writes *after* an answer: codex-acp
sends its ``available_commands_update`` from a task of its own once a session exists. Read
at whatever moment calibration happened to stop, such a fact depended on timing, and two
campaigns at the same seed drew different steps. So they are collected by a defined rule:

1. **A round trip** after the calibration turns: a request the agent must answer
   (:data:`ROUND_TRIP_METHOD`, an extension method: ACP answers an unknown ``_`` request
   with ``-32601``, and JSON-RPC answers every request). The agent writes to one stdout
   pipe, which the harness reads in order, so every notification it wrote before that answer
   has been recorded when the answer arrives; an agent that writes a pending notification
   when it reads its next line writes it then too.
2. **A bounded wait**, only when no command list came by then: up to
   :data:`SETTLE_SECONDS` after the first calibration session was created (so the turns
   themselves count against it), for an ``available_commands_update``. The bound is
   recorded, and whether one came within it.

Whether the agent **answers requests while a turn runs** is measured too: the second
calibration turn's model request is held at the fake model, and the round trip's request
written while it waits; answered within :data:`CONCURRENCY_PROBE_S`, the agent is
``concurrent``. One that reads its input only between turns (the reference agent is
single-threaded) answers it after the turn. A request sent beside a held turn (a close, a
fork, a reattach of another session, a second turn) is then never a race with the clock: to
an agent that answers one request at a time it is let go at once (waiting could not bring
its answer), and at a concurrent one it is waited for until answered (up to
``BESIDE_S`` in the runner), so that what it did beside the turn is done when the hold ends.

:class:`Learned` holds what was learned and how; the campaign prints its :meth:`~Learned.line`,
stores it in every cassette's header (``settings["calibration"]``), and the runner uses it
(the compaction command; the restart grace; the concurrency), so a replay runs on the facts
of the campaign that recorded it, never on a new calibration's.

The restart grace is measured (:func:`exit_path`, :func:`choose_restart_grace`): calibration
ends by closing the agent's input and waiting up to the target's shutdown grace for it to
exit, then ``SIGTERM`` (then ``SIGKILL``), and the path that ended it decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_fuzz.core.history import Event
from acp_fuzz.core.steps import COMPACT_COMMAND

__all__ = ["CONCURRENCY_PROBE_S", "EXIT_PATHS", "GRACE_FLOOR", "GRACE_SOURCES",
           "ROUND_TRIP_METHOD", "SETTLE_SECONDS", "Learned", "choose_restart_grace", "exit_path"]

#: The round trip's request: an extension method no agent implements (ACP: "an agent should
#: answer an unknown ``_`` request with -32601"). Whatever the answer (an error, ``null``),
#: it comes after every line the agent wrote before it.
ROUND_TRIP_METHOD = "_acp-fuzz/sync"
#: The bounded wait for a command list, counted from the first calibration session's answer.
#: codex-acp's comes within milliseconds of ``session/new`` on a quiet machine; half a second
#: covers a busy one, and it is paid only by an agent that advertises no commands at all
#: (and only once per campaign, for the part the calibration turns did not already take).
SETTLE_SECONDS = 0.5
#: How long calibration's round trip, written while a turn's model request is held, may take
#: to be answered for the agent to count as answering requests during a turn. An agent that
#: reads its input concurrently answers an unknown method in milliseconds; the bound is paid
#: once per campaign, only by an agent that answers one request at a time.
CONCURRENCY_PROBE_S = 0.5
#: How the calibration agent's exit came about: it exited on its own once its input ended,
#: or ``SIGTERM`` or ``SIGKILL`` ended it, or it had exited before its input was closed, or
#: the history does not say (no exit recorded).
EXIT_PATHS = ("end-of-input", "sigterm", "sigkill", "gone", "unknown")
#: Where the restart grace came from: the profile's ``restart_grace``, the measurement, or
#: the shutdown grace (nothing measured).
GRACE_SOURCES = ("profile", "measured", "default")
#: The measured grace is ``GRACE_FACTOR`` times the exit measured, plus ``GRACE_FLOOR``
#: seconds (capped at the shutdown grace); see :func:`choose_restart_grace`.
GRACE_FACTOR = 2.0
GRACE_FLOOR = 0.25


def choose_restart_grace(path: str, seconds: float | None, ceiling: float) -> float:
    """The restart grace the measured exit calls for (never more than ``ceiling``, the
    target's shutdown grace, which the measurement waited at most).

    - The agent exited on its own ``seconds`` after its input ended: ``2 × seconds +
      0.25 s``. A restart waits only as long as the agent takes to exit, so a generous
      ceiling costs nothing when it exits as fast as measured, while one too tight would
      ``SIGTERM`` it mid-way through writing the sessions the next process must load (the
      thing the grace is for). Exit times grow with the machine's load: twice the time
      covers a machine twice as busy as the calibration's, and the quarter second covers
      scheduling jitter when the measured time is near zero.
    - ``SIGTERM`` (or ``SIGKILL``) ended it: it did not exit on its own within the whole
      shutdown grace, so at a restart it would be sent ``SIGTERM`` anyway; waiting first
      bought nothing but the wait (codex-acp 0.16.0 cost 3 s per restart step this way).
      ``0``: ``SIGTERM`` at once.
    - Nothing measured (``gone``, ``unknown``): the shutdown grace, as before measuring.
    """
    ceiling = max(ceiling, 0.0)
    if path == "end-of-input" and seconds is not None and math.isfinite(seconds):
        return round(min(ceiling, GRACE_FACTOR * max(seconds, 0.0) + GRACE_FLOOR), 3)
    if path in ("sigterm", "sigkill"):
        return 0.0
    return ceiling


def exit_path(events: Sequence[Event], mark: int) -> tuple[str, float | None]:
    """How the agent process left, from its history after the ``process`` event of seq
    ``mark`` (written just before its input was closed): the path (:data:`EXIT_PATHS`) and
    the seconds from the mark to its exit (``None`` when no exit is recorded)."""
    start = next((e for e in events if e.seq == mark), None)
    if start is None:
        return "unknown", None
    if any(e.kind == "process" and e.data.get("what") == "exit" for e in events
           if e.seq < mark):
        return "gone", None
    signals: list[str] = []
    for e in events:
        if e.seq <= mark or e.kind != "process":
            continue
        what = e.data.get("what")
        if what == "kill" and e.data.get("reason") in ("grace-expired", "stop"):
            signals.append("sigterm")
        elif what == "kill" and e.data.get("reason") == "term-ignored":
            signals.append("sigkill")
        elif what == "exit":
            path = signals[-1] if signals else "end-of-input"
            return path, round(max(e.t - start.t, 0.0), 3)
    return "unknown", None


def _flag(v: Any) -> bool:
    return v is True


def _seconds(v: Any, upto: float = 3600.0) -> float | None:
    """A non-negative finite number of seconds (at most ``upto``), or ``None``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(min(v, upto))


def _choice(v: Any, allowed: Sequence[str], default: str) -> str:
    return v if isinstance(v, str) and v in allowed else default


@dataclass(frozen=True)
class Learned:
    """What calibration learned of the agent, and how (see the module's docs).

    The campaign's own facts (:meth:`campaign_facts`): ``compact_command``, the name of the
    compaction command the agent advertised (``"compact"``) or ``None``; ``modes`` and
    ``config_options``, whether its calibration sessions offered them. How they were
    collected: ``round_trip``, the outcome of the round trip (``ok``, ``error``,
    ``timeout``, ``exited``, or ``skipped``), ``waited`` the bound of the wait that followed
    (``0``: not needed, a command list had come), ``commands_listed`` whether the agent
    listed any commands at all. How its process exited (``exit``, of :data:`EXIT_PATHS`,
    after ``exit_seconds``) and the restart grace chosen (``restart_grace``, from
    ``grace_source``). Whether it answers a request while one of its turns waits on the
    model (``concurrent``, :data:`CONCURRENCY_PROBE_S`; ``None``: not measured, the turn
    never asked the model, or an older cassette)."""

    compact_command: str | None = None
    modes: bool = False
    config_options: bool = False
    round_trip: str = "skipped"
    waited: float = 0.0
    commands_listed: bool = False
    exit: str = "unknown"
    exit_seconds: float | None = None
    restart_grace: float | None = None
    grace_source: str = "default"
    concurrent: bool | None = None

    def campaign_facts(self) -> dict[str, Any]:
        """The facts that decide what the campaign draws and sends (not the timings): two
        campaigns at the same seed on the same agent have the same ones."""
        return {"compact_command": self.compact_command, "modes": self.modes,
                "config_options": self.config_options}

    def to_wire(self) -> dict[str, Any]:
        return {**self.campaign_facts(), "round_trip": self.round_trip, "waited": self.waited,
                "commands_listed": self.commands_listed, "exit": self.exit,
                "exit_seconds": self.exit_seconds, "restart_grace": self.restart_grace,
                "grace_source": self.grace_source, "concurrent": self.concurrent}

    @classmethod
    def from_wire(cls, wire: Any) -> Learned:
        """Read from a cassette (a stranger's: a value of the wrong type reads as absent,
        and only the one command name acp-fuzz sends is taken)."""
        if not isinstance(wire, Mapping):
            return cls()
        command = wire.get("compact_command")
        return cls(compact_command=COMPACT_COMMAND if command == COMPACT_COMMAND else None,
                   modes=_flag(wire.get("modes")),
                   config_options=_flag(wire.get("config_options")),
                   round_trip=_choice(wire.get("round_trip"),
                                      ("ok", "error", "timeout", "exited", "skipped"),
                                      "skipped"),
                   waited=_seconds(wire.get("waited"), 60.0) or 0.0,
                   commands_listed=_flag(wire.get("commands_listed")),
                   exit=_choice(wire.get("exit"), EXIT_PATHS, "unknown"),
                   exit_seconds=_seconds(wire.get("exit_seconds")),
                   restart_grace=_seconds(wire.get("restart_grace")),
                   grace_source=_choice(wire.get("grace_source"), GRACE_SOURCES, "default"),
                   concurrent=wire.get("concurrent") if isinstance(wire.get("concurrent"), bool)
                   else None)

    def line(self) -> str:
        """The one line ``acp-fuzz target`` prints after calibrating (raw: from an agent's
        own process only numbers and fixed words come in)."""
        command = f"/{self.compact_command}" if self.compact_command else "none"
        yes = {True: "yes", False: "no"}
        how = f"after a round trip ({self.round_trip})"
        if self.waited:
            came = "a command list came" if self.commands_listed else "no command list came"
            how += f" and a wait of up to {self.waited:g} s ({came})"
        return (f"calibration: compaction command {command}, modes {yes[self.modes]}, config "
                f"options {yes[self.config_options]} (learned {how}); "
                f"restart grace {self.grace_text()}; {self.concurrency_text()}")

    def concurrency_text(self) -> str:
        """Whether the agent answers a request while a turn waits on the model, in words."""
        if self.concurrent is None:
            return "requests during a turn: not measured"
        if self.concurrent:
            return "answers requests during a turn (a request beside a held turn waits " \
                   "for its answer)"
        return "answers requests one at a time (nothing waits beside a held turn)"

    def grace_text(self) -> str:
        """The restart grace and why, in words."""
        if self.restart_grace is None:
            return "the shutdown grace (not measured)"
        g = f"{self.restart_grace:g} s"
        if self.grace_source == "profile":
            return f"{g} (the profile's restart_grace)"
        if self.grace_source == "measured" and self.exit == "end-of-input":
            return (f"{g} (measured: the agent exited {self.exit_seconds or 0:g} s after its "
                    f"input ended; {GRACE_FACTOR:g} × that + {GRACE_FLOOR:g} s)")
        if self.grace_source == "measured":
            name = "SIGTERM" if self.exit == "sigterm" else "SIGKILL"
            return (f"{g} (measured: the agent did not exit on its own once its input ended; "
                    f"{name} ended it, so a restart sends SIGTERM at once)")
        return f"{g} (the shutdown grace: the exit was not measured, {self.exit})"
