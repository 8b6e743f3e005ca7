"""The reviewed real-agent findings still reproduce, and short campaigns run clean.

``cassettes/real/<profile>/<oracle>.cassette`` are the findings kept in ``docs/findings.md``,
each recorded against the pinned agent of its profile (``header.settings["profile"]``).
Replaying one against that agent must still give ``FAILED``; once an agent release fixes the
bug, the test fails and the cassette (and the entry in ``docs/findings.md``) should move to a
"fixed in" note.

The campaign tests run ``acp-fuzz target --profile P --max-examples 10`` and check the two
things the harness itself must get right on a real agent: no harness error (exit code 0 or 1,
never 2), and every model request that is not a side request tied to its harness session
(``model_requests.untied == 0`` in the JSON report).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.reporting.kept import KEPT_FILE, load_kept
from tests.realagent._support import installed_profile

pytestmark = pytest.mark.realagent

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "cassettes" / "real"
CASSETTES = sorted(CORPUS.glob("*/*.cassette"))


def _profile_of(path: Path) -> str:
    profile = read_cassette(path).header.settings.get("profile")
    assert isinstance(profile, str) and profile, f"{path} records no agent profile"
    return profile


def test_corpus_is_not_empty() -> None:
    assert CASSETTES, f"no real-agent cassettes under {CORPUS}"
    for path in CASSETTES:
        assert path.parent.name == _profile_of(path), f"{path} sits under the wrong profile"
        assert path.stat().st_size < 2_000_000, f"{path} is too big for the corpus"


#: Findings that depend on the wall clock, which a replay cannot pin (kept.toml says why for
#: each): gemini-cli names a chat file by the UTC minute, so a load in a later minute than the
#: session's creation works (docs/findings.md, finding 6).
CLOCK_DEPENDENT = {str(Path(p).with_suffix("")) for k in load_kept(CORPUS / KEPT_FILE)
                   if k.clock for p in k.cassettes.values()}
#: Clock-dependent findings a replay cannot show at all: it runs the recorded steps within one
#: minute, and the finding needed a load in the next one. The replay must still run and still
#: see the refusal that caused it.
NEEDS_THE_NEXT_MINUTE = {"gemini-cli/session.history-destroyed": "session.reattach-failed"}


#: Findings a later rule withdrew (the agent did not change): each replays FIXED, deliberately.
#: Issue #22 §2: both agents advertise `compact`, so a cold load is no longer the rebuild
#: that ends a deferral, and both apply the change at compaction (docs/findings.md, findings
#: 3 and 4, and "2026-12-02: compaction").
WITHDRAWN = {"codex-acp/prompt.change-ignored", "claude-agent-acp/prompt.change-ignored"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_real_finding_still_fails(path: Path) -> None:
    profile = _profile_of(path)
    installed_profile(profile)
    result = replay_cassette(path, profile=profile)
    if f"{path.parent.name}/{path.stem}" in WITHDRAWN:
        assert result.verdict == "FIXED", result
        return
    name = f"{path.parent.name}/{path.stem}"
    if name in NEEDS_THE_NEXT_MINUTE:
        assert name in CLOCK_DEPENDENT and result.verdict != "ERROR", result
        cause = NEEDS_THE_NEXT_MINUTE[name]
        assert all(any(f.oracle == cause for f in run) for run in result.findings), result
        return
    if name in CLOCK_DEPENDENT and result.verdict == "FLAKY":
        assert result.reproduced >= 1, result
        return
    assert result.verdict == "FAILED", (
        f"{path.relative_to(ROOT)}: {result.verdict} {result.error or ''} "
        f"(reproduced {result.reproduced}/{result.runs}, oracles {result.oracles})")


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("profile", ["codex-acp", "claude-agent-acp", "qwen-code", "pi-acp",
                                     "hermes-agent"])
def test_short_campaign_has_no_harness_error_and_ties_every_turn(
        profile: str, tmp_path: Path) -> None:
    installed_profile(profile)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "target", "--profile", profile,
         "--max-examples", "10", "--max-steps", "6", "--cassette-dir", str(tmp_path / "c"),
         "--report", f"json:{report}"],
        capture_output=True, text=True, timeout=1150, cwd=ROOT)
    assert proc.returncode in (0, 1), (
        f"exit {proc.returncode} (harness error?)\nstderr: {proc.stderr[-2000:]}")
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["examples_run"] >= 1
    requests = data["model_requests"]
    assert requests["turn"] >= 2, requests  # at least the two calibration turns
    assert requests["untied"] == 0, (
        f"{requests['untied']} model request(s) were neither side requests nor tied to a "
        f"session: the profile's side-request predicate or the nonce tie is wrong")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("profile", ["codex-acp", "claude-agent-acp", "gemini-cli", "qwen-code",
                                     "pi-acp", "hermes-agent"])
def test_doctor_finds_nothing_to_fix_in_each_pinned_agent(profile: str, tmp_path: Path) -> None:
    """``acp-fuzz doctor --profile P``: one turn reaches the fake model and is tied (exit 0),
    so a diagnosis on a stranger's agent is not a false alarm on the agents we know."""
    installed_profile(profile)
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "doctor", "--profile", profile,
                           "--timeout", "60"], capture_output=True, text=True, timeout=280,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "tied to session A turn 1" in proc.stdout, proc.stdout[-3000:]
