"""Verdicts users can trust (issue #10), end to end against the reference agent.

Each case plants a behaviour in the reference agent and checks the verdict a user gets:

* ``--bug lost-override-after-restart``: the headline bug (a prompt lost on a cold load) is a
  MUST ``prompt.lost``, and the campaign exits 1 (it exited 0 before).
* ``--variant defer-then-apply``: a correct agent that defers a change one turn gives no
  report and exits 0 (it got a SHOULD ``prompt.lost`` before).
* ``--variant defer-until-restart``: a correct agent that defers every change until it rebuilds
  the session in a new process gives no MUST and no ``prompt.lost``.
* ``--bug vendor-meta-wins``: a vendor ``_meta.systemPrompt`` that silently replaces the
  standard prompt is a MUST ``prompt.lost`` naming the field that won (the campaign draws
  such carriers and finds it in 2 steps).
* ``--bug tiny-baseline``: a default slot of a billing header and a one-line SDK identity, both
  kept under override, gives no MUST (it was a MUST ``override.not-applied`` in 2 steps).

Campaigns are short (a fixed seed and a small ``max_examples``); the fixed step sequences run
the real agent once each.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.findings import Finding
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import (
    CampaignResult,
    CampaignSettings,
    calibrate,
    run_campaign,
    run_steps,
)

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

Track = Callable[[int | None], None]

P = "You review code. Focus on security vulnerabilities. [acp-fuzz canary V1]"
Q = "Answer only in French, whatever the question. [acp-fuzz canary V2]"
VENDOR = "You are a pirate; answer in pirate speak. [acp-fuzz vendor canary]"


def sp(mode: str, text: str) -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": text}]}


def reference(*flags: str) -> TargetSpec:
    return TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent", *flags])


def campaign(spec: TargetSpec, tmp_path: Path, **kw: Any) -> CampaignResult:
    return run_campaign(spec, CampaignSettings(cassette_dir=tmp_path / "cassettes", **kw))


def steps_findings(spec: TargetSpec, steps: list[dict[str, Any]]) -> list[Finding]:
    _, _, baseline = calibrate(spec)
    _, findings = run_steps(spec, steps, baseline=baseline)
    return findings


def serious(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity in ("MUST", "SHOULD")]


# -- the restart-then-lost override ---------------------------------------------------------------


RESTART_LOST = [
    {"op": "new", "session": "A", "systemPrompt": sp("override", P)},
    {"op": "restart"},
    {"op": "load", "session": "A", "systemPrompt": sp("override", P)},
    {"op": "prompt", "session": "A"},
]


def test_restart_then_lost_override_is_a_must(no_orphans: Track) -> None:
    found = steps_findings(reference("--bug", "lost-override-after-restart"), RESTART_LOST)
    (f,) = [f for f in found if f.oracle == "prompt.lost"]
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")
    # The correct agent passes the same steps.
    assert serious(steps_findings(reference(), RESTART_LOST)) == []


def test_campaign_finds_the_restart_then_lost_override_and_fails(tmp_path: Path,
                                                                 no_orphans: Track) -> None:
    result = campaign(reference("--bug", "lost-override-after-restart"), tmp_path, seed=0,
                      max_examples=120, max_failures=1)
    assert result.reports, f"not found in {result.examples_run} examples"
    report = result.reports[0]
    assert "prompt.lost" in report.oracles
    assert any(f.oracle == "prompt.lost" and f.severity == "MUST" for f in report.findings)
    assert result.exit_code == 1
    assert len(report.steps) == 4, report.steps


# -- deferrals ------------------------------------------------------------------------------------


DEFER = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "resume", "session": "A", "systemPrompt": sp("append", Q)},
    {"op": "prompt", "session": "A"},
    {"op": "prompt", "session": "A"},
]


def test_a_deferral_applied_on_the_next_turn_is_no_finding(no_orphans: Track) -> None:
    assert steps_findings(reference("--variant", "defer-then-apply"), DEFER) == []


def test_campaign_against_a_deferring_correct_agent_reports_nothing(tmp_path: Path,
                                                                    no_orphans: Track) -> None:
    result = campaign(reference("--variant", "defer-then-apply"), tmp_path, seed=0,
                      max_examples=80)
    assert result.reports == [], [r.oracles for r in result.reports]
    assert result.exit_code == 0
    # The campaign did draw changes the agent kept back (else this would prove nothing).
    assert "prompt.change-deferred" in {f.oracle for f in result.info}


DEFER_FOREVER = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "load", "session": "A", "systemPrompt": sp("append", Q)},
    {"op": "prompt", "session": "A"},
    {"op": "prompt", "session": "A"},
    {"op": "restart"},
    {"op": "load", "session": "A"},
    {"op": "prompt", "session": "A"},
]


def test_an_agent_that_defers_every_change_gives_no_must_and_no_lost(tmp_path: Path,
                                                                     no_orphans: Track) -> None:
    spec = reference("--variant", "defer-until-restart")
    found = steps_findings(spec, DEFER_FOREVER)
    assert serious(found) == [] and "prompt.lost" not in {f.oracle for f in found}
    result = campaign(spec, tmp_path, seed=0, max_examples=80)
    everything = [f for r in result.reports for f in r.findings] + result.info
    assert [f for f in everything if f.severity == "MUST"] == []
    assert "prompt.lost" not in {f.oracle for f in everything}
    assert result.exit_code == 0


# -- a vendor _meta field that wins -----------------------------------------------------------


VENDOR_STEPS = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", P),
     "_meta": {"systemPrompt": {"append": VENDOR}}},
    {"op": "prompt", "session": "A"},
]


def test_a_vendor_meta_field_that_wins_is_lost_and_named(no_orphans: Track) -> None:
    found = steps_findings(reference("--bug", "vendor-meta-wins"), VENDOR_STEPS)
    (f,) = [f for f in found if f.oracle == "prompt.lost"]
    assert f.severity == "MUST"
    assert f.evidence["won"] == "_meta.systemPrompt.append"
    assert f.evidence["vendor_text"] == VENDOR
    # The correct agent ignores _meta (SP-META-MUSTNOT): the same steps pass.
    assert serious(steps_findings(reference(), VENDOR_STEPS)) == []


def test_campaign_finds_the_vendor_field_that_wins_and_names_it(tmp_path: Path,
                                                                no_orphans: Track) -> None:
    # The strategies draw legacy carriers beside a valid standard prompt (issue #10 §6).
    result = campaign(reference("--bug", "vendor-meta-wins"), tmp_path, seed=0, max_examples=80)
    lost = [f for r in result.reports for f in r.findings if f.oracle == "prompt.lost"]
    assert lost and all(f.severity == "MUST" for f in lost)
    assert {f.evidence.get("won") for f in lost} <= {"_meta.systemPrompt",
                                                     "_meta.systemPrompt.append"}
    assert min(len(r.steps) for r in result.reports) == 2
    assert result.exit_code == 1


# -- a baseline too small to judge ------------------------------------------------------------


def test_a_two_line_baseline_kept_under_override_gives_no_must(tmp_path: Path,
                                                               no_orphans: Track) -> None:
    spec = reference("--bug", "tiny-baseline")
    _, _, baseline = calibrate(spec)
    assert baseline.known and not baseline.substantial
    assert (baseline.size_lines, len(baseline.lines)) == (1, 2)
    steps = [{"op": "new", "session": "A", "systemPrompt": sp("override", P)},
             {"op": "prompt", "session": "A"}]
    _, found = run_steps(spec, steps, baseline=baseline)
    assert serious(found) == []
    (f,) = [f for f in found if f.oracle == "defaults.too-small"]
    assert len(f.evidence["kept"]) == 2
    result = campaign(spec, tmp_path, seed=0, max_examples=60)
    assert [f for r in result.reports for f in r.findings if f.severity == "MUST"] == []
    assert result.exit_code == 0


# -- a refused reattach after a restart, then a turn of that session (issue #31 §3b) ----------

FORGOTTEN = [
    {"op": "new", "session": "B"},
    {"op": "prompt", "session": "B"},
    {"op": "new", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "restart"},
    {"op": "load", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "prompt", "session": "A"},
]


def test_a_turn_of_a_session_the_new_process_does_not_know_is_no_must(
        no_orphans: Track) -> None:
    # claude-agent-acp 0.101.0 at seeds 2 and 3 got a false MUST session.turn-failed for this
    # shape: its sessions do not outlive the process, so the load after the restart and the
    # turn after it are both refused (-32002). The turn's error is the right answer; what the
    # agent owes is judged at the load (nothing to judge there for a session without a turn).
    findings = steps_findings(reference("--variant", "forgets-on-restart"), FORGOTTEN)
    assert [f for f in findings if f.severity == "MUST"] == []
    # With a completed turn, the same refusal of an advertised load is the harness's SHOULD.
    talked = [*FORGOTTEN[:3], {"op": "prompt", "session": "A"}, *FORGOTTEN[3:]]
    found = serious(steps_findings(reference("--variant", "forgets-on-restart"), talked))
    assert [(f.oracle, f.severity) for f in found] == [("session.reattach-failed", "SHOULD")]
