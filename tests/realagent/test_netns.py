"""--sandbox-net: a fresh network namespace where only loopback works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.process import netns
from tests.realagent._support import CANARY, installed_profile

REPO = Path(__file__).resolve().parents[2]

INSIDE = r"""
import errno, json, socket, sys
from acp_fuzz.engine.process.netns import in_netns, probe_isolation
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
cli = socket.create_connection(srv.getsockname(), timeout=5)
conn, _ = srv.accept(); cli.sendall(b"ping"); got = conn.recv(4)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:  # a connect() only asks for a route: nothing is sent, even on a network
    udp.connect(("198.51.100.1", 53)); udp_err = None
except OSError as exc:
    udp_err = errno.errorcode.get(exc.errno)
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
json.dump({"inside": in_netns(), "loopback": got.decode(), "tcp": probe_isolation(),
           "udp": udp_err, "ifaces": ifaces}, sys.stdout)
"""


def _require_netns() -> None:
    ok, reason = netns.netns_available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {reason}")


def test_only_loopback_inside(capfd: pytest.CaptureFixture[str]) -> None:
    _require_netns()
    rc = netns.reexec_in_netns([sys.executable, "-c", INSIDE])
    out = capfd.readouterr().out
    assert rc == 0, out
    report = json.loads(out)
    assert report["inside"] is True
    assert report["loopback"] == "ping"
    assert report["tcp"] == [True, "ENETUNREACH"]
    assert report["udp"] == "ENETUNREACH"
    assert report["ifaces"] == ["lo"]


def test_exit_code_is_passed_through(capfd: pytest.CaptureFixture[str]) -> None:
    _require_netns()
    assert netns.reexec_in_netns([sys.executable, "-c", "raise SystemExit(7)"]) == 7


def test_unavailable_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(netns.ENV_MARKER, raising=False)
    monkeypatch.setattr("acp_fuzz.engine.process.netns.shutil.which", lambda _name: None)
    ok, reason = netns.netns_available()
    assert not ok and "unshare" in reason and "bwrap" in reason
    assert netns.reexec_in_netns(["true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sandbox-net" in err and "unshare" in err


def test_maybe_reexec_is_a_no_op_when_not_requested_or_isolated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(netns.ENV_MARKER, raising=False)
    assert netns.maybe_reexec(False) is None
    # Isolation is what the check finds, never what a variable says.
    monkeypatch.setattr("acp_fuzz.engine.process.netns.probe_isolation",
                        lambda: (True, "ENETUNREACH"))
    assert netns.maybe_reexec(True) is None


def test_cli_check() -> None:
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz.engine.process.netns", "--check"],
                          capture_output=True, text=True, check=False)
    ok, _ = netns.netns_available()
    assert proc.returncode == (0 if ok else 2)
    assert proc.stdout.startswith("available" if ok else "unavailable")


@pytest.mark.realagent
@pytest.mark.parametrize("name", ["codex-acp", "claude-agent-acp"])
def test_agent_turn_inside_namespace(name: str, tmp_path: Path) -> None:
    """The whole harness (gateway + agent) inside the namespace still completes a turn."""
    _require_netns()
    installed_profile(name)
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz.engine.process.netns", "--", sys.executable, "-m",
         "tests.realagent._support", name, str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert summary["netns"] == {"inside": True, "probe": [True, "ENETUNREACH"]}
    assert summary["prompt"]["outcome"] == "ok", summary["stderr_tail"]
    turns = [x for x in summary["exchanges"] if not x["side"]]
    assert turns and all(any(CANARY in c["text"] for c in x["canary"]) for x in turns)
