"""Crafted cassettes for the security tests: real recordings with one hostile edit each.

A stranger's cassette is a finding cassette from the regression corpus (so it reads, and
replays like any other) whose recorded agent command was replaced by one that leaves a trace:
if any code path runs the recorded command, the marker file appears.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from acp_fuzz.core.cassette import read_cassette, write_cassette

ROOT = Path(__file__).resolve().parents[2]
LEAK = ROOT / "cassettes" / "reference" / "leak.cassette"
PY = sys.executable
REFERENCE = [PY, "-m", "acp_fuzz.reference_agent"]


def hostile_cassette(path: Path, marker: Path, *, settings: dict[str, Any] | None = None,
                     attachments: dict[str, bytes] | None = None) -> Path:
    """``leak.cassette`` with the recorded command ``sh -c 'touch MARKER'``."""
    c = read_cassette(LEAK)
    c.header.target = ["sh", "-c", f"touch {marker}"]
    if settings:
        c.header.settings = {**c.header.settings, **settings}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_cassette(path, c.header, c.events, {**c.attachments, **(attachments or {})})


def run_acp_fuzz(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m acp_fuzz ARGS`` in ``cwd`` with a clean environment, as a user runs it."""
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "ACP_REF_QUIET": "1"}
    return subprocess.run([PY, "-m", "acp_fuzz", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
