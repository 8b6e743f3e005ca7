"""Secrets never reach a cassette: auth headers, and the values of secret-looking variables,
even when the agent echoes them (here: to stderr, which is recorded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette

pytestmark = pytest.mark.integration

SECRET = "sk-live-acpfuzz-test-0123456789abcdef"


@pytest.mark.slow
def test_a_passed_secret_echoed_by_the_agent_is_scrubbed(tmp_path: Path) -> None:
    agent = tmp_path / "echo_env_agent.sh"
    agent.write_text(
        "#!/bin/sh\n"
        'echo "my key is $MY_SERVICE_API_KEY and $OPENAI_API_KEY" >&2\n'
        f"exec {sys.executable} -m acp_fuzz.reference_agent --bug accept-unknown-mode\n")
    agent.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ACP_REF_QUIET": "1",
           "MY_SERVICE_API_KEY": SECRET, "OPENAI_API_KEY": SECRET + "-openai"}
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "target", "--max-examples", "30",
         "--pass-env", "MY_SERVICE_API_KEY", "--pass-env", "OPENAI_API_KEY",
         "--cassette-dir", str(tmp_path / "found"), "--report",
         f"json:{tmp_path / 'r.json'}", str(agent)],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (cassette,) = (tmp_path / "found").glob("*.cassette")
    raw = cassette.read_bytes()
    assert SECRET.encode() not in raw
    c = read_cassette(cassette)
    stderr = "".join(e.data.get("text", "") for e in c.events if e.kind == "stderr")
    # The agent did echo both values; the cassette keeps the line, not the secrets.
    assert "my key is <redacted> and <redacted>" in stderr
    # The passed key won over the gateway's dummy: the echoed OpenAI key was the real one.
    assert SECRET not in json.dumps(json.loads((tmp_path / "r.json").read_text()))


def test_auth_headers_are_redacted_in_model_events(tmp_path: Path) -> None:
    from acp_fuzz.engine.campaign.runner import Run, TargetSpec

    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
    with Run(spec) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A"})
        run.execute({"op": "prompt", "session": "A"})
        (_, x), = run.history.model_exchanges()
    assert x.headers["authorization"] == "<redacted>"
