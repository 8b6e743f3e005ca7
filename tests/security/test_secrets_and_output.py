"""Secrets and output: a hostile agent (tests/hostile_agents/hostile_reference.py: the
reference agent with a planted bug, plus a hostile name, echoed secrets or padding) against
``acp-fuzz target``, ``show``, ``report`` and ``replay``, as a user runs them.

- A ``--pass-env`` value the agent echoes everywhere it can (agentInfo, stderr, its default
  instructions and so the baseline, model requests, URL query, headers, the upstream
  recording) leaves no byte of itself in the cassette or the reports.
- An agent named with terminal escapes, rich markup, Markdown and HTML gets no escape to the
  terminal, no traceback, a report whose table and headings hold, and JUnit that parses.
- A model request that makes an 80 MiB event still gives a finding, a report and a readable
  (clipped) cassette.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import msgpack
import pytest
from markdown_it import MarkdownIt

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.history import History
from acp_fuzz.engine.gateway import Gateway

pytestmark = pytest.mark.integration

PY = sys.executable
HOSTILE = Path(__file__).resolve().parents[1] / "hostile_agents" / "hostile_reference.py"
SECRET = "plain-value-4f9c2e7d1a"
# What a terminal would interpret: C0 but newline and tab, DEL, C1, bidi overrides.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def acp_fuzz(cwd: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "ACP_REF_QUIET": "1"}
    return subprocess.run([PY, "-m", "acp_fuzz", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=900)


def hostile(*opts: str, bug: str = "leak") -> list[str]:
    return [PY, str(HOSTILE), *opts, "--", "--bug", bug]


def _no_trace(data: bytes) -> None:
    assert SECRET.encode() not in data
    assert SECRET.encode("utf-16-le") not in data


@pytest.mark.slow
def test_a_passed_value_leaves_no_trace_in_cassette_or_reports(tmp_path: Path) -> None:
    # A real model server, as the "real provider" (which knows nothing of our token).
    with Gateway(History(), require_token=False) as upstream:
        proc = acp_fuzz(
            tmp_path, "target", "--max-examples", "10", "--cassette-dir", "found",
            "--pass-env", "ACPFUZZ_DEPLOY_KEY", "--model-upstream", upstream.url,
            "--report", "json:r.json", "--report", "junit:r.xml", "--",
            *hostile("--echo-env", "ACPFUZZ_DEPLOY_KEY"),
            env={"ACPFUZZ_DEPLOY_KEY": SECRET})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # The terminal, and so a CI log, holds none of it either (issue #25 §2): the agent line
    # shows the echoed version scrubbed.
    _no_trace((proc.stdout + proc.stderr).encode())
    assert "1.0 built with <redacted>" in proc.stdout
    (cassette,) = (tmp_path / "found").glob("*.cassette")
    _no_trace(cassette.read_bytes())
    _no_trace((tmp_path / "r.json").read_bytes())
    _no_trace((tmp_path / "r.xml").read_bytes())
    c = read_cassette(cassette)
    # The agent did echo it everywhere, and each place now says <redacted>:
    assert c.header.initialize["agentInfo"]["version"] == "1.0 built with <redacted>"
    assert "Deploy key: <redacted>" in json.dumps(c.header.settings["baseline"])
    assert any("my value is <redacted>" in e.data.get("text", "") for e in c.events
               if e.kind == "stderr")
    vcr = msgpack.unpackb(c.attachments["vcr"], raw=False)
    requests = [i["request"] for i in vcr["interactions"]]
    assert requests and all("access_token=%3Credacted%3E" in r["uri"] or
                            "access_token=<redacted>" in r["uri"] for r in requests)
    assert all("api_key=<redacted>" in r["uri"] or "api_key=%3Credacted%3E" in r["uri"]
               for r in requests)
    # A header named like nothing secret, caught by its value:
    assert all(r["headers"]["X-Plain-Echo"] == ["<redacted>"] for r in requests)


@pytest.mark.slow
def test_a_passed_value_of_any_name_reaches_every_worker_and_is_scrubbed(
        tmp_path: Path) -> None:
    proc = acp_fuzz(tmp_path, "target", "--max-examples", "6", "--workers", "2",
                    "--cassette-dir", "found", "--pass-env", "ACPFUZZ_PLAIN", "--",
                    *hostile("--echo-env", "ACPFUZZ_PLAIN"), env={"ACPFUZZ_PLAIN": SECRET})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cassettes = list((tmp_path / "found").glob("*.cassette"))
    assert cassettes  # one per worker that found the leak
    for cassette in cassettes:
        _no_trace(cassette.read_bytes())
        c = read_cassette(cassette)
        # The worker's agent had the value (it echoed it); the cassette holds none of it.
        assert any("my value is <redacted>" in e.data.get("text", "") for e in c.events
                   if e.kind == "stderr")


def test_an_agent_that_exits_early_saying_the_value_does_not_put_it_on_the_terminal(
        tmp_path: Path) -> None:
    agent = ["sh", "-c", 'echo "config loaded, token=$ACPFUZZ_PLAIN" >&2; exit 3']
    proc = acp_fuzz(tmp_path, "target", "--max-examples", "2", "--cassette-dir", "found",
                    "--pass-env", "ACPFUZZ_PLAIN", "--", *agent, env={"ACPFUZZ_PLAIN": SECRET})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "token=<redacted>" in proc.stderr, proc.stderr  # the agent's words, scrubbed
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    _no_trace((proc.stdout + proc.stderr).encode())


@pytest.mark.slow
def test_a_value_written_to_stderr_in_two_writes_leaves_no_trace(tmp_path: Path) -> None:
    """Two writes (two processes: two chunks wherever the reads fall), then the agent."""
    half = len(SECRET) // 2
    agent = ["sh", "-c", f'printf "token=%s" "${{ACPFUZZ_PLAIN%{SECRET[half:]}}}" >&2; '
                         f'printf "%s loaded\n" "${{ACPFUZZ_PLAIN#{SECRET[:half]}}}" >&2; '
                         f'exec "$0" "$@"', *hostile(bug="leak")]
    proc = acp_fuzz(tmp_path, "target", "--max-examples", "10", "--cassette-dir", "found",
                    "--pass-env", "ACPFUZZ_PLAIN", "--", *agent, env={"ACPFUZZ_PLAIN": SECRET})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (cassette,) = (tmp_path / "found").glob("*.cassette")
    _no_trace(cassette.read_bytes())
    stderr = [e.data.get("text", "") for e in read_cassette(cassette).events
              if e.kind == "stderr"]
    # Neither half is left in any chunk (the command line names both halves, so the
    # cassette's bytes hold them there: only the recorded stderr is the agent's output).
    for piece in (SECRET[:half], SECRET[half:]):
        assert not any(piece in text for text in stderr), stderr[:3]
    assert "token=<redacted>" in "".join(stderr) and " loaded" in "".join(stderr)


NAME = ("\x1b]0;pwned\x07\x1b[31m[/x] | <!-- hide the rest\n| fake | row |\u202e "
        "``x`` [link](http://evil.example) \x9b2J")
MD = MarkdownIt("commonmark").enable("table")


def _assert_clean_terminal(text: str) -> None:
    assert "Traceback" not in text
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))


@pytest.mark.slow
def test_a_hostile_agent_name_is_shown_never_interpreted(tmp_path: Path) -> None:
    cmd = hostile("--name-json", json.dumps(NAME),
                  "--stderr-json", json.dumps("\x1b[2J\x1b[1;1Hall good \x9b31m"))
    proc = acp_fuzz(tmp_path, "target", "--max-examples", "5", "--cassette-dir", "found",
                    "--report", "junit:r.xml", "--", *cmd)
    _assert_clean_terminal(proc.stdout + proc.stderr)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # findings, not a crash
    assert "[/x]" in proc.stdout and "\\x1b]0;pwned" in proc.stdout
    ET.parse(tmp_path / "r.xml")
    (cassette,) = (tmp_path / "found").glob("*.cassette")

    show = acp_fuzz(tmp_path, "show", str(cassette))
    assert show.returncode == 0, show.stderr
    _assert_clean_terminal(show.stdout + show.stderr)
    assert "\\x1b[2J" in show.stdout  # the agent's stderr, visibly

    report = acp_fuzz(tmp_path, "report", str(cassette))
    assert report.returncode == 0, report.stderr
    tokens = MD.parse(report.stdout)
    types = [t.type for t in tokens]
    inline = [c.type for t in tokens for c in t.children or []]
    assert "html_block" not in types and "html_inline" not in inline
    assert "link_open" not in inline
    # Nothing is hidden: every section still renders as a heading after the agent's name.
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert "Reproduce" in headings and "Agent" in headings
    # The agent table has its rows (header, agent, command, protocol, systemPrompt, recorded
    # by) and two cells per row, whatever the name holds.
    table = types.index("table_open")
    rows = types[table:types.index("table_close")]
    assert rows.count("tr_open") == 6 and rows.count("td_open") == 10


def test_replay_junit_parses_and_prints_no_escape_whatever_the_path(tmp_path: Path) -> None:
    leak = Path(__file__).resolve().parents[2] / "cassettes" / "reference" / "leak.cassette"
    evil = tmp_path / "evil\x1b[31m\x01\x9b.cassette"
    shutil.copy(leak, evil)
    proc = acp_fuzz(tmp_path, "replay", "--offline", "--junit", "j.xml", str(evil))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _assert_clean_terminal(proc.stdout + proc.stderr)
    case = ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase")
    assert case is not None and case.get("name", "").endswith("evil\\x1b[31m\\x01\\x9b.cassette")


@pytest.mark.slow
def test_an_80_mib_event_still_gives_a_finding_a_report_and_a_cassette(tmp_path: Path) -> None:
    proc = acp_fuzz(tmp_path, "target", "--max-examples", "3", "--cassette-dir", "found",
                    "--report", "json:r.json", "--", *hostile("--pad-mib", "40"))
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    (finding, *_) = report["findings"]
    assert finding["cassette"], report
    c = read_cassette(finding["cassette"] if os.path.isabs(finding["cassette"])
                      else tmp_path / finding["cassette"])
    assert finding["oracle"] in json.dumps(c.header.meta["findings"])
    models = [e for e in c.events if e.kind == "model"]
    assert models and all("body clipped" in e.data["body"] for e in models)
    assert all(len(json.dumps(e.data)) < 20 * 1024 * 1024 for e in models)
