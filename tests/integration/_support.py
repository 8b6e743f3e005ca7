"""Helpers shared by the integration tests (imported as ``_support``: pytest puts this folder
on ``sys.path``, as it has no ``__init__.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """``python -m acp_fuzz ARGS`` in ``tmp_path`` with a clean environment (plus ``env``) and
    its own HOME, as a user would run it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "ACP_REF_QUIET": "1", **(env or {})}
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "acp_fuzz", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
