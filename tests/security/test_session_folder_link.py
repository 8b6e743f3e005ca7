"""A confined agent plants a link where the harness makes its next session folder (#37 HIGH:
the harness must never act on a path the confined program can change).

The agent may write in ``work`` (its own folder, writable under ``--sandbox-fs`` too), so it
can put a link to a host folder at ``work/B`` before the harness makes session B there. The
harness, which runs outside the sandbox, made the folder and wrote its instruction files
(AGENTS.md, CLAUDE.md, GEMINI.md, QWEN.md) by name, so through the link: into a folder of the
host, one the agent cannot see (a user's project, where those files steer the user's own
coding agents). Now the session folder is made and the files written from the descriptor of
``work`` held since the sandbox was made, never through a link.

The host folder here is an empty canary folder of the test's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.workspace import FILES
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from tests.security._isolation import hostile
from tests.security.test_sandbox_fs import _require_bwrap

pytestmark = pytest.mark.integration


def _plant_then_open_b(canary: Path, track: Callable[[int | None], None], *, fs: bool
                       ) -> tuple[str, list[Any]]:
    """Sessions A (the agent plants ``work/B``) and B; what the agent said of the plant, and
    the workspace verdicts of both."""
    spec = TargetSpec.from_command(hostile("plant_session_link.py", f"target={canary}"),
                                   sandbox_fs=fs)
    with Run(spec) as run:
        track(run.agent.pgid)
        run.initialize()
        first = run.execute({"op": "new", "session": "A"})
        assert first.outcome == "ok", (first, run.stderr_note())
        second = run.execute({"op": "new", "session": "B"})
        verdicts = [e.data for e in run.history.snapshot()
                    if e.kind == "verdict" and e.data.get("what") == "workspace"]
    return first.result["planted"], [second.outcome, verdicts]


@pytest.mark.parametrize("fs", [True, False], ids=["sandbox-fs", "unconfined"])
def test_no_instruction_file_is_written_through_a_planted_session_link(
        tmp_path: Path, no_orphans: Any, fs: bool) -> None:
    if fs:
        _require_bwrap()
    canary = tmp_path / "host-project"
    canary.mkdir()
    planted, (outcome, verdicts) = _plant_then_open_b(canary, no_orphans, fs=fs)
    assert planted.startswith("ok:"), planted  # the agent could make the link
    assert sorted(p.name for p in canary.iterdir()) == [], "written through the agent's link"
    assert outcome == "ok"
    # Session A's folder is the harness's own and has its files; B's was taken by the link.
    assert [(v["session"], sorted(v["files"])) for v in verdicts] == [
        ("A", sorted(FILES)), ("B", [])]
