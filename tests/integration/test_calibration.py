"""What calibration learns, by a defined rule, and how it travels (issue #38 §1 and §3).

A fact that arrives as a notification after an answer (a command list) is collected by a
round trip after the calibration turns, so the same seed and the same agent give the same
campaign; the facts are printed, stored in every cassette and used by replay. The agent's
exit is measured at calibration and sets the restart grace. No wall-clock assertion: what
is asserted is which path ended the agent and that the grace came from the measurement.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.calibration import SETTLE_SECONDS, Learned, choose_restart_grace
from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.oracles import Baseline
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec, run_steps
from acp_fuzz.engine.campaign.search import (
    CampaignEvent,
    CampaignSettings,
    ExampleDone,
    FindingReport,
    learn,
    requests_of,
    run_campaign,
    save_finding,
)

pytestmark = pytest.mark.integration

AGENTS = Path(__file__).resolve().parents[1] / "hostile_agents"
LATE = [sys.executable, str(AGENTS / "late_commands.py")]
SLOW_EXIT = [sys.executable, str(AGENTS / "later.py"), "slow-exit"]
CONCURRENT = [sys.executable, str(AGENTS / "concurrent.py")]
COMPACTING = [sys.executable, "-m", "acp_fuzz.reference_agent", "--variant", "compacting"]
TALK_THEN_COMPACT: list[dict[str, Any]] = [
    {"op": "new", "session": "A"}, {"op": "prompt", "session": "A"},
    {"op": "compact", "session": "A", "by": "command"}]


def _fingerprint(tmp: Path) -> tuple[Any, ...]:
    trail: list[int] = []

    def on_event(e: CampaignEvent) -> None:
        if isinstance(e, ExampleDone):
            trail.append(e.steps)

    r = run_campaign(TargetSpec.from_command(LATE),
                     CampaignSettings(max_examples=8, seed=3, cassette_dir=tmp), on_event)
    assert r.learned is not None
    return (r.examples_run, r.steps_run, trail, sorted(r.coverage.items()),
            r.learned.campaign_facts(), r.learned.round_trip, r.learned.waited)


def test_a_command_list_one_line_late_is_learned_and_the_campaign_is_the_same_twice(
        tmp_path: Path, no_orphans: object) -> None:
    first = _fingerprint(tmp_path / "a")
    # The list came only with the round trip (the agent writes it when it reads its next
    # line), so no wait was needed; the agent answers the unknown method with an error.
    assert first[4]["compact_command"] == "compact"
    assert first[5:] == ("error", 0.0)
    # The fact steers the campaign: compact steps by command were drawn and sent.
    assert "compact:command" in dict(first[3])
    assert _fingerprint(tmp_path / "b") == first


def test_without_a_command_list_the_bounded_wait_is_recorded(no_orphans: object) -> None:
    learned = learn(TargetSpec.from_command([sys.executable, "-m",
                                             "acp_fuzz.reference_agent"])).learned
    assert learned.compact_command is None and not learned.commands_listed
    assert learned.waited == SETTLE_SECONDS
    # Single-threaded: the round trip written while its turn's model request was held is
    # answered only after the turn.
    assert learned.concurrent is False
    # An agent that lists its commands in time makes no one wait.
    learned = learn(TargetSpec.from_command(COMPACTING)).learned
    assert learned.compact_command == "compact" and learned.commands_listed
    assert learned.waited == 0.0


def test_an_agent_that_answers_requests_during_a_turn_is_learned_as_concurrent(
        no_orphans: object) -> None:
    # One thread per turn: the round trip is answered while the turn's model request is
    # held. (tests/quality/test_during.py: what the runner does with it.)
    learned = learn(TargetSpec.from_command(CONCURRENT)).learned
    assert learned.concurrent is True
    assert learned.line().endswith("answers requests during a turn (a request beside a held "
                                   "turn waits for its answer)")


def test_the_facts_go_into_the_cassette_and_replay_sends_what_they_say(
        tmp_path: Path, no_orphans: object) -> None:
    # Without facts, this agent (whose list comes late) has not announced /compact by the
    # compact step: the runner skips it. With the facts of the campaign that recorded the
    # cassette, replay sends it.
    bare = TargetSpec.from_command(LATE)
    history, _ = run_steps(bare, TALK_THEN_COMPACT, baseline=Baseline())
    assert not _sent_compact(history.events)
    facts = Learned(compact_command="compact", round_trip="error", exit="end-of-input",
                    exit_seconds=0.01, restart_grace=0.27, grace_source="measured")
    spec = TargetSpec.from_command(LATE, learned=facts)
    history, _ = run_steps(spec, TALK_THEN_COMPACT, baseline=Baseline())
    assert _sent_compact(history.events)
    report = FindingReport(status="failed", runs=1, reproduced=1, findings=[],
                           steps=TALK_THEN_COMPACT, requests=requests_of(history.events),
                           cassette=None)
    path = save_finding(spec, CampaignSettings(cassette_dir=tmp_path), history.events, report,
                        Baseline(), None)
    assert path is not None
    stored = read_cassette(path).header.run_settings.calibration
    assert Learned.from_wire(stored) == facts
    result = replay_cassette(path, target=LATE)
    assert result.verdict == "PASSED", result.line()
    sent = [m for s in result.transcripts[0] for m in s.ordered]
    assert any('"/compact"' in m for m in sent), sent


def _sent_compact(events: Any) -> bool:
    return any(m.get("method") == "session/prompt"
               and m["params"]["prompt"][0]["text"] == "/compact" for m in requests_of(events))


def test_an_agent_that_takes_its_time_to_exit_sets_the_restart_grace(no_orphans: object) -> None:
    # It exits 0.5 s after its input ends: within a shutdown grace of 10 s, on its own.
    learned = learn(TargetSpec.from_command(SLOW_EXIT, shutdown_grace=10.0)).learned
    assert learned.exit == "end-of-input" and learned.grace_source == "measured"
    assert learned.exit_seconds is not None and learned.exit_seconds > 0
    assert learned.restart_grace == choose_restart_grace("end-of-input", learned.exit_seconds,
                                                         10.0)
    spec = TargetSpec.from_command(SLOW_EXIT, shutdown_grace=10.0, learned=learned)
    assert spec.restart_wait() == learned.restart_grace
    # With a shutdown grace shorter than its exit, SIGTERM ended it: a restart sends SIGTERM
    # at once, since waiting would buy nothing.
    learned = learn(TargetSpec.from_command(SLOW_EXIT, shutdown_grace=0.1)).learned
    assert learned.exit == "sigterm" and learned.grace_source == "measured"
    assert learned.restart_grace == 0.0
    # A profile's explicit restart_grace wins, and nothing is measured.
    learned = learn(TargetSpec.from_command(SLOW_EXIT, restart_grace=0.4)).learned
    assert (learned.restart_grace, learned.grace_source, learned.exit) == (0.4, "profile",
                                                                           "unknown")


def test_target_prints_the_facts_after_the_baseline(tmp_path: Path, no_orphans: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "target", "-n", "1",
                           "--cassette-dir", str(tmp_path), "--", *LATE],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("calibration: "))
    assert lines[at - 1].startswith("baseline: ")
    assert lines[at].startswith("calibration: compaction command /compact, modes no, config "
                                "options no (learned after a round trip (error)); restart "
                                "grace "), lines[at]
    assert "(measured: the agent exited" in lines[at]
