"""``--sandbox-net`` checks its isolation itself: a variable set by the caller cannot turn it
off, and a namespace that turns out to reach the network is refused.

The network views are taken without sending a packet: which interfaces are up, and whether
the kernel has a route to a documentation address (a UDP ``connect()``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.process import netns
from tests.security._isolation import REPO, hostile, missing

pytestmark = pytest.mark.integration

ISOLATED = {"up": ["lo"], "connect": "ENETUNREACH"}


def _require_netns() -> None:
    ok, reason = netns.netns_available()
    if not ok:
        missing("network namespaces", reason)


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ACP_REF_QUIET": "1", **extra}


def test_preset_marker_does_not_disable_isolation(tmp_path: Path) -> None:
    """``ACP_FUZZ_IN_NETNS=1`` in the caller's environment used to mean "already inside": the
    command ran on the host network."""
    _require_netns()
    view = tmp_path / "view.json"
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz.engine.process.netns", "--",
         *hostile("netview.py", str(view))],
        cwd=REPO, env=_env(**{netns.ENV_MARKER: "1"}), capture_output=True, text=True,
        timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(view.read_text(encoding="utf-8")) == ISOLATED


def test_target_with_preset_marker_still_isolates_the_agent(tmp_path: Path) -> None:
    """The same through the CLI: the agent of ``target --sandbox-net`` sees only loopback."""
    _require_netns()
    view = tmp_path / "view.json"
    (tmp_path / "home").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "target", "--sandbox-net", "--max-examples", "1",
         "--", *hostile("netview.py", str(view))],
        cwd=tmp_path, env=_env(HOME=str(tmp_path / "home"), **{netns.ENV_MARKER: "1"}),
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr  # the agent exits at once: a harness error
    assert json.loads(view.read_text(encoding="utf-8")) == ISOLATED


def test_bootstrap_refuses_a_namespace_that_is_not_isolated() -> None:
    """The bootstrap checks before it runs anything: on the host network it stops with one
    line and exit code 2 (it used to run the command)."""
    ok, why = netns.probe_isolation()
    if ok:
        pytest.skip(f"this machine has no network to be refused ({why})")
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz.engine.process.netns", "--inner", "--",
                           sys.executable, "-c", "print('ran')"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not isolated" in proc.stderr


def test_maybe_reexec_runs_the_command_when_only_the_marker_says_inside(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _require_netns()
    if netns.probe_isolation()[0]:
        pytest.skip("this process is isolated already")
    monkeypatch.setenv(netns.ENV_MARKER, "1")
    assert netns.in_netns() is False
    code = netns.maybe_reexec(True, [sys.executable, "-c", "raise SystemExit(7)"])
    assert code == 7
