"""``acp-fuzz client``: nothing the client under test starts outlives the run, not even a
daemon that calls ``setsid`` to leave its process group, and nothing else is killed. The
client gets the PID namespace an agent gets (``engine/process/sandbox.py``); where none can be made,
the harness kills what the example's clients started, found by a random word in their
environment (``ACP_FUZZ_CLIENT_RUN``), not every process that has the example's folder in
its environment, as it used to."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.engine.client import campaign as client_campaign
from acp_fuzz.engine.process.sandbox import Sandbox, agent_command
from tests.security._isolation import hostile, missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Track = Callable[[int | None], None]
#: The daemon's program (``hostile_client.py setsid TAG``).
SLEEP = "import time; time.sleep(1000)"


def _tagged(tag: str) -> list[psutil.Process]:
    """The live processes ``python -c SLEEP tag``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (p.info["cmdline"] or [])[-2:] == [SLEEP, tag] \
                    and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


@pytest.fixture
def tag() -> Iterator[str]:
    """A word on the daemon's and the bystander's command lines; kills what a failed test
    left."""
    word = f"acp-fuzz-client-daemon-{uuid.uuid4().hex}"
    yield word
    for p in _tagged(word):
        with contextlib.suppress(psutil.Error):
            p.kill()


@pytest.fixture
def bystander(tag: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """As each example's sandbox is made, a process that is none of the run's starts with the
    example's stand-in command (and so its folder) in its environment, as the client gets it."""
    started: list[subprocess.Popen[bytes]] = []

    class Watched(Sandbox):
        def __init__(self) -> None:
            super().__init__()
            agent = shlex.join(client_campaign.agent_command(os.path.join(self.root,
                                                                          "stand-in")))
            started.append(subprocess.Popen(
                [sys.executable, "-c", SLEEP, tag], stdin=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", ""), "ACP_FUZZ_AGENT": agent,
                     "PWD": self.root}))

    monkeypatch.setattr(client_campaign, "Sandbox", Watched)
    yield started
    for p in started:
        p.kill()
        p.wait()


def _run_daemon_client(tag: str) -> client_campaign.ClientRun:
    scenario = Scenario(tuple(hostile("hostile_client.py", "setsid", tag)), timeout=60)
    return client_campaign.run_scenario(scenario, CapabilitySet(1))


def _check(run: client_campaign.ClientRun, tag: str,
           bystander: list[subprocess.Popen[bytes]]) -> None:
    said = [e.data["text"] for e in run.events
            if e.kind == "stderr" and e.data.get("stream") == "client-stdout"]
    assert said and said[0].startswith("daemon "), said  # it did start one
    (spared,) = bystander
    # The daemon: the bystander's command line is the same, so tell them apart by pid.
    daemons = [p for p in _tagged(tag) if p.pid != spared.pid]
    _gone, alive = psutil.wait_procs(daemons, timeout=10)
    assert not alive, f"the client's setsid daemon {alive[0].pid} outlived the run"
    assert spared.poll() is None, "a process none of the run's was killed"


def test_a_setsid_daemon_dies_with_its_client_in_a_pid_namespace(
        no_orphans: Track, tag: str, bystander: list[subprocess.Popen[bytes]]) -> None:
    how = agent_command(["true"], root="/", cwd="/", env=os.environ)[1]
    if how == "none":
        missing("PID namespaces", "no working bubblewrap, and not root for `unshare --pid`")
    run = _run_daemon_client(tag)
    spawns = [e.data for e in run.events
              if e.kind == "process" and e.data.get("role") == "client"
              and e.data.get("what") == "spawn"]
    assert [s.get("sandbox") for s in spawns] == [how]
    _check(run, tag, bystander)


def test_without_a_namespace_only_what_the_client_started_is_killed(
        no_orphans: Track, tag: str, bystander: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("acp_fuzz.engine.process.sandbox.bwrap_works", lambda: None)
    monkeypatch.setattr("acp_fuzz.engine.process.sandbox._unshare_pid", lambda: None)
    run = _run_daemon_client(tag)
    assert [e.data.get("sandbox") for e in run.events
            if e.kind == "process" and e.data.get("role") == "client"
            and e.data.get("what") == "spawn"] == [None]
    _check(run, tag, bystander)
