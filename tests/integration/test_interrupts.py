"""Ctrl-C and SIGTERM during `acp-fuzz target`, sent to a real run.

Each test waits for a real signal from the run (a line on its output, or a FIFO the agent
opens mid-request) before interrupting it: no sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO

import psutil
import pytest

pytestmark = pytest.mark.integration


def _start(tmp_path: Path, *agent: str, extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmp),
           "ACP_REF_QUIET": "1", "HOME": str(tmp_path)}
    return subprocess.Popen(
        [sys.executable, "-m", "acp_fuzz", "target", "--cassette-dir", str(tmp_path / "found"),
         "--report", f"json:{tmp_path / 'report.json'}", *extra, "--", *agent],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def _wait_for(stream: IO[str], marker: str) -> list[str]:
    seen = []
    for line in stream:
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"the run ended before {marker!r}: {''.join(seen)}")


def _no_leftovers(tmp_path: Path) -> None:
    assert list((tmp_path / "tmp").iterdir()) == [], "temp folders left behind"
    # Only this run's agents: their TMPDIR lies under this test's tmp folder.
    mine = str(tmp_path / "tmp")
    for p in psutil.process_iter():
        try:
            if p.environ().get("TMPDIR", "").startswith(mine):
                assert p.status() == psutil.STATUS_ZOMBIE, p.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def test_sigint_while_shrinking_writes_the_unconfirmed_finding(tmp_path: Path) -> None:
    proc = _start(tmp_path, sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "leak",
                  extra=("--max-examples", "100000"))
    assert proc.stderr is not None
    _wait_for(proc.stderr, "found a failure")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True
    assert report["findings"], "what was found so far is reported"
    assert {f["status"] for f in report["findings"]} <= {"unconfirmed", "failed", "flaky"}
    cassettes = list((tmp_path / "found").glob("*.cassette"))
    assert cassettes and not list((tmp_path / "found").glob(".*partial*"))
    _no_leftovers(tmp_path)


def test_sigterm_during_a_clean_run_exits_130_with_a_report(tmp_path: Path) -> None:
    proc = _start(tmp_path, sys.executable, "-m", "acp_fuzz.reference_agent",
                  extra=("--max-examples", "100000"))
    assert proc.stdout is not None
    _wait_for(proc.stdout, "baseline:")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True and report["findings"] == []
    _no_leftovers(tmp_path)


STUBBORN = textwrap.dedent('''
    import json, signal, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fifo = sys.argv[1]
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("method") == "initialize":
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": 1, "agentCapabilities": {}}}), flush=True)
        elif msg.get("method") == "session/new":
            with open(fifo, "w") as f:   # tell the test: mid-request now
                f.write("x")
            while True:                  # never answer, ignore EOF and SIGTERM
                signal.pause()
''')


def test_second_ctrl_c_forces_the_exit_and_kills_the_agent(tmp_path: Path) -> None:
    script = tmp_path / "stubborn_agent.py"
    script.write_text(STUBBORN)
    fifo = tmp_path / "mid-request"
    os.mkfifo(fifo)
    proc = _start(tmp_path, sys.executable, str(script), str(fifo),
                  extra=("--timeout", "600"))
    with open(fifo) as f:  # blocks until the agent is inside session/new
        assert f.read(1) == "x"
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    _wait_for(proc.stderr, "press Ctrl-C again")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    _no_leftovers(tmp_path)


def test_a_stop_whose_keyboard_interrupt_was_lost_still_stops_the_campaign(
        tmp_path: Path) -> None:
    """The signal handler's KeyboardInterrupt can vanish (raised inside a finalizer, or turned
    into another error by Hypothesis' set-up): the stop it asked for is raised again before
    the next step, so the campaign ends as interrupted instead of running to its end."""
    from acp_fuzz.engine.campaign import interrupt
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings, ExampleDone, run_campaign

    seen: list[int] = []

    def on_event(ev: object) -> None:
        if isinstance(ev, ExampleDone):
            seen.append(ev.examples)
            if len(seen) == 2:
                interrupt.request()  # as the handler does, minus the exception

    interrupt.reset()
    try:
        result = run_campaign(
            TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"]),
            CampaignSettings(max_examples=1000, cassette_dir=tmp_path / "found"), on_event)
    finally:
        interrupt.reset()
    assert result.interrupted
    assert len(seen) <= 3, f"ran on for {len(seen)} examples after the stop"
    assert result.reports == []


def test_the_stop_flag() -> None:
    from acp_fuzz.engine.campaign import interrupt

    interrupt.reset()
    interrupt.check()  # nothing asked: no exception
    interrupt.request()
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()
    assert interrupt.requested()
    interrupt.acknowledge()
    interrupt.check()  # acknowledged: writing the results is not interrupted in turn
    interrupt.reset()
    assert not interrupt.requested()
