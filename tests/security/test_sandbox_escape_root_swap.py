"""A confined agent swaps its session folder's parent for a link to a host folder, then asks
the harness for files through it (issue #37).

Under ``--sandbox-fs`` the agent sees only its sandbox; but the harness answers its
``fs/read_text_file`` and ``fs/write_text_file`` requests on the host. It used to open the
session root (``<root>/work``) by name for each request, so an agent that renamed ``work``
and put a link to ``/`` in its place had the harness read and write the host's files. Now
the root is opened once, when the agent is started, and every request is walked from that
descriptor; and the sandbox root itself is read-only inside, with only ``home`` and ``work``
writable, so ``work`` cannot be renamed in the first place.

The host folder here is a canary folder of the test's own, never a real host file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from tests.security._isolation import hostile
from tests.security.test_sandbox_fs import _require_bwrap

pytestmark = pytest.mark.integration

CANARY = "CANARY-HOST-7f3e: a file of the host\n"
OWN = "the sandbox's own text\n"


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host folder laid out like the session's: ``A/secret.txt`` holds :data:`CANARY`."""
    folder = tmp_path / "host"
    (folder / "A").mkdir(parents=True)
    (folder / "A" / "secret.txt").write_text(CANARY, encoding="utf-8")
    return folder


def _swap(canary: Path, track: Callable[[int | None], None], *, fs: bool
          ) -> tuple[dict[str, Any], list[Any]]:
    """Run the swapping agent on session A; its probes and the client's answers (result or
    error code)."""
    spec = TargetSpec.from_command(hostile("swap_root.py", f"target={canary}"), sandbox_fs=fs)
    with Run(spec) as run:
        track(run.agent.pgid)
        run.initialize()
        out = run.execute({"op": "new", "session": "A"})
        assert out.outcome == "ok", (out, run.stderr_note())
        answers = [r["result"] if "result" in r else r["error"]["code"]
                   for r in out.result["responses"]]
        if not fs:  # the swap took; the write went where the harness's folder went
            root = run.sandbox.root
            assert os.readlink(os.path.join(root, "work")) == str(canary)
            moved = Path(root, "work.old", "A", "written.txt")
            assert moved.read_text(encoding="utf-8") == "PWNED"
    return out.result["probes"], answers


def _canary_untouched(canary: Path) -> None:
    assert sorted(p.name for p in canary.rglob("*")) == ["A", "secret.txt"]
    assert (canary / "A" / "secret.txt").read_text(encoding="utf-8") == CANARY


def test_a_confined_agent_cannot_swap_its_work_folder(canary: Path, no_orphans: Any) -> None:
    _require_bwrap()
    probes, answers = _swap(canary, no_orphans, fs=True)
    # The sandbox root is read-only inside: nothing is created, renamed or planted there.
    assert probes["create in root"] == "error:EROFS"
    assert probes["rename parent"] in ("error:EBUSY", "error:EROFS")
    assert probes["rename home"] in ("error:EBUSY", "error:EROFS")
    assert probes["plant link"] in ("error:EEXIST", "error:EROFS")
    # Its own folders stay writable, and the harness answers from them.
    assert probes["write own"].startswith("ok:")
    assert answers == [{"content": OWN}, {}]
    _canary_untouched(canary)


def test_an_unconfined_agent_that_swaps_its_work_folder_gets_its_own_files(
        canary: Path, no_orphans: Any) -> None:
    """Without ``--sandbox-fs`` the agent can rename ``work`` (it runs as you, on the
    host); the harness still reads and writes the folder it made, not the link's target."""
    probes, answers = _swap(canary, no_orphans, fs=False)
    assert probes["rename parent"] == "ok:None" and probes["plant link"] == "ok:None"
    assert answers == [{"content": OWN}, {}]
    _canary_untouched(canary)
