"""``acp-fuzz client``: what the client under test can do to the files the harness reads and
writes for it. The client is a stranger's program; it may write in its sandbox, where its
stand-ins log their frames, and it knows where that is (``$HOME``, ``$ACP_FUZZ_AGENT``). The
hostile client (``tests/hostile_agents/hostile_client.py``) plants a symlink or a FIFO where
the harness used to keep each step's stdout and stderr, and among the stand-in logs; canary
files under ``tmp_path`` stand for the user's files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.scenarios import Scenario, Step
from acp_fuzz.engine.client import campaign as client_campaign
from acp_fuzz.engine.client.campaign import ClientRun, run_scenario
from acp_fuzz.engine.process.sandbox import bwrap_works
from acp_fuzz.engine.process.transport import line_weight
from tests.security._isolation import hostile, missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Track = Callable[[int | None], None]
SECRET = "acp-fuzz-client-secret-5b1e: the user's private file"
PRECIOUS = "acp-fuzz canary: the user's file, as it was\n"


def _run(trick: list[str], steps: int = 2, *, sandbox_fs: bool = False) -> ClientRun:
    scenario = Scenario(tuple(hostile("hostile_client.py", *trick)), (Step(),) * steps, 60)
    return run_scenario(scenario, CapabilitySet(1), sandbox_fs=sandbox_fs)


def _text(events: list[Event]) -> str:
    return "".join(json.dumps(e.data) for e in events)


def _links(tmp_path: Path, sandbox_fs: bool) -> None:
    secret, canary = tmp_path / "secret.txt", tmp_path / "canary.txt"
    secret.write_text(SECRET, encoding="utf-8")
    canary.write_text(PRECIOUS, encoding="utf-8")
    run = _run(["links", str(secret), str(canary)], sandbox_fs=sandbox_fs)
    # Neither read through the swapped stderr log (into the cassette) nor written through
    # the planted stdout log.
    assert SECRET not in _text(run.events)
    assert canary.read_text(encoding="utf-8") == PRECIOUS
    outputs = [e.data for e in run.events
               if e.kind == "stderr" and e.data.get("stream") == "client-stdout"]
    assert [(o["generation"], o["text"]) for o in outputs] == [(0, "STEP-OUTPUT\n"),
                                                             (1, "STEP-OUTPUT\n")]


def test_a_client_cannot_point_its_step_logs_at_the_users_files(
        tmp_path: Path, no_orphans: Track) -> None:
    _links(tmp_path, sandbox_fs=False)


def test_a_confined_client_cannot_point_its_step_logs_at_the_users_files(
        tmp_path: Path, no_orphans: Track) -> None:
    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    # The links dangle inside the sandbox, which does not show tmp_path: the harness, which
    # reads and writes outside it, is the one that would follow them.
    _links(tmp_path, sandbox_fs=True)


def test_a_fifo_among_the_logs_is_no_connection_and_no_hang(no_orphans: Track) -> None:
    """Opening a FIFO for reading waits for a writer: the harness used to wait for good
    (pytest-timeout ends it). Now a log that is not a regular file is refused, once."""
    run = _run(["fifo"])
    assert run.connections == 2
    refused = [e.data for e in run.events
               if e.kind == "process" and e.data.get("what") == "log-refused"]
    assert refused == [{"what": "log-refused", "generation": 99, "role": "stand-in"}]
    assert run.returncodes == [0, 0]


def test_frames_are_capped_for_the_run_not_only_per_connection(
        no_orphans: Track, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 connections of about 100 frames each, under bounds scaled down from 20,000 a
    connection and 40,000 in all: the run keeps no more than its bound in all."""
    monkeypatch.setattr(client_campaign, "MAX_FRAMES_PER_CONNECTION", 60)
    monkeypatch.setattr(client_campaign, "MAX_RUN_FRAMES", 300, raising=False)
    run = _run(["flood", "20"], steps=1)
    frames = [e for e in run.events if e.kind == "acp"]
    assert len(frames) == 300
    assert run.connections == 20
    capped = [e.data for e in run.events
              if e.kind == "process" and e.data.get("what") == "frames-capped"]
    assert [c["scope"] for c in capped].count("run") == 1


def test_log_bytes_are_capped_for_the_run(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the bytes read, weighed as parsed: logs written as a stand-in writes
    them (20 connections of 100 lines), read under a run's bound of 64 KiB."""
    line = json.dumps({"dir": "send", "msg": {"jsonrpc": "2.0", "method": "x",
                                              "params": {"pad": "p" * 400}}}) + "\n"
    for n in range(20):
        (tmp_path / f"conn-{n}.jsonl").write_text(line * 100, encoding="ascii")
    monkeypatch.setattr(client_campaign, "MAX_RUN_LOG_BYTES", 64 * 1024, raising=False)
    history = History()
    logs = client_campaign._Logs(str(tmp_path), history)
    logs.collect()
    logs.collect()
    kept = [e for e in history.snapshot() if e.kind == "acp"]
    weight = line_weight(line.encode().rstrip(b"\n"))
    assert len(kept) == 64 * 1024 // weight
    logs.close()

