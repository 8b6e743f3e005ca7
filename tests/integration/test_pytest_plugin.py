"""The pytest plugin runs a campaign as an ordinary test item (in a child pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _pytest(tmp_path: Path, agent: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # An empty test folder: the only item is the one the plugin adds.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path), "--acp-agent", agent,
         "--acp-max-examples", "15", "--acp-cassette-dir", str(tmp_path / "found"), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1"})


@pytest.mark.slow
def test_campaign_item_fails_on_a_planted_bug(tmp_path: Path) -> None:
    agent = f"{sys.executable} -m acp_fuzz.reference_agent --bug accept-unknown-mode"
    proc = _pytest(tmp_path, agent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "payload.invalid-accepted" in proc.stdout
    assert "acp-fuzz replay" in proc.stdout
    assert list((tmp_path / "found").glob("*.cassette")), "the finding cassette is written"


def test_campaign_item_passes_on_the_correct_agent(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, f"{sys.executable} -m acp_fuzz.reference_agent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_acp_protocol_reaches_the_campaign_and_a_harness_error_is_one_line(
        tmp_path: Path) -> None:
    # --acp-protocol 2 against an agent that speaks only v1: the negotiation ends the item
    # with the CLI's one-line error, not a traceback into acp-fuzz.
    agent = f"{sys.executable} -m acp_fuzz.reference_agent --variant v1-only"
    proc = _pytest(tmp_path, agent, "--acp-protocol", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "acp-fuzz: error: the agent answered protocolVersion 1 to an offer of 2" \
        in proc.stdout
    assert "Traceback" not in proc.stdout and "runner.py" not in proc.stdout
    # The same agent under auto: v1, and a clean pass.
    proc = _pytest(tmp_path, agent, "--acp-protocol", "auto", "--acp-max-examples", "3")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
