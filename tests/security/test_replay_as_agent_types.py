"""``replay --as-agent`` answers on stdio from a stranger's cassette, to a client that may be
hostile too: neither a recorded value JSON has no word for (bytes, ``inf``) nor a client
line nested 200,000 deep ends it in a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette, write_cassette
from acp_fuzz.core.history import Event

from ._hostile import LEAK

pytestmark = pytest.mark.integration

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}


def _cassette(path: Path) -> Path:
    """leak.cassette whose recorded initialize result holds bytes and an infinite float."""
    c = read_cassette(LEAK)
    events = []
    for ev in c.events:
        msg = ev.data.get("msg")
        if ev.kind == "acp" and isinstance(msg, dict) and isinstance(msg.get("result"), dict) \
                and "agentCapabilities" in msg["result"]:
            result = {**msg["result"], "_meta": {"blob": b"\xffraw\x00", "n": float("inf")}}
            ev = Event(ev.seq, ev.t, ev.kind, {**ev.data, "msg": {**msg, "result": result}})
        events.append(ev)
    return write_cassette(path, c.header, events, c.attachments)


def _serve(cassette: Path, *lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_fuzz", "replay", "--as-agent",
                           str(cassette)], input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True, timeout=300)


def test_bytes_and_inf_in_a_recorded_result_are_sent_as_strings(tmp_path: Path) -> None:
    proc = _serve(_cassette(tmp_path / "x.cassette"), json.dumps(INIT))
    assert "Traceback" not in proc.stderr, proc.stderr
    answer = json.loads(proc.stdout.splitlines()[0])  # strict JSON: no Infinity token
    assert answer["id"] == 0
    assert answer["result"]["_meta"] == {"blob": "\ufffdraw\x00", "n": "inf"}


def test_a_deeply_nested_client_line_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    proc = _serve(LEAK, json.dumps(INIT), "[" * 200_000)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert "the client sent a line nested too deeply to read" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["id"] == 0  # it answered before
