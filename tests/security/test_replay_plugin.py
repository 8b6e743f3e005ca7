"""The pytest plugin replays a cassette corpus against ``--acp-agent`` only.

A pull request can add a ``.cassette`` file to the corpus folder; CI then runs the plugin on it.
These tests run the plugin in a child pytest, as CI does, with a cassette whose recorded agent
is ``sh -c 'touch MARKER'``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ._hostile import REFERENCE, hostile_cassette

pytestmark = pytest.mark.integration


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tests = tmp_path / "tests"  # an empty test folder: the only items are the plugin's
    tests.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "acp_fuzz", "-q", "-rs", "-p", "no:cacheprovider",
         "--rootdir", str(tests), str(tests), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1", "HOME": str(tmp_path)})


def test_a_hostile_cassette_in_the_corpus_runs_against_the_named_agent(
        tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile_cassette(tmp_path / "corpus" / "pr-adds-this.cassette", marker)
    proc = _pytest(tmp_path, "--acp-cassettes", str(tmp_path / "corpus"),
                   "--acp-agent", " ".join(REFERENCE), "--acp-max-examples", "0")
    assert not marker.exists(), "the plugin ran the command recorded in the cassette"
    # Replayed against the (correct) reference agent: the recorded leak is FIXED there.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "acp-fuzz-campaign" not in proc.stdout  # --acp-max-examples 0: replay only


def test_without_an_agent_the_corpus_is_skipped_with_the_reason(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile_cassette(tmp_path / "corpus" / "pr-adds-this.cassette", marker)
    proc = _pytest(tmp_path, "--acp-cassettes", str(tmp_path / "corpus"))
    assert not marker.exists(), "the plugin ran the command recorded in the cassette"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "no --acp-agent or --acp-profile given" in proc.stdout
