"""A cassette in a pull request diffs as text: ``.gitattributes`` names the ``acp-fuzz`` diff
driver and ``git config diff.acp-fuzz.textconv "acp-fuzz show"`` makes it (docs/ci.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_changed_cassette_diffs_as_its_timeline(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    cassette = repo / "found.cassette"
    shutil.copy(ROOT / "cassettes" / "reference" / "leak.cassette", cassette)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "the leak")
    shutil.copy(ROOT / "cassettes" / "reference" / "user-turn.cassette", cassette)
    assert "Binary files" in _git(repo, "diff")  # without the driver: nothing to read
    textconv = f"{sys.executable} -m acp_fuzz show"
    diff = _git(repo, "-c", f"diff.acp-fuzz.textconv={textconv}", "diff")
    assert "-  MUST   prompt.leak [ACPFUZZ-SESSION-ISOLATION-MUST]" in diff
    assert "+  SHOULD prompt.misplaced" in diff
    assert "\x1b" not in diff
