"""Project settings (``[tool.acp-fuzz]`` or ``acp-fuzz.toml``), as a user meets them: the file
sets the campaign, the command line wins, a bad file is one line (exit 2), and what a file from
a stranger's checkout could abuse is never read from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support import run_cli

pytestmark = pytest.mark.integration

AGENT = [sys.executable, "-m", "acp_fuzz.reference_agent"]
LEAK = Path(__file__).resolve().parents[2] / "cassettes" / "reference" / "leak.cassette"


def _toml_list(words: list[str]) -> str:
    return json.dumps(words)  # a JSON array of strings is a TOML array too


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_the_file_sets_the_campaign_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'someone-elses-agent'\n\n"
        "[tool.acp-fuzz]\n"
        f"command = {_toml_list([*AGENT, '--bug', 'leak'])}\n"
        "max-examples = 3\nseed = 5\ncassette-dir = 'found'\n"
        "report = ['json:report.json']\n")
    proc = run_cli(tmp_path, "target")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the planted leak, from the file
    assert list((tmp_path / "found").glob("prompt.leak-seed5.cassette"))
    assert json.loads((tmp_path / "report.json").read_text())["findings"]
    # The command line's agent replaces the file's whole (no --bug leak), its seed wins.
    proc = run_cli(tmp_path, "target", "--seed", "6", "--", *AGENT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(seed 6)" in proc.stdout


def test_a_command_table_wins_over_the_top_and_acp_fuzz_toml_works(tmp_path: Path) -> None:
    sub = tmp_path / "agent" / "src"
    sub.mkdir(parents=True)
    (tmp_path / "agent" / "acp-fuzz.toml").write_text(
        f"command = {_toml_list(AGENT)}\nmax-examples = 50\n\n[target]\nmax-examples = 2\n")
    proc = run_cli(sub, "target", "--cassette-dir", str(tmp_path / "c"))  # found from below
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("2 examples"), proc.stdout


@pytest.mark.parametrize(("text", "needle"), [
    ("[tool.acp-fuzz]\nmax-exampels = 3\n", "max-exampels: no such option"),
    ("[tool.acp-fuzz]\nmax-examples = 'many'\n", "target.max-examples: must be a whole number"),
    ("[tool.acp-fuzz]\nplugin = ['evil']\n", "plugin: not taken from a file"),
    ("[tool.acp-fuzz]\npass-env = ['AWS_SECRET_ACCESS_KEY']\n", "pass-env: not taken from"),
    ("[tool.acp-fuzz.target]\nnope = 1\n", "[target] nope: no such option of acp-fuzz target"),
    ("[tool.acp-fuzz\n", "not TOML"),
    ("[tool.acp-fuzz]\n" + "x = " + "[" * 5000 + "]" * 5000 + "\n", "not TOML"),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    proc = run_cli(tmp_path, "target", "--", *AGENT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "pyproject.toml" in lines[0] and needle in lines[0], lines[0]


def test_replay_never_runs_an_agent_the_file_names(tmp_path: Path) -> None:
    # A stranger's checkout brings its pyproject.toml: `acp-fuzz replay X` still starts
    # nothing and shows what X records, whatever the file's top-level command is.
    canary = tmp_path / "ran"
    agent = tmp_path / "agent.py"
    agent.write_text(f"open({str(canary)!r}, 'w').close()\n")
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.acp-fuzz]\ncommand = {_toml_list([sys.executable, str(agent)])}\n")
    proc = run_cli(tmp_path, "replay", str(LEAK))
    assert proc.returncode == 2 and "no agent given" in proc.stderr, proc.stdout + proc.stderr
    assert not canary.exists()
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.acp-fuzz.replay]\ncommand = {_toml_list([sys.executable, str(agent)])}\n")
    proc = run_cli(tmp_path, "replay", str(LEAK))
    assert proc.returncode == 2 and "replay runs only the agent named" in proc.stderr
    assert not canary.exists()


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_the_variable_names_or_disables_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.acp-fuzz]\nmax-exampels = 3\n")
    other = tmp_path / "ci.toml"
    other.write_text("max-examples = 1\n")
    env = {"ACP_FUZZ_CONFIG": str(other)}
    proc = run_cli(tmp_path, "target", "--cassette-dir", str(tmp_path / "c"), "--", *AGENT,
                   env=env)
    assert proc.returncode == 0 and "1 example (1 drawn," in proc.stdout, proc.stdout + proc.stderr
    proc = run_cli(tmp_path, "target", "-n", "1", "--cassette-dir", str(tmp_path / "c"), "--",
                   *AGENT, env={"ACP_FUZZ_CONFIG": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_fifo_named_like_a_settings_file_is_no_settings_file(tmp_path: Path) -> None:
    # Neither opened nor waited on: only a regular file is settings (a FIFO hung other
    # readers of this kind); pytest-timeout bounds the test.
    os.mkfifo(tmp_path / "pyproject.toml")
    os.mkfifo(tmp_path / "acp-fuzz.toml")
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "target", "-n", "1",
                           "--cassette-dir", str(tmp_path / "c"), "--", *AGENT],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 example (1 drawn," in proc.stdout
