"""The reviewed real findings (docs/findings.md) are in the covering examples (issue #36 §1).

A maintainer who runs acp-fuzz once, at its defaults, must meet the bugs we already know
their agent has. Each case plants the behaviour of one reviewed finding in the reference agent
(a ``--bug`` that does what the real agent did) and runs the covering examples alone
(``--cover-only``, ``-x`` where one finding is asked for): the finding must come out of them,
shrunk to the real finding's shape and confirmed 3/3, so it is found at every seed, before
the search draws anything.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, run_campaign

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

Track = Callable[[int | None], None]


def _spec(bug: str | None, protocol: str = "1") -> TargetSpec:
    argv = [sys.executable, "-m", "acp_fuzz.reference_agent"] + (["--bug", bug] if bug else [])
    # A shorter --timeout than the default 30 s: a planted hang waits it in full.
    return TargetSpec.from_command(argv, protocol=protocol, request_timeout=10.0)


def _cover_only(spec: TargetSpec, tmp_path: Path, **kw: Any) -> CampaignResult:
    return run_campaign(spec, CampaignSettings(cassette_dir=tmp_path / "cassettes", seed=1,
                                               cover_only=True, **kw))


def _shape(steps: list[dict[str, Any]]) -> list[str]:
    """Each step as ``op`` and how it carries a prompt: ``+sp`` a prompt, ``+meta`` a prompt
    with a vendor carrier beside it."""
    return [s["op"] + ("+meta" if "_meta" in s else "+sp" if s.get("systemPrompt") else "")
            for s in steps]


#: finding -> (the planted bug, protocol, the oracle and severity of the real finding, the
#: shapes its reproduction may shrink to).
FINDINGS: dict[str, tuple[str, str, str, str, list[list[str]]]] = {
    # claude-agent-acp 0.101.0, finding 5: new A (P, _meta.claudeCode.options.systemPrompt Q);
    # prompt A -> Q where P belongs.
    "claude-5-vendor-wins": ("sdk-options-win", "1", "prompt.lost", "MUST",
                             [["new+meta", "prompt"]]),
    # codex-acp 2.6.0, finding 1: new A (P); close A; load A (P) -> -32602 (SHOULD under
    # ACPFUZZ-RESEND-ACCEPTED-SHOULD since issue #31 §3; it was MUST). Its variant (new A (P);
    # load A (Q), the same -32602; in v2 payload.valid-rejected-v2) is one bug with it (one
    # refusal); the covering examples send the re-sent shape first.
    "codex-1-resend-refused": ("unstored-before-turn", "1", "payload.valid-rejected", "SHOULD",
                               [["new+sp", "close", "load+sp"]]),
    "codex-1-resend-refused-v2": ("unstored-before-turn", "2", "payload.valid-rejected", "SHOULD",
                                  [["new+sp", "close", "load+sp"]]),
    # gemini-cli 0.61.0, finding 6: new A; prompt A; load A -> -32603.
    "gemini-6-load-erases": ("load-erases-session", "1", "session.reattach-failed", "SHOULD",
                             [["new+sp", "prompt", "load+sp"], ["new", "prompt", "load"]]),
    # hermes-agent 0.19.0, finding 7: new A; a session/cancel written right behind A's prompt
    # (before its first model call) -> the prompt answered -32603, not "cancelled".
    "hermes-7-cancel-errors": ("cancel-errors", "1", "cancel.error", "MUST",
                               [["new", "cancel"], ["new+sp", "cancel"]]),
    # pi-acp 0.0.34, finding 8: new A; a turn of A whose model call fails -> end_turn, nothing
    # said (the covering examples send each model fault kind).
    "pi-8-silent-failure": ("fault-ends-silently", "1", "turn.silent-failure", "SHOULD",
                            [["new", "prompt"], ["new+sp", "prompt"]]),
}


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_each_reviewed_finding_comes_out_of_the_covering_examples(
        finding: str, tmp_path: Path, no_orphans: Track) -> None:
    bug, protocol, oracle, severity, shapes = FINDINGS[finding]
    result = _cover_only(_spec(bug, protocol), tmp_path, max_failures=3)
    assert result.examples_run == result.covering_examples  # no search example ran
    mine = [r for r in result.reports if any(f.oracle == oracle and f.severity == severity
                                             for f in r.findings)]
    assert mine, [(r.oracles, r.steps) for r in result.reports]
    report = mine[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert _shape(report.steps) in shapes, report.steps


def test_codex_finding_2_the_turn_after_a_close_and_a_bare_load_comes_out_too(
        tmp_path: Path, no_orphans: Track) -> None:
    """codex-acp 2.6.0, finding 2: new A (P); close A; load A (prompt omitted); prompt A is
    never answered. The same planted bug gives finding 1 first; the search of the covering
    examples goes on, and the omitted-prompt pair shows the hang."""
    result = _cover_only(_spec("unstored-before-turn"), tmp_path)
    hangs = [r for r in result.reports if "agent.hang" in r.oracles]
    assert hangs, [(r.oracles, r.steps) for r in result.reports]
    assert _shape(hangs[0].steps) in (["new+sp", "close", "load", "prompt"],
                                      ["new+sp", "close", "resume", "prompt"])
    assert hangs[0].status == "failed"


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_covering_examples_find_nothing_on_the_correct_agent_and_run_alone(
        protocol: str, tmp_path: Path, no_orphans: Track) -> None:
    """The new covering examples raise no false alarm, ``--cover-only`` runs them and no
    search example, and ``--no-cover`` runs none of them."""
    result = _cover_only(_spec(None, protocol), tmp_path)
    assert not result.reports, [(r.oracles, r.steps) for r in result.reports]
    assert result.examples_run == result.covering_examples >= 32
    assert not result.unsent()
    assert result.covering_seconds > 0
    plain = run_campaign(_spec(None, protocol), CampaignSettings(
        cassette_dir=tmp_path / "c2", max_examples=2, cover=False))
    assert plain.covering_examples == 0 and plain.covering_seconds == 0 and plain.examples_run
