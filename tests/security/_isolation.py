"""Shared by the sandbox tests: what to do where the kernel or the tools do not allow a
namespace. Locally that is a skip with the reason; under CI (``CI`` set) it is a failure,
since ``.ci/run`` installs bubblewrap and runs as root, so a missing sandbox there is a bug."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HOSTILE = Path(__file__).resolve().parents[1] / "hostile_agents"
REPO = Path(__file__).resolve().parents[2]


def missing(what: str, reason: str) -> None:
    """Skip (or, under CI, fail) the calling test: ``what`` is unavailable for ``reason``."""
    message = f"{what} unavailable: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message + " (.ci/run installs bubblewrap)")
    pytest.skip(message)


def hostile(name: str, *args: str) -> list[str]:
    """The command line of the hostile agent ``tests/hostile_agents/<name>``."""
    return [sys.executable, str(HOSTILE / name), *args]
