"""An agent nobody here has seen, described in a file (issue #21 §1): the worked example of
docs/profiles.md, an agent that reads its model endpoint only from a config file in HOME,
is fuzzed through its profile file with every request tied, and its planted bug is found,
shrunk, replayed and run by worker processes; without the file it never reaches the model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.engine.agents.profiles import parse_profile

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "profiles" / "config-home.toml"


def _with_bug(tmp_path: Path, bug: str, *, files: bool = True) -> Path:
    text = EXAMPLE.read_text().replace('"--config"', f'"--bug", "{bug}", "--config"')
    if not files:
        text = text.split("[[files]]")[0] + "[timeouts]" + text.split("[timeouts]")[1]
    path = tmp_path / "my-agent.toml"
    path.write_text(text)
    assert f'"--bug", "{bug}"' in text and ("[[files]]" in text) == files
    return path


def test_the_worked_example_is_a_valid_profile_file(tmp_path: Path) -> None:
    p = parse_profile(EXAMPLE.read_text(), str(EXAMPLE))
    assert p.setup.files and not p.setup.env  # its endpoint comes from the file alone
    proc = run_cli(tmp_path, "profiles", "check", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    assert "files: ${home}/.config/acp-reference/model.json" in proc.stdout


@pytest.mark.slow  # campaign-sized (a campaign, 12 s): the long tier, which CI runs
def test_an_agent_that_reads_its_endpoint_from_home_is_fuzzed_through_its_file(
        tmp_path: Path, no_orphans: object) -> None:
    profile = _with_bug(tmp_path, "leak")
    report = tmp_path / "report.json"
    proc = run_cli(tmp_path, "target", "--profile", str(profile), "-n", "30",
                   "--cassette-dir", str(tmp_path / "c"), "--report", f"json:{report}")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    (finding,) = doc["findings"]
    assert finding["oracle"] == "prompt.leak" and finding["status"] == "failed"
    # Every request reached the fake model with the token, and each one was tied to its turn.
    assert doc["model_requests"]["untied"] == 0 and doc["model_requests"]["refused"] == 0
    assert doc["model_requests"]["turn"] > 0
    # The replay line names the file, and replaying through it fails the same way.
    assert f"--profile {profile}" in proc.stdout
    again = run_cli(tmp_path, "replay", "--profile", str(profile), finding["cassette"])
    assert again.returncode == 1 and "FAILED" in again.stdout, again.stdout + again.stderr


def test_without_its_config_file_the_agent_never_reaches_the_model(tmp_path: Path) -> None:
    profile = _with_bug(tmp_path, "leak", files=False)
    proc = run_cli(tmp_path, "target", "--profile", str(profile), "-n", "2",
                   "--cassette-dir", str(tmp_path / "c"))
    assert proc.returncode == 2, proc.stderr
    assert "calibration" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_worker_processes_run_the_agent_the_file_describes(tmp_path: Path,
                                                           no_orphans: object) -> None:
    profile = _with_bug(tmp_path, "leak")
    report = tmp_path / "report.json"
    proc = run_cli(tmp_path, "target", "--workers", "2", "--profile", str(profile), "-n", "30",
                   "--cassette-dir", str(tmp_path / "c"), "--report", f"json:{report}")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert [f["oracle"] for f in doc["findings"]] == ["prompt.leak"]
    assert doc["model_requests"]["untied"] == 0 and doc["model_requests"]["refused"] == 0


def test_a_bad_profile_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\napi = "openai.chat"\ncommand = ["${python}"]\n'
                   '[timeouts]\ninit = "soon"\n')
    for args in (["target", "--profile", str(bad)], ["replay", "--profile", str(bad), "x"],
                 ["profiles", "check", str(bad)], ["matrix", "--profile", str(bad)],
                 ["agents", "install", str(bad)]):
        proc = run_cli(tmp_path, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.strip().splitlines() == [
            f"acp-fuzz: error: {bad}: timeouts.init: must be a number of seconds, not 'soon'"
        ], (args, proc.stderr)


def test_profiles_show_prints_a_file_to_start_from(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "profiles", "show", "codex-acp")
    assert proc.returncode == 0, proc.stderr
    p = parse_profile(proc.stdout, "shown")
    assert p.name == "codex-acp" and p.npm_package == "@agentclientprotocol/codex-acp"
    unknown = run_cli(tmp_path, "profiles", "show", "no-such-agent")
    assert unknown.returncode == 2 and "known profiles: " in unknown.stderr
    assert sys.executable  # the reference profile runs this interpreter
    listed = run_cli(tmp_path, "profiles")
    assert listed.returncode == 0 and "reference" in listed.stdout
