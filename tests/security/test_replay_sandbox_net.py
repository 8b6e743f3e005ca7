"""``replay --sandbox-net`` and the plugin's ``--acp-sandbox-net`` run the agent with only
loopback, as ``target --sandbox-net`` does.

The agent is a wrapper around the reference agent that first probes whether it can reach
anything but loopback and writes the answer to a file.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.process import netns

from ._hostile import LEAK, PY, hostile_cassette, run_acp_fuzz

pytestmark = pytest.mark.integration

PROBE = """\
import sys
from pathlib import Path

from acp_fuzz.engine.process.netns import probe_isolation
from acp_fuzz.reference_agent.agent import main

isolated, why = probe_isolation()
Path(sys.argv[1]).write_text("isolated" if isolated else f"reachable ({why})")
sys.exit(main([]))
"""


@pytest.fixture
def probing_agent(tmp_path: Path) -> tuple[list[str], Path]:
    ok, reason = netns.netns_available()
    if not ok:
        pytest.skip(f"no network namespaces here: {reason}")
    if netns.probe_isolation()[0]:
        pytest.skip("this machine reaches nothing but loopback anyway: nothing to tell apart")
    script = tmp_path / "probing_agent.py"
    script.write_text(PROBE)
    return [PY, str(script), str(tmp_path / "probe.txt")], tmp_path / "probe.txt"


def test_replay_sandbox_net_isolates_the_agent(tmp_path: Path,
                                               probing_agent: tuple[list[str], Path]) -> None:
    agent, probe = probing_agent
    proc = run_acp_fuzz(tmp_path, "replay", "--sandbox-net", str(LEAK), "--", *agent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FIXED")
    assert probe.read_text() == "isolated"


def test_plugin_sandbox_net_isolates_the_agent(tmp_path: Path,
                                               probing_agent: tuple[list[str], Path]) -> None:
    agent, probe = probing_agent
    marker = tmp_path / "pwned"
    hostile_cassette(tmp_path / "corpus" / "x.cassette", marker)
    tests = tmp_path / "tests"
    tests.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tests), str(tests), "--acp-cassettes", str(tmp_path / "corpus"),
         "--acp-agent", shlex.join(agent), "--acp-max-examples", "0", "--acp-sandbox-net"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert probe.read_text() == "isolated"
    assert not marker.exists()
