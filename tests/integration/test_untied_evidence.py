"""Untied and side requests come with something to look at (issue #38 §2, §4): the JSON
report lists them, ``target`` and ``doctor`` write a cassette when one was untied, ``doctor``
prints the ``[[side]]`` rule that would name it (and that rule, put in a profile, does), and
says when one turn made several model requests and how each was classified."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.history import History

pytestmark = pytest.mark.integration

REFERENCE = (sys.executable, "-m", "acp_fuzz.reference_agent")
TROUBLE = Path(__file__).resolve().parents[1] / "hostile_agents" / "model_trouble.py"
PROFILE = Path(__file__).resolve().parents[2] / "acp_fuzz" / "profiles" / "reference.toml"
DIGEST = "Summarise this workspace's sessions."


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_target_lists_each_untied_request_and_keeps_a_cassette(tmp_path: Path,
                                                               no_orphans: object) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(tmp_path, "target", "-n", "3", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{report}", "--", *REFERENCE, "--bug", "untied-digest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    (untied,) = [e for e in doc["side_requests"] if e["kind"] == "untied"]
    assert (untied["api"], untied["method"], untied["path"]) == (
        "openai.chat", "POST", "/v1/chat/completions")
    assert untied["slots"]["system"] == DIGEST and untied["slots"]["user"]
    assert untied["after"]["op"] == "new" and untied["first_example"] >= 1
    assert untied["count"] == doc["model_requests"]["untied"]
    # The cassette holds the example that sent it: every untied request, whole.
    path = Path(doc["untied_cassette"])
    assert path.parent == tmp_path / "c" and path.name == "untied-seed0.cassette"
    cassette = read_cassette(path)
    assert cassette.header.kind == "untied" and cassette.header.meta["findings"] == []
    sent = [x for _, x in History.from_events(cassette.events).model_exchanges()
            if x.side_kind == "untied"]
    assert sent and all(x.texts("system") == [DIGEST] for x in sent)
    assert cassette.header.meta["untied"] == len(sent)
    assert f"  kept: {path} (`acp-fuzz show --full` it" in proc.stdout
    assert "untied requests (judged for leaks only): 1 distinct" in proc.stdout
    shown = run_cli(tmp_path, "show", "--full", str(path))
    assert "untied request, untied" in shown.stdout
    # The correct agent sends none: no list, no cassette.
    proc = run_cli(tmp_path, "target", "-n", "3", "--cassette-dir", str(tmp_path / "d"),
                   "--report", f"json:{report}", "--", *REFERENCE)
    doc = json.loads(report.read_text())
    assert proc.returncode == 0 and doc["untied_cassette"] is None
    assert [e for e in doc["side_requests"] if e["kind"] == "untied"] == []
    assert not (tmp_path / "d").exists() or not list((tmp_path / "d").iterdir())


def _rule_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = lines.index("    [[side]]")
    return [line[4:] for line in lines[start:start + 5]]


def test_doctor_keeps_an_untied_request_and_the_rule_it_prints_names_it(
        tmp_path: Path, no_orphans: object) -> None:
    proc = run_cli(tmp_path, "doctor", "--cassette-dir", str(tmp_path / "c"), "--",
                   *REFERENCE, "--bug", "untied-digest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "session/new (systemPrompt append, 1 block): ok (sessionId sess-1)" in lines
    assert "  during session/new A (systemPrompt 'append', 1 block(s)): 1 request(s)" in lines
    assert any(line.startswith("  [1] POST /v1/chat/completions -> 200 (openai.chat): untied: ")
               for line in lines)
    assert "  [2] POST /v1/chat/completions -> 200 (openai.chat): tied to session A turn 1" \
        in lines
    kept = tmp_path / "c" / "untied-doctor.cassette"
    assert any(line.startswith(f"untied requests: 1, kept in {kept}") for line in lines)
    assert read_cassette(kept).header.kind == "untied"
    rule = _rule_lines(proc.stdout)
    assert rule[-1] == f'body = {{ "messages.0.content" = {{ prefix = "{DIGEST}" }} }}'
    # docs/profiles.md's advice: the rule, its reason written, in a profile file.
    profile = tmp_path / "mine.toml"
    text = "\n".join(rule).replace('reason = "..."', 'reason = "workspace digest"')
    profile.write_text(PROFILE.read_text().replace('name = "reference"', 'name = "mine"')
                       + "\n" + text + "\n")
    proc = run_cli(tmp_path, "doctor", "--cassette-dir", str(tmp_path / "d"),
                   "--profile", str(profile), "--", *REFERENCE, "--bug", "untied-digest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  [1] POST /v1/chat/completions -> 200 (openai.chat): side request (rule " \
           "'workspace digest')" in proc.stdout.splitlines()
    assert "untied requests:" not in proc.stdout and not list((tmp_path / "d").glob("*"))


def test_doctor_says_when_one_turn_made_several_requests(tmp_path: Path,
                                                         no_orphans: object) -> None:
    agent = ("--", sys.executable, str(TROUBLE), "title")
    proc = run_cli(tmp_path, "doctor", "--cassette-dir", str(tmp_path / "c"), *agent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "note: one turn (session/prompt A (turn 1)) made 2 model requests: [1] tied to " \
           "session A turn 1, [2] tied to session A turn 1." in lines
    assert any(line.startswith("  2 are tied to it: every oracle judges each as a turn")
               for line in lines)
    assert "  a [[side]] rule for a profile file that matches request [2] and not [1] " \
           "(checked):" in lines
    rule = _rule_lines(proc.stdout)
    assert rule[-1].startswith('body = { "messages.0.content" = { prefix = "Generate a short')
    profile = tmp_path / "titles.toml"
    profile.write_text('name = "titles"\napi = "openai.chat"\ncommand = ["x"]\n'
                       + "\n".join(rule).replace('reason = "..."', 'reason = "session title"')
                       + "\n")
    proc = run_cli(tmp_path, "doctor", "--profile", str(profile), *agent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "note: one turn (session/prompt A (turn 1)) made 2 model requests: [1] tied to " \
           "session A turn 1, [2] side request (rule 'session title')." in lines
    assert not any("are tied to it" in line for line in lines)
