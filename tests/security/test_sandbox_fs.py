"""``--sandbox-fs``: the agent runs as the invoking user, but sees only its sandbox (HOME and
work folders, writable), the system folders (read-only) and what it needs to run; not the
user's files. A hostile agent that reads a key in the real HOME must fail."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.process.sandbox import bwrap_works
from tests.security._isolation import hostile, missing

pytestmark = pytest.mark.integration

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- acp-fuzz-test-4d2c"
SP = {"mode": "append", "content": [{"type": "text", "text": "CANARY-FS-91b0: be brief."}]}


def _require_bwrap() -> None:
    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")


@pytest.fixture
def real_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The invoking user's HOME, with a private key in it."""
    home = tmp_path / "real-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET, encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


def _probes(spec: TargetSpec) -> dict[str, Any]:
    with Run(spec) as run:
        probes = run.initialize()["probes"]
        assert isinstance(probes, dict)
        return probes


def test_fs_sandbox_hides_the_real_home(real_home: Path, no_orphans: object) -> None:
    _require_bwrap()
    key = str(real_home / ".ssh" / "id_ed25519")
    spec = TargetSpec.from_command(hostile("read_outside.py", f"file={key}"), sandbox_fs=True)
    probes = _probes(spec)
    assert probes[f"read {key}"] == "error:ENOENT"
    assert SECRET not in str(probes)
    # Its own folders stay writable, the system folders are read-only.
    assert probes["write home"].startswith("ok:")
    assert probes["write cwd"].startswith("ok:")
    assert probes["read-only /usr"] == probes["read-only /etc"] == "ok:True"
    # The folder of the repository holds only what runs the agent, no other project.
    work = probes["list /work"]
    assert work.startswith("error:") or "notes" not in work


def test_without_the_fs_sandbox_the_key_is_readable(real_home: Path,
                                                    no_orphans: object) -> None:
    """The control: the same agent, unconfined, reads the key (what main does)."""
    key = str(real_home / ".ssh" / "id_ed25519")
    probes = _probes(TargetSpec.from_command(hostile("read_outside.py", f"file={key}")))
    assert probes[f"read {key}"] == "ok:" + SECRET


def test_reference_agent_turn_under_the_fs_sandbox(no_orphans: object) -> None:
    _require_bwrap()
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"],
                                   sandbox_fs=True)
    with Run(spec) as run:
        run.initialize()
        assert run.execute({"op": "new", "session": "A", "systemPrompt": SP}).outcome == "ok"
        assert run.execute({"op": "prompt", "session": "A"}).outcome == "ok"
        turns = [x for _, x in run.history.model_exchanges() if not x.side]
        assert [(x.session, x.turn) for x in turns] == [("A", 1)]
        assert any("CANARY-FS-91b0" in t for t in turns[0].texts("system"))
        spawn = next(e.data for e in run.history.snapshot() if e.kind == "process")
        assert spawn["sandbox"] == "bwrap pid+fs"


@pytest.mark.slow  # campaign-sized (a campaign under bubblewrap, 9 s): the long tier, which CI runs
def test_target_sandbox_fs_finds_the_planted_bug(tmp_path: Path) -> None:
    """The CLI flag, end to end: a campaign under the sandbox still finds prompt.leak."""
    _require_bwrap()
    (tmp_path / "home").mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "ACP_REF_QUIET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "target", "--sandbox-fs", "--max-examples", "30",
         "--", sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "leak"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "prompt.leak" in proc.stdout


@pytest.mark.realagent
def test_codex_acp_turn_under_the_fs_sandbox(no_orphans: object) -> None:
    _require_bwrap()
    from tests.realagent._support import installed_profile

    installed_profile("codex-acp")
    spec = dataclasses.replace(TargetSpec.from_profile("codex-acp", timeout=120),
                               sandbox_fs=True)
    with Run(spec) as run:
        run.initialize()
        assert run.execute({"op": "new", "session": "A", "systemPrompt": SP}).outcome == "ok"
        out = run.execute({"op": "prompt", "session": "A"})
        assert out.outcome == "ok", run.stderr_note()
        turns = [x for _, x in run.history.model_exchanges() if not x.side]
        assert turns and all(x.session == "A" and x.status == 200 for x in turns)
        assert all(any("CANARY-FS-91b0" in t for t in x.texts("system")) for x in turns)


def test_a_file_in_home_on_the_command_line_is_shown_alone(
        real_home: Path, tmp_path: Path) -> None:
    """A script's folder is shown (for the modules beside it), but never the whole HOME."""
    from acp_fuzz.engine.process.sandbox import agent_read_only_paths

    in_home = real_home / "agent.py"
    in_home.write_text("", encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.py").write_text("", encoding="utf-8")
    shown = agent_read_only_paths([sys.executable, str(in_home), str(project / "agent.py")])
    assert str(in_home) in shown and str(project) in shown
    assert str(real_home) not in shown and str(tmp_path) not in shown


def test_replay_sandbox_fs_hides_your_files_from_the_agent(real_home: Path,
                                                           tmp_path: Path) -> None:
    """``replay --sandbox-fs``: the agent (a shell that starts the buggy reference agent
    only if it cannot see the key) reproduces the recorded leak under the sandbox; without
    it, it sees the key and stops, an ERROR."""
    _require_bwrap()
    cassette = Path(__file__).resolve().parents[2] / "cassettes" / "reference" / "leak.cassette"
    key = real_home / ".ssh" / "id_ed25519"
    agent = ["sh", "-c", f"test ! -e '{key}' && exec '{sys.executable}' -m "
             "acp_fuzz.reference_agent --bug leak"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(real_home),
           "ACP_REF_QUIET": "1"}

    def replay(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "acp_fuzz", "replay", *flags,
                               str(cassette), "--", *agent], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    confined = replay("--sandbox-fs")
    assert confined.returncode == 1 and "FAILED" in confined.stdout, confined.stderr
    assert replay().returncode == 2  # the control: unconfined, the agent saw the key
