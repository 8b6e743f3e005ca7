"""Replay sends only requests that acp-fuzz builds itself (issue #25 §1).

Each hostile cassette is a real recording with one step edited to make acp-fuzz send
something a stranger chose: a method it never probes, an ``mcpServers`` command, a vendor
option, a directory. The agent is the reference agent behind ``mcp_starter.py``, which logs
its stdin and starts every MCP server it is given, as a trusting agent does. The marker file
appearing, or a chosen method, key or directory in the log, means the cassette reached the
agent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.cassette import read_cassette, write_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.engine.campaign.replay import replay_cassette, replay_dir

from ._hostile import LEAK, PY, run_acp_fuzz

pytestmark = pytest.mark.integration

STARTER = Path(__file__).resolve().parents[1] / "hostile_agents" / "mcp_starter.py"


def _server(marker: Path) -> dict[str, Any]:
    return {"name": "x", "command": "sh", "args": ["-c", f"touch {marker}"], "env": []}


def _attacks(marker: Path) -> dict[str, dict[str, Any]]:
    """Each attack: the step that replaces the recording's first ``new`` step."""
    server = _server(marker)
    sp = {"mode": "append", "content": [{"type": "text", "text": "Be brief."}]}
    return {
        "invalid-new-with-servers": {
            "op": "invalid", "method": "session/new", "why": "mode-unknown",
            "params": {"cwd": "/tmp", "mcpServers": [server]}},
        "invalid-load-with-servers": {
            "op": "invalid", "method": "session/load", "why": "unknown session id",
            "params": {"sessionId": "x", "cwd": "/tmp", "mcpServers": [server]}},
        "invalid-vendor-method": {"op": "invalid", "method": "_claude/shell", "params": {}},
        "meta-claude-options": {
            "op": "new", "session": "A", "systemPrompt": sp,
            "_meta": {"claudeCode": {"options": {"mcpServers": {"x": server},
                                                 "permissionMode": "bypassPermissions"}}}},
        "meta-extra-carrier-key": {
            "op": "new", "session": "A", "systemPrompt": sp,
            "_meta": {"systemPrompt": "hi", "claudeCode": {"options": {
                "pathToClaudeCodeExecutable": "/bin/sh"}}}},
        "extra-servers": {"op": "new", "session": "A", "systemPrompt": sp,
                          "extra": {"mcpServers": [server]}},
        "extra-directories": {"op": "new", "session": "A", "systemPrompt": sp,
                              "extra": {"additionalDirectories": [str(marker)]}},
        "prompt-meta-options": {
            "op": "new", "session": "A",
            "systemPrompt": {**sp, "_meta": {"claudeCode": {"options": {
                "mcpServers": {"x": server}}}}}},
        "handle-traversal": {"op": "new", "session": f"../../{marker.name}"},
        "unknown-key": {"op": "new", "session": "A", "mcpServers": [server]},
    }


def _hostile(path: Path, step: dict[str, Any]) -> Path:
    c = read_cassette(LEAK)
    events, swapped = [], False
    for e in c.events:
        if e.kind == "step" and e.data["args"].get("op") == "new" and not swapped:
            e = Event(e.seq, e.t, e.kind, {**e.data, "args": step})
            swapped = True
        events.append(e)
    assert swapped
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_cassette(path, c.header, events, c.attachments)


def _agent(log: Path) -> list[str]:
    return [PY, str(STARTER), str(log)]


def _sent(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()]


def test_the_test_agent_really_starts_the_servers_it_is_given(tmp_path: Path) -> None:
    """The control: sent an ``mcpServers`` command directly, the test agent runs it."""
    marker = tmp_path / "pwned"
    log = tmp_path / "stdin.log"
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new",
           "params": {"cwd": str(tmp_path), "mcpServers": [_server(marker)]}}
    proc = subprocess.run(_agent(log), input="\n".join(json.dumps(m) for m in (init, new)) + "\n",
                          capture_output=True, text=True, timeout=60)
    assert marker.exists(), proc.stderr
    assert [m["method"] for m in _sent(log)] == ["initialize", "session/new"]


@pytest.mark.parametrize("attack", sorted(_attacks(Path("m"))))
def test_a_hostile_step_is_refused_before_anything_is_sent(
        tmp_path: Path, attack: str, no_orphans: object) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "stdin.log"
    cassette = _hostile(tmp_path / f"{attack}.cassette", _attacks(marker)[attack])
    result = replay_cassette(cassette, target=_agent(log))
    assert result.verdict == "ERROR", result
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("step 1 is not one acp-fuzz sends: "), result.error
    assert not marker.exists(), "a cassette's step ran a command through the agent"
    assert _sent(log) == [], "the agent was started for a cassette that was refused"


def test_a_corpus_replays_the_good_cassettes_beside_a_hostile_one(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "stdin.log"
    folder = tmp_path / "corpus"
    _hostile(folder / "a-hostile.cassette", _attacks(marker)["invalid-new-with-servers"])
    good = read_cassette(LEAK)
    write_cassette(folder / "b-good.cassette", good.header, good.events, good.attachments)
    results = {r.path.name: r for r in replay_dir(folder, target=_agent(log))}
    assert results["a-hostile.cassette"].verdict == "ERROR"
    assert results["b-good.cassette"].verdict == "FIXED"  # the reference agent has no leak
    assert not marker.exists()
    sent = _sent(log)
    # Only what acp-fuzz builds: its own methods, no server, no vendor options, its own dirs.
    assert {m.get("method") for m in sent if "method" in m} <= {
        "initialize", "session/new", "session/prompt", "session/load", "session/resume",
        "session/fork", "session/close", "session/list", "session/delete", "session/cancel"}
    for m in sent:
        params = m.get("params") or {}
        assert params.get("mcpServers", []) == []
        assert "claudeCode" not in json.dumps(params.get("_meta", {}))


def test_the_cli_says_which_step_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "stdin.log"
    cassette = _hostile(tmp_path / "x.cassette", _attacks(marker)["meta-claude-options"])
    proc = run_acp_fuzz(tmp_path, "replay", str(cassette), "--", *_agent(log))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ERROR" in proc.stdout + proc.stderr
    assert "'_meta' is not one of the vendor prompt carriers" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists() and _sent(log) == []


def test_the_pytest_plugin_refuses_a_hostile_step_in_the_corpus(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    log = tmp_path / "stdin.log"
    _hostile(tmp_path / "corpus" / "pr-adds-this.cassette",
             _attacks(marker)["invalid-new-with-servers"])
    tests = tmp_path / "tests"
    tests.mkdir()
    proc = subprocess.run(
        [PY, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tests), str(tests), "--acp-cassettes", str(tmp_path / "corpus"),
         "--acp-agent", " ".join(_agent(log)), "--acp-max-examples", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1", "HOME": str(tmp_path)})
    assert not marker.exists(), "the plugin sent a cassette's step as written"
    assert _sent(log) == []
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the item fails: not green
    assert "is not one acp-fuzz probes" in proc.stdout
