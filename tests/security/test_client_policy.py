"""What the harness answers, as the ACP client, to a hostile agent's requests.

Real agent subprocesses (``tests/hostile_agents``) ask for permission, files and terminals; the
client policy refuses permissions (``cancelled`` after a cancel), and reads and writes files only
below the session directory, without links, special files or unbounded reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.process.client_policy import ClientPolicy, default_client_handler
from acp_fuzz.engine.process.sandbox import Sandbox
from acp_fuzz.engine.process.transport import AgentProcess, RpcError

pytestmark = pytest.mark.integration

AGENTS = Path(__file__).resolve().parent.parent / "hostile_agents"
ANSWER = 30.0
ALLOW = {"optionId": "yes", "name": "Allow", "kind": "allow_once"}
ALWAYS = {"optionId": "always", "name": "Always", "kind": "allow_always"}
REJECT = {"optionId": "no", "name": "Reject", "kind": "reject_once"}
SELECTED_REJECT = {"outcome": {"outcome": "selected", "optionId": "no"}}
CANCELLED = {"outcome": {"outcome": "cancelled"}}


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def client(sandbox: Sandbox, no_orphans: Callable[[int | None], None]
           ) -> Iterator[tuple[AgentProcess, str]]:
    """The ``client_calls`` hostile agent, answered by the default client policy for one
    session directory; yields the agent and that directory."""
    root = sandbox.new_cwd("session-a")
    agent = AgentProcess([sys.executable, str(AGENTS / "client_calls.py")],
                         env=sandbox.build_env(), cwd=sandbox.root, history=History(),
                         client_handler=default_client_handler([root]))
    agent.start()
    no_orphans(agent.pgid)
    try:
        yield agent, root
    finally:
        agent.close(grace=0.5)


def ask(agent: AgentProcess, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Have the agent send ``calls`` to the client; the result (or error code) of each."""
    reply = agent.request("_test/call_client", {"calls": [
        {"method": m, "params": p} for m, p in calls]}, timeout=ANSWER)
    assert reply.outcome == "ok", reply
    return [r["result"] if "result" in r else r["error"]["code"]
            for r in reply.result["responses"]]


def permission(session: str, *options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("session/request_permission",
            {"sessionId": session, "toolCall": {"toolCallId": "t"}, "options": list(options)})


# -- permissions -----------------------------------------------------------------------------

def test_permission_is_refused_by_default(client: tuple[AgentProcess, str]) -> None:
    agent, _ = client
    assert ask(agent, permission("s", ALLOW, ALWAYS, REJECT), permission("s", ALLOW, ALWAYS),
               permission("s")) == [SELECTED_REJECT, CANCELLED, CANCELLED]


def test_permission_after_cancel_is_cancelled_until_the_next_prompt(
        client: tuple[AgentProcess, str]) -> None:
    agent, _ = client
    agent.notify("session/cancel", {"sessionId": "s"})
    assert ask(agent, permission("s", ALLOW, REJECT), permission("other", ALLOW, REJECT)) == [
        CANCELLED, SELECTED_REJECT]
    assert agent.request("session/prompt", {"sessionId": "s", "prompt": []},
                         timeout=ANSWER).outcome == "ok"
    assert ask(agent, permission("s", ALLOW, REJECT)) == [SELECTED_REJECT]


def test_a_cancelled_turn_in_a_run_answers_the_late_permission_request_cancelled(
        no_orphans: Callable[[int | None], None]) -> None:
    # The runner's own cancel step (prompt, then session/cancel right behind it) against an
    # agent that asks for permission once it sees the cancel.
    spec = TargetSpec.from_command([sys.executable, str(AGENTS / "permission_after_cancel.py")])
    with Run(spec) as run:
        no_orphans(run.agent.pgid)
        run.initialize()
        assert run.execute({"op": "new", "session": "A"}).outcome == "ok"
        assert run.execute({"op": "cancel", "session": "A"}).outcome == "ok"
        run.close()
    stderr = "".join(e.data["text"] for e in run.history.snapshot() if e.kind == "stderr")
    assert f"permission answer: {json.dumps(CANCELLED)}" in stderr, stderr


# -- files -----------------------------------------------------------------------------------

def read(path: Path | str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("fs/read_text_file", {"sessionId": "s", "path": str(path), **extra})


def write(path: Path | str, content: str) -> tuple[str, dict[str, Any]]:
    return ("fs/write_text_file", {"sessionId": "s", "path": str(path), "content": content})


def test_a_fifo_is_refused_without_blocking(client: tuple[AgentProcess, str]) -> None:
    agent, root = client
    fifo = Path(root, "pipe")
    os.mkfifo(fifo)
    try:
        # Until fixed, the open blocked forever: the answer never came (outcome "timeout").
        assert ask(agent, read(fifo), write(fifo, "x")) == [-32602, -32602]
    finally:
        with contextlib.suppress(OSError):  # frees a reader stuck in open(), if any
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_links_below_the_session_directory_are_not_followed(
        client: tuple[AgentProcess, str], sandbox: Sandbox) -> None:
    agent, root = client
    Path(root, "real").mkdir()
    Path(root, "real", "a.txt").write_text("inside\n")
    Path(root, "link.txt").symlink_to(Path(root, "real", "a.txt"))
    Path(root, "linkdir").symlink_to(Path(root, "real"))
    outside = Path(sandbox.root, "outside.txt")
    outside.write_text("keep me\n")
    # A hard link is how an agent could leave a path below its cwd that leads elsewhere.
    os.link(outside, Path(root, "hard.txt"))
    assert ask(agent,
               read(Path(root, "real", "a.txt")),
               read(Path(root, "link.txt")),
               read(Path(root, "linkdir", "a.txt")),
               write(Path(root, "linkdir", "b.txt"), "x"),
               write(Path(root, "link.txt"), "x"),
               write(Path(root, "hard.txt"), "pwned\n"),
               ) == [{"content": "inside\n"}, -32602, -32602, -32602, -32602, -32602]
    assert not Path(root, "real", "b.txt").exists()
    assert Path(root, "real", "a.txt").read_text() == "inside\n"
    assert outside.read_text() == "keep me\n"


def test_a_huge_file_is_not_read_whole(client: tuple[AgentProcess, str]) -> None:
    agent, root = client
    huge = Path(root, "huge.log")
    with huge.open("wb") as f:
        f.write(b"first line\nsecond line\n")
        f.truncate(256 * 1024 * 1024)  # sparse: 256 MiB of NULs, no newline, no disk
    tracemalloc.start()
    try:
        answers = ask(agent, read(huge, line=1, limit=1), read(huge, line=2, limit=1),
                      read(huge))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answers[:2] == [{"content": "first line\n"}, {"content": "second line\n"}]
    assert answers[2] == -32603  # the whole file is over the cap: an error, not 256 MiB
    assert peak < 16 * 1024 * 1024, f"the client held {peak} bytes to answer"



# -- the session directory is held, not named -------------------------------------------------

def test_a_swapped_session_folder_parent_still_leads_to_the_session_files(
        client: tuple[AgentProcess, str], sandbox: Sandbox, tmp_path: Path) -> None:
    """The folder above the session directory is renamed and a link to a host folder (a
    canary of this test's, laid out the same) put in its place, after the policy was made:
    reads and writes still reach the directory the harness made."""
    agent, root = client
    Path(root, "notes.txt").write_text("inside\n")
    host = tmp_path / "host"
    Path(host, "session-a").mkdir(parents=True)
    Path(host, "session-a", "notes.txt").write_text("HOST CANARY\n")
    os.rename(sandbox.work, sandbox.work + ".old")
    os.symlink(host, sandbox.work)
    assert ask(agent, read(Path(root, "notes.txt")), write(Path(root, "new.txt"), "x"),
               ) == [{"content": "inside\n"}, {}]
    assert sorted(p.name for p in host.rglob("*")) == ["notes.txt", "session-a"]
    assert Path(host, "session-a", "notes.txt").read_text() == "HOST CANARY\n"
    assert Path(sandbox.work + ".old", "session-a", "new.txt").read_text() == "x"


def _fds_into(folder: str) -> list[str]:
    """What this process's open descriptors under ``folder`` name."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target == folder or target.startswith(folder + "/"):
                out.append(target)
    return out


def test_the_policy_closes_its_descriptors(sandbox: Sandbox) -> None:
    root = sandbox.new_cwd("session-a")
    held = _fds_into(sandbox.root)  # the sandbox's own, of its work folder
    assert held == [sandbox.work]
    policy = ClientPolicy([root, root])  # one descriptor, whatever the spelling
    assert sorted(_fds_into(sandbox.root)) == sorted([*held, root])
    policy.close()
    policy.close()
    assert _fds_into(sandbox.root) == held
    with pytest.raises(RpcError) as refused:  # and answers, once closed, with an error
        policy("fs/read_text_file", {"path": os.path.join(root, "x")})
    assert refused.value.code == -32603


def test_a_run_holds_its_work_folder_across_restarts_and_closes_it(
        no_orphans: Callable[[int | None], None], tmp_path: Path) -> None:
    spec = TargetSpec.from_command([sys.executable, str(AGENTS / "client_calls.py")])
    with Run(spec) as run:
        no_orphans(run.agent.pgid)
        root, work = run.sandbox.root, run.sandbox.work
        # Held while the agent runs: by the policy, and by the sandbox (it makes the session
        # folders from it).
        assert _fds_into(root) == [work, work]
        # Swapped by the last process: the next one is not served through the link.
        os.rename(work, work + ".old")
        os.symlink(tmp_path, work)
        assert run.execute({"op": "restart"}).outcome == "ok"
        no_orphans(run.agent.pgid)
        assert _fds_into(root) == [work + ".old"] * 2
    assert _fds_into(root) == []
