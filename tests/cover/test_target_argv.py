"""The agent's command line as the runner takes it: the agent runs in its sandbox folder, not in
the folder acp-fuzz was started in, so a relative path in it is made absolute (docs/ci.md's
``-- node dist/index.js`` found no ``dist/index.js`` there; the docs test caught it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.campaign.runner import HarnessError, TargetSpec


def test_a_relative_path_is_made_absolute_and_nothing_else_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "index.js").write_text("")
    (tmp_path / "serve").write_text("")  # a word that is also a file here: not a path
    monkeypatch.chdir(tmp_path)
    argv = TargetSpec.from_command([sys.executable, "dist/index.js", "serve", "--acp",
                                    "--config=dist/index.js", "-x/y", "no/such/file",
                                    "/abs/path"]).argv
    assert argv == (sys.executable, str(tmp_path / "dist" / "index.js"), "serve", "--acp",
                    "--config=dist/index.js", "-x/y", "no/such/file", "/abs/path")


def test_the_program_is_checked_and_made_absolute(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HarnessError, match=r"agent not found: \./nope"):
        TargetSpec.from_command(["./nope"])
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    assert TargetSpec.from_command(["./agent", "x"]).argv == (str(agent), "x")


def test_every_command_resolves_its_target_one_way() -> None:
    """TargetSpec.resolve, what target, doctor, replay, matrix and the pytest plugin call: a
    command answers within the timeout asked, its initialize within at least the floor (the
    pytest plugin had no floor), a profile runs your command its own way, neither is an
    error."""
    spec = TargetSpec.resolve([sys.executable, "-V"], timeout=2.0, protocol="2")
    assert (spec.request_timeout, spec.init_timeout, spec.protocol) == (2.0, 10.0, "2")
    assert TargetSpec.resolve([sys.executable], timeout=45.0).init_timeout == 45.0
    own = TargetSpec.resolve([sys.executable, "-m", "acp_fuzz.reference_agent"], "reference")
    assert own.profile == "reference" and own.argv[1:] == ("-m", "acp_fuzz.reference_agent")
    with pytest.raises(HarnessError, match="no agent given"):
        TargetSpec.resolve(None)
    with pytest.raises(HarnessError, match="no agent given"):
        TargetSpec.resolve([], None)
