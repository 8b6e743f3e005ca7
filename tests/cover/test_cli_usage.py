"""A command-line mistake is one line on stderr and exit 2 (the brief: bad CLI arguments get a
clear one-line error), never typer's framed usage box."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_fuzz.cli import main

MISTAKES = {
    "a misspelt option": (["target", "--cassettes", "x"], "No such option: --cassettes"),
    "a bad value": (["target", "-n", "abc", "--", "agent"], "'--max-examples'"),
    "a value out of range": (["target", "-n", "0", "--", "agent"], "'--max-examples'"),
    "a missing argument": (["replay"], "Missing argument"),
    "an unknown command": (["bogus"], "No such command 'bogus'"),
    "an option without its value": (["target", "--seed"], "'--seed' requires an argument"),
    "a merge of nothing": (["report", "merge"], "Missing argument"),
}


@pytest.mark.parametrize("argv, said", MISTAKES.values(), ids=MISTAKES.keys())
def test_a_usage_mistake_is_one_line_and_exit_2(argv: list[str], said: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path))
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("acp-fuzz: error: ") and said in lines[0], lines[0]
    assert "(see 'acp-fuzz" in lines[0] and "-h')" in lines[0]  # where the help is
    assert not set("╭╰│") & set(lines[0])


def test_nothing_asked_prints_the_help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path))
    assert main([]) == 2
    captured = capsys.readouterr()
    assert "Usage: acp-fuzz" in captured.out and "target" in captured.out
    assert captured.err == ""


def test_help_is_exit_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path))
    assert main(["target", "-h"]) == 0
    assert "--max-examples" in capsys.readouterr().out


#: Values that click takes and acp-fuzz's own checks refuse (before any agent starts).
REFUSED = {
    "a shard past the last": (["target", "--shard", "4/3", "--", "agent"],
                              "--shard takes K/N with 1 <= K <= N <= 1000 (e.g. 2/3), got '4/3'"),
    "a shard of none": (["target", "--shard", "0/3", "--", "agent"], "got '0/3'"),
    "a shard that is not K/N": (["target", "--shard", "two", "--", "agent"], "got 'two'"),
    "a merge report of an unknown kind": (["report", "merge", "a.json", "--report", "pdf:x"],
                                          "markdown:PATH, html:PATH, junit:PATH or json:PATH"),
}


@pytest.mark.parametrize("argv, said", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_value_is_one_line_and_exit_2(argv: list[str], said: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("acp-fuzz: error: "), captured.err
    assert said in lines[0]
