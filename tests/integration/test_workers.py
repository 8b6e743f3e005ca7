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
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    report = tmp_path / "report.json"
    agent = [sys.executable, "-m", "acp_fuzz.reference_agent", *(["--bug", bug] if bug else [])]
    proc = run_cli(tmp_path, "target", "--workers", "2", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{report}", *args, "--", *agent, env={"TMPDIR": str(tmp)})
    return proc, json.loads(report.read_text()) if report.exists() else {}


def test_two_workers_share_the_examples_and_leave_nothing_behind(tmp_path: Path,
                                                                 no_orphans: object) -> None:
    proc, report = _target(tmp_path, "--max-examples", "12")
    assert proc.returncode == 0, proc.stderr
    assert report["findings"] == []
    # 6 examples each (more when Hypothesis discards an overrun draw), not one worker's 6.
    assert report["examples_run"] >= 12
    # The run's own shared database and every sandbox were removed.
    assert list((tmp_path / "tmp").iterdir()) == []


def test_two_workers_find_confirm_and_report_a_bug(tmp_path: Path, no_orphans: object) -> None:
    proc, report = _target(tmp_path, "--max-examples", "60", bug="crash-on-image")
    assert proc.returncode == 1, proc.stderr
    (finding,) = report["findings"]  # both workers may find it: reported once
    assert finding["oracle"] == "agent.crash" and finding["status"] == "failed"
    assert len(finding["steps"]) == 1
    assert Path(finding["cassette"]).is_file()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_every_progress_event_of_the_workers_reaches_the_interface(tmp_path: Path) -> None:
    """With --workers the progress is the same stream as with one: the workers' failures,
    shrinking and confirmations come up to the caller's handler, and the counts add up.

    In-process, so without ``no_orphans``: the spawn context's resource tracker lives as long
    as this (pytest's) process, by multiprocessing's design; the CLI tests above check that
    a whole run leaves nothing behind."""
    from acp_fuzz.campaign import (
        CampaignEvent,
        CampaignSettings,
        Confirming,
        ExampleDone,
        FailureFound,
        Started,
    )
    from acp_fuzz.runner import TargetSpec
    from acp_fuzz.workers import run_parallel

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
