"""The regression corpus in ``cassettes/``: stale-baseline detection in CI.

Every cassette of a planted bug must still read, must still FAIL against that bug, and must be
FIXED against the correct reference agent. A cassette that no longer reads, or whose recorded
failure no longer reproduces against its bug, fails here with the cassette named.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.replay import offline_check, replay_cassette

CORPUS = Path(__file__).resolve().parents[2] / "cassettes" / "reference"
CASSETTES = sorted(CORPUS.glob("*.cassette"))

pytestmark = pytest.mark.integration


def test_corpus_is_not_empty() -> None:
    # An empty corpus would make every test below vanish silently.
    assert len(CASSETTES) >= 7, f"expected the planted-bug corpus in {CORPUS}"


def _bug_argv(path: Path) -> list[str]:
    target = read_cassette(path).header.target
    assert target[:3] == ["python", "-m", "acp_fuzz.reference_agent"], target
    # The cassette records a portable command; run it with this interpreter.
    return [sys.executable, *target[1:]]


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_still_fails_against_its_bug(path: Path, no_orphans: object) -> None:
    res = replay_cassette(path, target=_bug_argv(path))
    assert res.verdict == "FAILED", f"stale cassette {path.name}: {res.line()}"


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_fixed_against_the_correct_agent(path: Path, no_orphans: object) -> None:
    res = replay_cassette(path, target=[sys.executable, "-m", "acp_fuzz.reference_agent"])
    assert res.verdict == "FIXED", f"{path.name}: {res.line()}"


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_offline_check_reproduces_the_recorded_findings(path: Path) -> None:
    res = offline_check(path)
    assert res.verdict == "FAILED", f"{path.name}: {res.line()}"


def test_unreadable_cassette_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "truncated.cassette"
    bad.write_bytes(CASSETTES[0].read_bytes()[:-50])
    res = replay_cassette(bad)
    assert res.verdict == "ERROR"
    assert "truncated" in (res.error or "") or "corrupt" in (res.error or "")
