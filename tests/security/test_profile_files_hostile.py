"""A profile file from a stranger (``--profile ./their-agent.toml``, ``profiles check``):
checking it runs none of its code, and no file shape gives a traceback or a hang.

- ``profiles check`` lists the ``[hooks]`` modules and where they would be imported from,
  without importing them (importing runs a module's code).
- Deeply nested arrays or inline tables (``tomllib`` recurses) are one error line, exit 2.
- A FIFO (or a device) named ``*.toml`` is refused at once, never waited on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._hostile import run_acp_fuzz
from .test_hostile_outputs import _one_error_line

pytestmark = pytest.mark.integration

HOOKED = """\
name = "hooked"
api = "openai.chat"
command = ["true"]

[hooks]
env = "canary_hook:env"
side_request = "not_there.at_all:side"
"""


def _plant_hook(folder: Path) -> Path:
    """A hook module that leaves a canary if it is ever imported; ``python -m acp_fuzz``
    run in ``folder`` finds it (the current folder is on its path)."""
    canary = folder / "CANARY"
    (folder / "canary_hook.py").write_text(
        f"open({str(canary)!r}, 'w').write('imported')\n"
        "def env(url, home):\n    return {}\n")
    (folder / "hooked.toml").write_text(HOOKED)
    return canary


def test_check_lists_hooks_without_importing_them(tmp_path: Path) -> None:
    canary = _plant_hook(tmp_path)
    proc = run_acp_fuzz(tmp_path, "profiles", "check", "hooked.toml")
    assert proc.returncode == 0, proc.stderr
    assert not canary.exists()
    assert "env = canary_hook:env" in proc.stdout
    assert str(tmp_path / "canary_hook.py") in proc.stdout
    assert "side_request = not_there.at_all:side (no such file" in proc.stdout
    # The canary works: a profile that is used imports its hooks.
    subprocess.run([sys.executable, "-c", "from acp_fuzz.engine.agents.profiles import "
                    "load_profile; load_profile('hooked.toml')"], cwd=tmp_path,
                   capture_output=True, check=False)
    assert canary.read_text() == "imported"


@pytest.mark.parametrize("value", ["[" * 100_000, "{a = " * 100_000, "[" * 40 + "]" * 40])
@pytest.mark.parametrize("command", [["profiles", "check"], ["target", "--profile"]])
def test_deep_nesting_is_one_error_line(tmp_path: Path, value: str,
                                        command: list[str]) -> None:
    (tmp_path / "deep.toml").write_text(f"a = {value}\n")
    proc = run_acp_fuzz(tmp_path, *command, "./deep.toml")
    assert _one_error_line(proc).endswith("deep.toml: nests too deeply (more than 32 levels)")


@pytest.mark.parametrize("command", [["profiles", "check"], ["target", "--profile"],
                                     ["agents", "install"]])
def test_a_fifo_or_a_device_named_toml_is_refused_at_once(tmp_path: Path,
                                                          command: list[str]) -> None:
    os.mkfifo(tmp_path / "fifo.toml")  # no writer: opening it for reading would block
    os.symlink("/dev/zero", tmp_path / "zero.toml")
    for name, kind in (("fifo.toml", "a FIFO"), ("zero.toml", "not a file")):
        proc = run_acp_fuzz(tmp_path, *command, f"./{name}")
        assert _one_error_line(proc).endswith(
            f"{name}: cannot read the profile: not a regular file ({kind})")
