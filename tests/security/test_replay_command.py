"""Replay runs only the agent the user names, never the command a cassette records.

Each test replays a cassette whose recorded agent is ``sh -c 'touch MARKER'``: the marker file
appearing means acp-fuzz ran a stranger's command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.replay import replay_cassette, replay_dir
from acp_fuzz.reporting import render_markdown

from ._hostile import REFERENCE, hostile_cassette, run_acp_fuzz

pytestmark = pytest.mark.integration


def test_bare_replay_shows_the_recorded_command_and_runs_nothing(
        tmp_path: Path, no_orphans: object) -> None:
    marker = tmp_path / "pwned"
    cassette = hostile_cassette(tmp_path / "x.cassette", marker)
    proc = run_acp_fuzz(tmp_path, "replay", str(cassette))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert not marker.exists(), "replay ran the command recorded in the cassette"
    # The recorded command is shown, shell-quoted, on one line, with the way out.
    assert f"records: sh -c 'touch {marker}'" in proc.stderr
    assert "-- ./your-agent" in proc.stderr and "--trust-recorded-command" in proc.stderr
    assert "Traceback" not in proc.stderr
    # The safe form replays against the agent named after --, whatever the cassette says.
    proc = run_acp_fuzz(tmp_path, "replay", str(cassette), "--", *REFERENCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FIXED")
    assert not marker.exists()


def test_bare_replay_of_a_folder_runs_none_of_its_commands(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    markers = [tmp_path / "one", tmp_path / "two"]
    hostile_cassette(folder / "a.cassette", markers[0])
    hostile_cassette(folder / "sub" / "b.cassette", markers[1])
    proc = run_acp_fuzz(tmp_path, "replay", str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert not any(m.exists() for m in markers)
    for m in markers:
        assert f"touch {m}" in proc.stderr
    assert proc.stdout == ""  # no verdict lines: nothing was replayed


def test_control_characters_in_the_recorded_command_are_shown_not_interpreted(
        tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    cassette = hostile_cassette(tmp_path / "x.cassette", marker)
    c = read_cassette(cassette)
    # A command that would clear the screen and print a harmless-looking line over itself.
    c.header.target = ["sh", "-c", f"touch {marker}\n\x1b[2K\x1b[1A./my-agent"]
    from acp_fuzz.core.cassette import write_cassette

    write_cassette(cassette, c.header, c.events)
    proc = run_acp_fuzz(tmp_path, "replay", str(cassette))
    assert proc.returncode == 2
    assert not marker.exists()
    assert "\x1b" not in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "records:" in ln)
    assert "\\n\\x1b[2K\\x1b[1A./my-agent" in line


def test_engine_replay_without_an_agent_is_an_error_naming_the_command(
        tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    cassette = hostile_cassette(tmp_path / "x.cassette", marker)
    result = replay_cassette(cassette)
    assert result.verdict == "ERROR"
    assert result.error is not None and f"touch {marker}" in result.error
    assert [r.verdict for r in replay_dir(tmp_path)] == ["ERROR"]
    assert not marker.exists()


def test_a_recorded_profile_is_not_started_either(tmp_path: Path) -> None:
    # A cassette may name a profile instead of a command: replay must not pick it either.
    cassette = hostile_cassette(tmp_path / "x.cassette", tmp_path / "pwned",
                                settings={"profile": "codex-acp"})
    result = replay_cassette(cassette)
    assert result.verdict == "ERROR" and result.error is not None
    assert "--profile codex-acp" in result.error
    assert result.runs == 0 and not result.transcripts


def test_the_opt_in_runs_the_recorded_command_and_says_so(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    cassette = hostile_cassette(tmp_path / "x.cassette", marker)
    proc = run_acp_fuzz(tmp_path, "replay", "--trust-recorded-command", str(cassette))
    assert marker.exists()  # the user asked for it
    assert f"running the command recorded in {cassette}: sh -c 'touch {marker}'" in proc.stderr
    assert proc.returncode == 2 and proc.stdout.startswith("ERROR")  # sh is no agent


def test_the_bug_report_reproduces_only_with_an_agent_the_reader_names(
        tmp_path: Path) -> None:
    cassette = hostile_cassette(tmp_path / "x.cassette", tmp_path / "pwned",
                                settings={"profile": "claude-agent-acp"})
    text = render_markdown(read_cassette(cassette), path="x.cassette")
    reproduce = text.split("## Reproduce", 1)[1]
    commands = [ln for ln in reproduce.splitlines() if ln.startswith("acp-fuzz replay")]
    assert commands == ["acp-fuzz replay x.cassette -- ./your-agent",
                        "acp-fuzz replay --profile claude-agent-acp x.cassette"]
    assert "touch" not in text.split("## Reproduce", 1)[1]
