"""``acp-fuzz target`` end to end against every hostile agent in tests/hostile_agents/.

Each case runs the real command line in a subprocess, exactly as a user would::

    python -m acp_fuzz target --max-examples 3 --timeout 2 --cassette-dir D --report json:R \\
        -- python tests/hostile_agents/<agent>.py [args]

and checks the whole product, not one layer:

* it finishes (the subprocess timeout is only a safety net; no elapsed time is asserted);
* the exit code is defined: ``2`` with one ``acp-fuzz: error:`` line on stderr when the agent
  cannot even be initialised or calibrated, ``1`` with the expected finding and a readable
  cassette when it can (``later.py MODE`` behaves until the first request that carries a
  systemPrompt, then misbehaves), ``0`` when the misbehaviour is within the protocol;
* no traceback on stderr, ever;
* no process of the agent survives (nothing whose command line names the agent script, nor the
  ``sleep 1000`` that the grandchild agents leave holding the pipes);
* no ``acp-fuzz-*`` sandbox is left in ``TMPDIR`` (a fresh, empty folder per case);
* the peak RSS of the acp-fuzz process stays under :data:`PEAK_RSS_BOUND_MB` (the kernel's
  high-water mark ``VmHWM``, read from /proc while it runs; see docs/performance.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from acp_fuzz.core.cassette import read_cassette

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

AGENTS = Path(__file__).resolve().parent.parent / "hostile_agents"
#: Safety net only: a run that takes longer than this is killed and the test fails.
SAFETY_TIMEOUT = 900.0
#: The bound on the acp-fuzz process's peak resident set size, whatever the agent does
#: (a 40 MB line, 100,000 notifications per request, ...). Stated in docs/performance.md.
PEAK_RSS_BOUND_MB = 400


@dataclass(frozen=True)
class Case:
    agent: str
    args: tuple[str, ...]
    code: int
    #: For exit code 1: an oracle that must be among the findings.
    oracle: str | None = None
    #: For exit code 2: a piece of the one-line error.
    error: str | None = None
    #: Exit 1 with only agent.hang / protocol.malformed MUST findings is also right.
    slow_ok: bool = False

    @property
    def id(self) -> str:
        return "-".join([self.agent.removesuffix(".py"), *self.args])


CASES = [
    # Cannot be initialised or calibrated: exit 2, one line on stderr.
    Case("exit_at_start.py", (), 2, error="exited before answering initialize"),
    Case("exit_mid_request.py", (), 2, error="calibration"),
    Case("never_init.py", (), 2, error="no answer to initialize"),
    Case("hang_session_new.py", (), 2, error="calibration"),
    Case("non_json.py", (), 2, error="calibration"),
    Case("invalid_utf8.py", (), 2, error="calibration"),
    Case("huge_line.py", (), 2, error="calibration"),
    Case("flood.py", (), 2, error="calibration"),
    Case("half_line.py", (), 2, error="no answer to initialize"),
    Case("ignore_sigterm.py", (), 2, error="calibration"),
    Case("grandchild.py", (), 2, error="calibration"),
    Case("grandchild.py", ("hang",), 2, error="calibration"),
    Case("wrong_ids.py", (), 2, error="calibration"),
    Case("close_stdin.py", (), 2, error="calibration"),
    # Calibrated, then hostile on the first request with a systemPrompt: exit 1, a finding.
    Case("later.py", ("exit",), 1, oracle="agent.crash"),
    Case("later.py", ("grandchild",), 1, oracle="agent.crash"),
    Case("later.py", ("hang",), 1, oracle="agent.hang"),
    Case("later.py", ("ignore-sigterm",), 1, oracle="agent.hang"),
    Case("later.py", ("half-line",), 1, oracle="agent.hang"),
    Case("later.py", ("non-json",), 1, oracle="protocol.malformed"),
    Case("later.py", ("invalid-utf8",), 1, oracle="protocol.malformed"),
    Case("later.py", ("huge-line",), 1, oracle="protocol.malformed"),
    Case("later.py", ("wrong-ids",), 1, oracle="protocol.malformed"),
    # JSON nested 200 levels deep (clipped when recorded, or the cassette could not be
    # written) and 100,000 deep (more than the parser takes: recorded raw).
    Case("later.py", ("deep",), 1, oracle="protocol.malformed"),
    # 100,000 valid notifications per request are within the protocol. Whether the answer
    # behind them beats --timeout 2 depends on the machine: exit 0, or 1 for agent.hang only
    # (and the late answer it leads to).
    Case("later.py", ("flood",), 0, slow_ok=True),
]


class PeakRss:
    """Samples a process's ``VmHWM`` (the kernel's own peak-RSS high-water mark) until it
    exits. VmHWM only grows, so the last sample is the peak up to that moment; polling can
    miss only what happens in the last interval before exit (the final cassette write)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        path = f"/proc/{self.pid}/status"
        while not self._stop.is_set():
            try:
                with open(path) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                            break
            except (OSError, ValueError):
                return  # gone
            self._stop.wait(0.02)  # sampling period, not synchronisation

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def _survivors(agent: Path, tmpdir: Path, before: set[int]) -> list[str]:
    """Live processes of this run's agent: its command line names the agent script (a copy
    private to this test), or its environment points into this test's TMPDIR (the sandbox
    HOME of every agent, inherited by the ``sleep 1000`` grandchildren)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        info = p.info
        if info["pid"] in before or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = info["cmdline"] or []
        try:
            home = p.environ().get("HOME", "")
        except psutil.Error:
            home = ""
        if any(str(agent) in c for c in cmd) or home.startswith(str(tmpdir)):
            found.append(f"{info['pid']} {' '.join(cmd)[:120]}")
    return found


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_target_survives_hostile_agent(case: Case, tmp_path: Path,
                                       no_orphans: Callable[[int | None], None]) -> None:
    # A private copy of the agents: its path is unique to this test, even when another run of
    # the same test is going on at the same time.
    agents = tmp_path / "agents"
    shutil.copytree(AGENTS, agents, ignore=shutil.ignore_patterns("__pycache__"))
    agent = agents / case.agent
    tmpdir = tmp_path / "tmp"
    cwd = tmp_path / "cwd"
    cassettes = tmp_path / "cassettes"
    report = tmp_path / "report.json"
    tmpdir.mkdir()
    cwd.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "acp_fuzz", "target", "--max-examples", "3", "--timeout", "2",
            "--cassette-dir", str(cassettes), "--report", f"json:{report}",
            "--", sys.executable, str(agent), *case.args]
    before = {p.pid for p in psutil.process_iter()}
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    no_orphans(proc.pid)  # its process group: acp-fuzz itself
    rss = PeakRss(proc.pid)
    try:
        out_b, err_b = proc.communicate(timeout=SAFETY_TIMEOUT)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        proc.communicate()
        pytest.fail(f"acp-fuzz target did not finish within the {SAFETY_TIMEOUT:g}s safety net")
    finally:
        peak_mb = rss.stop()
    out = out_b.decode("utf-8", "replace")
    err = err_b.decode("utf-8", "replace")
    why = f"\nexit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"

    assert "Traceback" not in err and "Traceback" not in out, why
    code = case.code
    if case.slow_ok and proc.returncode == 1:
        code = 1
    assert proc.returncode == code, why
    if case.code == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("acp-fuzz: error: "), why
        assert case.error is not None and case.error in lines[0], why
        assert not report.exists()
    else:
        data = json.loads(report.read_text(encoding="utf-8"))
        assert data["exit_code"] == code
        oracles = {f["oracle"] for f in data["findings"]}
        must = {f["oracle"] for f in data["findings"] if f["severity"] == "MUST"}
        if case.oracle is None and code == 0:
            assert not must, data["findings"]
        elif case.oracle is None:
            assert must and must <= {"agent.hang", "protocol.malformed"}, data["findings"]
        else:
            assert case.oracle in oracles, (oracles, why)
        for f in data["findings"]:
            c = read_cassette(f["cassette"])
            assert c.header.kind == "finding" and c.events
    print(f"{case.id}: exit {proc.returncode}, peak RSS {peak_mb:.0f} MB")
    assert _survivors(agent, tmpdir, before) == []
    assert sorted(os.listdir(tmpdir)) == [], "left in TMPDIR"
    assert peak_mb <= PEAK_RSS_BOUND_MB, f"peak RSS {peak_mb:.0f} MB"
