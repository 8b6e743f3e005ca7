"""``acp-fuzz client --sandbox-fs`` and ``--sandbox-net``: the client under test (a stranger's
program) runs confined, the stand-in agent it starts inside the same confinement, and it is
still judged. The client is the reference client with a planted bug, behind a shell line that
first tries what a hostile client would (read a key in the user's HOME, look at the network)
and says what happened on its stderr, which the cassette keeps."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.process import netns
from acp_fuzz.engine.process.sandbox import agent_command, bwrap_works
from tests.security._isolation import REPO, missing

pytestmark = pytest.mark.integration

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- acp-fuzz-client-test-77e1"
BUGGY = [sys.executable, "-m", "acp_fuzz.reference_client", "--bug", "unadvertised-prompt"]
FOUND = "FAILED: client.prompt-unadvertised (MUST, SP-CLIENT-GATE-MUSTNOT), reproduced 3/3"


def _probing_client(probe: str) -> list[str]:
    """The buggy reference client, after ``probe`` (a shell line) has run in its place."""
    return ["sh", "-c", f"{probe}; exec {shlex.join(BUGGY)}"]


def _key(tmp_path: Path) -> Path:
    """A private key in the HOME ``run_cli`` gives acp-fuzz (the user's HOME)."""
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text(SECRET, encoding="utf-8")
    return key


def _finding(tmp_path: Path, *options: str, client: list[str]) -> tuple[Any, Path]:
    """Run ``acp-fuzz client OPTIONS -- CLIENT``; its one finding and that finding's cassette."""
    report = tmp_path / "r.json"
    proc = run_cli(tmp_path, "client", "-n", "2", *options, "--cassette-dir",
                   str(tmp_path / "c"), "--report", f"json:{report}", "--", *client)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert FOUND in proc.stdout
    (f,) = json.loads(report.read_text(encoding="utf-8"))["findings"]
    return f, Path(f["cassette"])


def _client_stderr(cassette: Path) -> str:
    return "".join(e.data["text"] for e in read_cassette(cassette).events
                   if e.kind == "stderr" and e.data.get("stream") == "client-stderr")


def _client_spawns(cassette: Path) -> list[dict[str, Any]]:
    return [e.data for e in read_cassette(cassette).events
            if e.kind == "process" and e.data.get("what") == "spawn"
            and e.data.get("role") == "client"]


def test_sandbox_fs_hides_the_users_files_and_still_finds_the_bug(tmp_path: Path) -> None:
    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    key = _key(tmp_path)
    probe = f"cat {shlex.quote(str(key))} >&2 || echo 'probe: no key' >&2"
    f, cassette = _finding(tmp_path, "--sandbox-fs", client=_probing_client(probe))
    assert f["oracle"] == "client.prompt-unadvertised"
    said = _client_stderr(cassette)
    assert "probe: no key" in said and SECRET not in said
    assert [s.get("sandbox") for s in _client_spawns(cassette)] == ["bwrap pid+fs"]
    # The printed replay line keeps the sandbox; run as printed, it still sees the bug.
    printed = shlex.split(read_cassette(cassette).header.meta["replay"])
    assert printed[:4] == ["acp-fuzz", "replay", "--client", "--sandbox-fs"]
    again = run_cli(tmp_path, *printed[1:])
    assert again.returncode == 1, again.stderr
    assert again.stdout.startswith("FAILED ")


def test_without_sandbox_fs_the_same_client_reads_the_key(tmp_path: Path) -> None:
    """The control: the same client, unconfined but for its PID namespace, reads the key."""
    key = _key(tmp_path)
    probe = f"cat {shlex.quote(str(key))} >&2 || echo 'probe: no key' >&2"
    _, cassette = _finding(tmp_path, client=_probing_client(probe))
    assert SECRET in _client_stderr(cassette)
    pid_only = agent_command(["true"], root="/", cwd="/", env=os.environ)[1]
    assert [s.get("sandbox") for s in _client_spawns(cassette)] == [
        None if pid_only == "none" else pid_only]


def test_sandbox_net_gives_the_client_only_loopback(tmp_path: Path) -> None:
    ok, reason = netns.netns_available()
    if not ok:
        missing("network namespaces", reason)
    view = tmp_path / "view.json"
    probe = shlex.join([sys.executable, str(REPO / "tests" / "hostile_agents" / "netview.py"),
                        str(view)])
    _finding(tmp_path, "--sandbox-net", client=_probing_client(probe))
    assert json.loads(view.read_text(encoding="utf-8")) == {"up": ["lo"],
                                                           "connect": "ENETUNREACH"}
