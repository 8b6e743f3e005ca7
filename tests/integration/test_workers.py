"""``acp-fuzz target --workers N``: parallel campaigns that share an example database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import run_cli

pytestmark = pytest.mark.integration


def _target(tmp_path: Path, *args: str, bug: str | None = None
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    # A $TMPDIR longer than a Unix socket path may be (108 bytes), as under pytest-xdist in
    # CI: nothing of the run may put a socket there.
    tmp = tmp_path / "tmp" / ("a-long-temporary-directory-" * 4)
    tmp.mkdir(parents=True, exist_ok=True)
    report = tmp_path / "report.json"
    agent = [sys.executable, "-m", "acp_fuzz.reference_agent", *(["--bug", bug] if bug else [])]
    proc = run_cli(tmp_path, "target", "--workers", "2", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{report}", *args, "--", *agent, env={"TMPDIR": str(tmp)})
    return proc, json.loads(report.read_text()) if report.exists() else {}


def _tmpdir(tmp_path: Path) -> Path:
    (tmp,) = (tmp_path / "tmp").iterdir()
    return tmp


@pytest.mark.slow  # campaign-sized (two workers, 7 s): the long tier, which CI runs
def test_two_workers_share_the_examples_and_leave_nothing_behind(tmp_path: Path,
                                                                 no_orphans: object) -> None:
    proc, report = _target(tmp_path, "--max-examples", "12")
    assert proc.returncode == 0, proc.stderr
    assert report["findings"] == []
    # 6 examples each (more when Hypothesis discards an overrun draw), not one worker's 6.
    assert report["examples_run"] >= 12
    # The run's own shared database and every sandbox were removed.
    assert list(_tmpdir(tmp_path).iterdir()) == []


@pytest.mark.slow
def test_two_workers_find_confirm_and_report_a_bug(tmp_path: Path, no_orphans: object) -> None:
    proc, report = _target(tmp_path, "--max-examples", "60", bug="crash-on-image")
    assert proc.returncode == 1, proc.stderr
    (finding,) = report["findings"]  # both workers may find it: reported once
    assert finding["oracle"] == "agent.crash" and finding["status"] == "failed"
    assert len(finding["steps"]) == 1
    assert Path(finding["cassette"]).is_file()
    assert list(_tmpdir(tmp_path).iterdir()) == []


@pytest.mark.slow
def test_every_progress_event_of_the_workers_reaches_the_interface(tmp_path: Path) -> None:
    """With --workers the progress is the same stream as with one: the workers' failures,
    shrinking and confirmations come up to the caller's handler, and the counts add up.

    In-process, so without ``no_orphans``: the spawn context's resource tracker lives as long
    as this (pytest's) process, by multiprocessing's design; the CLI tests above check that
    a whole run leaves nothing behind."""
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import (
        CampaignEvent,
        CampaignSettings,
        Confirming,
        ExampleDone,
        FailureFound,
        Started,
    )
    from acp_fuzz.engine.campaign.workers import run_parallel

    seen: list[CampaignEvent] = []
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                    "--bug", "accept-unknown-mode"])
    cfg = CampaignSettings(max_examples=20, cassette_dir=tmp_path / "c", max_failures=1)
    result = run_parallel(spec, cfg, 2, on_event=seen.append)
    kinds = {type(e) for e in seen}
    assert {Started, ExampleDone, FailureFound, Confirming} <= kinds, kinds
    assert sum(isinstance(e, Started) for e in seen) == 1  # the parent's, not one per worker
    done = [e.examples for e in seen if isinstance(e, ExampleDone)]
    assert done == sorted(done) and result.reports


# Each worker runs the target that was asked for (issue #24): the whole TargetSpec reaches it.
# In-process like the test above, with a few examples each.

#: The reference agent, logging each initialize it answers (the offer and its answer) to LOG.
LOGGING_AGENT = """\
import json, sys
from acp_fuzz.reference_agent import agent as ref

LOG = {log!r}
answer = ref.Agent.initialize


def logged(self, params):
    result = answer(self, params)
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({{"offer": params.get("protocolVersion"),
                            "answer": result.get("protocolVersion")}}) + "\\n")
    return result


ref.Agent.initialize = logged
sys.exit(ref.main())
"""


def test_every_worker_speaks_the_protocol_asked_for(tmp_path: Path) -> None:
    """``--protocol 2 --workers 2``: before, the workers ran protocol 1."""
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings
    from acp_fuzz.engine.campaign.workers import run_parallel

    log = tmp_path / "initialize.log"
    script = tmp_path / "logging_agent.py"
    script.write_text(LOGGING_AGENT.format(log=str(log)), encoding="utf-8")
    spec = TargetSpec.from_profile("reference", command=[sys.executable, str(script)],
                                   protocol="2")
    cfg = CampaignSettings(max_examples=4, cassette_dir=tmp_path / "c")
    result = run_parallel(spec, cfg, 2)
    assert result.reports == [] and result.examples_run >= 4
    assert result.initialize["protocolVersion"] == 2  # the first worker's own calibration
    # Every agent started anywhere (the parent's calibration, and each worker's calibration
    # and examples) was offered version 2, and answered it.
    # (Each agent runs in a PID namespace of its own: its pid tells nothing.)
    answers = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(answers) >= 3, answers
    assert {(a["offer"], a["answer"]) for a in answers} == {(2, 2)}, answers


def test_every_worker_confines_the_agent_under_sandbox_fs(tmp_path: Path) -> None:
    """``--sandbox-fs --workers 2``: before, the workers ran the agents unconfined. The agent
    starts only where it cannot see a file outside its sandbox; if any agent of a worker could
    see it, that worker would fail to start it (the parent's calibration is confined either
    way)."""
    from acp_fuzz.engine.campaign.runner import HarnessError, TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings, calibrate
    from acp_fuzz.engine.campaign.workers import run_parallel
    from acp_fuzz.engine.process.sandbox import bwrap_works
    from tests.security._isolation import missing

    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    key = tmp_path / "outside" / "id_ed25519"
    key.parent.mkdir()
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY----- acp-fuzz-test-workers", encoding="utf-8")
    agent = ["sh", "-c", f"test ! -e '{key}' && exec '{sys.executable}' -m "
             "acp_fuzz.reference_agent"]
    spec = TargetSpec.from_command(agent, sandbox_fs=True)
    # The control: unconfined, the agent sees the file and does not start.
    with pytest.raises(HarnessError):
        calibrate(TargetSpec.from_command(agent))
    cfg = CampaignSettings(max_examples=4, cassette_dir=tmp_path / "c")
    result = run_parallel(spec, cfg, 2)
    assert result.reports == [] and result.examples_run >= 4
