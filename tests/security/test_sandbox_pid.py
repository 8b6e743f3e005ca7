"""Nothing an agent starts outlives the run, not even a grandchild that calls ``setsid`` to
leave the agent's process group (which the harness kills at the end): the agent runs in its
own PID namespace, and the namespace dies with it."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psutil
import pytest

from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.process.sandbox import agent_command, bwrap_works
from tests.security._isolation import hostile, missing

pytestmark = pytest.mark.integration

#: The escapee's program (tests/hostile_agents/grandchild_setsid.py).
ESCAPEE = "import time; time.sleep(1000)"


def _require_pid_namespace() -> None:
    _argv, how = agent_command(["true"], root="/", cwd="/", env=os.environ)
    if how == "none":
        missing("PID namespaces", "no working bubblewrap, and not root for `unshare --pid`")


def _processes_tagged(tag: str) -> list[psutil.Process]:
    """The live escapees ``python -c SLEEP tag`` (the agent has the tag on its line too)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = p.info["cmdline"] or []
            if cmd[-2:] == [ESCAPEE, tag] and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


@pytest.fixture
def tag() -> Iterator[str]:
    """A unique word on the escapee's command line; kills leftovers of a failed test."""
    word = f"acp-fuzz-escapee-{uuid.uuid4().hex}"
    yield word
    for p in _processes_tagged(word):
        with contextlib.suppress(psutil.Error):
            p.kill()


def test_setsid_grandchild_does_not_outlive_the_run(tag: str) -> None:
    _require_pid_namespace()
    spec = TargetSpec.from_command(hostile("grandchild_setsid.py", tag))
    with Run(spec) as run:
        init = run.initialize()
        assert isinstance(init.get("grandchild"), int)
        # Popen returned after the exec, so the escapee exists (in its own session) by now.
        escapees = _processes_tagged(tag)
        assert len(escapees) == 1
        assert os.getsid(escapees[0].pid) != os.getsid(run.agent.pid or 0)
    _gone, alive = psutil.wait_procs(escapees, timeout=10)
    assert not alive, f"the setsid grandchild {alive[0].pid} outlived the run"
    assert [e.data.get("sandbox") for e in run.history.snapshot()
            if e.kind == "process" and e.data.get("what") == "spawn"] == [
        "bwrap pid" if bwrap_works() else "unshare pid"]


def test_without_the_pid_sandbox_the_escapee_survives(tag: str) -> None:
    """The control: ``sandbox_pid=False`` is today's behaviour, so the test above is the
    namespace's doing (this one kills its escapee itself)."""
    spec = TargetSpec.from_command(hostile("grandchild_setsid.py", tag), sandbox_pid=False)
    with Run(spec) as run:
        run.initialize()
        escapees = _processes_tagged(tag)
    _gone, alive = psutil.wait_procs(escapees, timeout=0.5)
    assert alive == escapees


def test_the_unshare_fallback_also_takes_the_escapee_along(
        tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bubblewrap, root gets the same guarantee from ``unshare --pid``."""
    monkeypatch.setattr("acp_fuzz.engine.process.sandbox.bwrap_works", lambda: None)
    _argv, how = agent_command(["true"], root="/", cwd="/", env=os.environ)
    if how != "unshare pid":
        pytest.skip("the unshare fallback needs root and util-linux's unshare")
    spec = TargetSpec.from_command(hostile("grandchild_setsid.py", tag))
    with Run(spec) as run:
        run.initialize()
        escapees = _processes_tagged(tag)
        assert len(escapees) == 1
    _gone, alive = psutil.wait_procs(escapees, timeout=10)
    assert not alive
    assert [e.data.get("sandbox") for e in run.history.snapshot()
            if e.kind == "process" and e.data.get("what") == "spawn"] == ["unshare pid"]
