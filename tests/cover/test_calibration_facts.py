"""acp_fuzz.core.calibration: how an exit is read from a history, the restart grace it calls
for, and the learned facts as a cassette carries them (a stranger's too)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from acp_fuzz.core.calibration import (
    GRACE_FACTOR,
    GRACE_FLOOR,
    Learned,
    choose_restart_grace,
    exit_path,
)
from acp_fuzz.core.history import Event


def _events(*items: tuple[float, dict[str, Any]]) -> list[Event]:
    return [Event(seq=i, t=t, kind="process", data=d) for i, (t, d) in enumerate(items)]


PROBE = {"what": "exit-probe", "grace": 3.0}
EXIT = {"what": "exit", "returncode": 0}


def test_an_exit_with_no_signal_before_it_came_from_the_end_of_input() -> None:
    events = _events((1.0, {"what": "spawn"}), (2.0, PROBE), (2.4, EXIT))
    assert exit_path(events, 1) == ("end-of-input", pytest.approx(0.4))


def test_the_last_signal_before_the_exit_names_the_path() -> None:
    term = {"what": "kill", "reason": "grace-expired", "signal": 15}
    kill = {"what": "kill", "reason": "term-ignored", "signal": 9}
    assert exit_path(_events((0.0, PROBE), (3.0, term), (3.1, EXIT)), 0)[0] == "sigterm"
    assert exit_path(_events((0.0, PROBE), (3.0, term), (4.0, kill), (4.0, EXIT)),
                     0)[0] == "sigkill"
    # A clean-up kill after the exit changes nothing.
    cleanup = {"what": "kill", "reason": "group-cleanup", "signal": 9}
    assert exit_path(_events((0.0, PROBE), (0.1, EXIT), (0.2, cleanup)), 0)[0] == "end-of-input"


def test_an_agent_gone_before_the_probe_or_no_exit_recorded_is_not_measured() -> None:
    assert exit_path(_events((0.0, EXIT), (1.0, PROBE)), 1) == ("gone", None)
    assert exit_path(_events((0.0, PROBE)), 0) == ("unknown", None)
    assert exit_path(_events((0.0, PROBE)), 7) == ("unknown", None)


def test_the_grace_is_twice_the_exit_and_a_floor_capped_at_the_shutdown_grace() -> None:
    assert choose_restart_grace("end-of-input", 0.5, 10.0) == GRACE_FACTOR * 0.5 + GRACE_FLOOR
    assert choose_restart_grace("end-of-input", 0.0, 10.0) == GRACE_FLOOR
    assert choose_restart_grace("end-of-input", 2.0, 3.0) == 3.0
    assert choose_restart_grace("sigterm", None, 3.0) == 0.0
    assert choose_restart_grace("sigkill", None, 3.0) == 0.0
    assert choose_restart_grace("gone", None, 3.0) == 3.0
    assert choose_restart_grace("end-of-input", math.inf, 3.0) == 3.0


def test_learned_facts_travel_whole() -> None:
    facts = Learned(compact_command="compact", modes=True, round_trip="ok", waited=0.5,
                    commands_listed=True, exit="end-of-input", exit_seconds=0.1,
                    restart_grace=0.45, grace_source="measured", concurrent=False)
    assert Learned.from_wire(facts.to_wire()) == facts
    assert facts.campaign_facts() == {"compact_command": "compact", "modes": True,
                                      "config_options": False}


@pytest.mark.parametrize("wire", [
    None, [], "x",
    {"compact_command": "rm -rf /", "modes": 1, "waited": -3, "exit": "boom",
     "restart_grace": math.nan, "grace_source": 7, "round_trip": {"a": 1}, "concurrent": 1},
    {"exit_seconds": True, "restart_grace": "0.5", "waited": math.inf},
])
def test_a_strangers_facts_read_as_absent(wire: Any) -> None:
    facts = Learned.from_wire(wire)
    assert facts.compact_command is None and facts.modes is False
    assert facts.restart_grace is None and facts.exit_seconds is None
    assert facts.exit == "unknown" and facts.grace_source == "default"
    assert facts.round_trip == "skipped" and facts.waited == 0.0
    assert facts.concurrent is None  # not measured: held turns settle as before


def test_a_huge_grace_from_a_cassette_is_bounded() -> None:
    assert Learned.from_wire({"restart_grace": 1e12}).restart_grace == 3600.0


def test_the_line_says_what_was_learned_and_how() -> None:
    facts = Learned(compact_command="compact", round_trip="error", exit="end-of-input",
                    exit_seconds=0.02, restart_grace=0.29, grace_source="measured")
    assert facts.line() == (
        "calibration: compaction command /compact, modes no, config options no (learned "
        "after a round trip (error)); restart grace 0.29 s (measured: the agent exited "
        "0.02 s after its input ended; 2 × that + 0.25 s); requests during a turn: not "
        "measured")
    assert replace(facts, concurrent=False).line().endswith(
        "answers requests one at a time (nothing waits beside a held turn)")
    assert replace(facts, concurrent=True).line().endswith(
        "answers requests during a turn (a request beside a held turn waits for its answer)")
    waited = Learned(round_trip="ok", waited=0.5, exit="sigterm", restart_grace=0.0,
                     grace_source="measured")
    assert "and a wait of up to 0.5 s (no command list came)" in waited.line()
    assert waited.grace_text().startswith("0 s (measured: the agent did not exit on its own")
    assert "SIGTERM ended it" in waited.grace_text()
    assert Learned(restart_grace=0.25, grace_source="profile").grace_text() == \
        "0.25 s (the profile's restart_grace)"
    assert Learned().grace_text() == "the shutdown grace (not measured)"
    assert "not measured, gone" in Learned(restart_grace=3.0, exit="gone").grace_text()
