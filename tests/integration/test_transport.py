"""The stdio transport and the sandbox, against a well-behaved agent and hostile ones.

Every agent lives in tests/hostile_agents/. Timeouts given to the transport are short where a
timeout is the expected outcome, and generous where an answer is expected (so a slow machine
only makes the test slower, never wrong). No test asserts elapsed time.
"""

from __future__ import annotations

import os
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.process.client_policy import default_client_handler
from acp_fuzz.engine.process.sandbox import REDACTED, Sandbox, redact_env
from acp_fuzz.engine.process.transport import (
    AgentProcess,
    AgentStartError,
    RpcError,
)

pytestmark = pytest.mark.integration

AGENTS = Path(__file__).resolve().parent.parent / "hostile_agents"
#: For requests that should be answered: long enough for a loaded machine.
ANSWER = 30.0
#: For requests that must not be answered.
SHORT = 0.5

Spawn = Callable[..., AgentProcess]


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def spawn(sandbox: Sandbox, no_orphans: Callable[[int | None], None]) -> Iterator[Spawn]:
    """spawn(name, *args, **AgentProcess kwargs) starts tests/hostile_agents/<name>.py with a
    fresh History; every agent is closed at teardown (before no_orphans checks the groups)."""
    started: list[AgentProcess] = []

    def _spawn(name: str, *args: str, **kwargs: Any) -> AgentProcess:
        kwargs.setdefault("history", History())
        agent = AgentProcess([sys.executable, str(AGENTS / f"{name}.py"), *args],
                             env=sandbox.build_env(), cwd=sandbox.root, **kwargs)
        agent.start()
        no_orphans(agent.pgid)
        started.append(agent)
        return agent

    yield _spawn
    for agent in started:
        agent.close(grace=0.5)


# -- helpers ----------------------------------------------------------------------------------


def hist(agent: AgentProcess) -> History:
    assert agent.history is not None
    return agent.history


def recv(agent: AgentProcess) -> list[dict[str, Any]]:
    return [dict(e.data) for e in hist(agent).of_kind("acp") if e.data["dir"] == "recv"]


def sent(agent: AgentProcess) -> list[dict[str, Any]]:
    return [dict(e.data) for e in hist(agent).of_kind("acp") if e.data["dir"] == "send"]


def process_events(agent: AgentProcess, what: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in hist(agent).of_kind("process") if e.data["what"] == what]


def the_exit(agent: AgentProcess) -> dict[str, Any]:
    exits = process_events(agent, "exit")
    assert len(exits) == 1, exits
    return exits[0]


def live_members(pgid: int) -> list[psutil.Process]:
    """Members of the process group that are alive (zombies count as dead), after giving
    processes that were just killed a bounded time to go."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass

    def alive(ps: list[psutil.Process]) -> list[psutil.Process]:
        out = []
        for p in ps:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    _, still = psutil.wait_procs(alive(members), timeout=10)
    return alive(still)


def is_running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


# -- the well-behaved agent -------------------------------------------------------------------


def test_echo_round_trip_records_every_line(spawn: Spawn) -> None:
    agent = spawn("echo")
    init = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    assert init.outcome == "ok"
    assert init.result["protocolVersion"] == 1
    assert init.id == 1
    new = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=ANSWER)
    assert (new.outcome, new.result, new.id) == ("ok", {"sessionId": "s-1"}, 2)
    echoed = agent.request("_x/thing", ("a", 1), timeout=ANSWER)
    assert echoed.result == {"method": "_x/thing", "params": ["a", 1]}
    failed = agent.request("_test/fail", {"why": 1}, timeout=ANSWER)
    assert failed.outcome == "error"
    assert failed.error == {"code": -32000, "message": "requested failure", "data": {"why": 1}}
    agent.notify("session/cancel", {"sessionId": "s-1"})

    assert agent.alive
    assert agent.close() == 0
    assert not agent.alive

    sends = sent(agent)
    assert [m["msg"].get("id") for m in sends] == [1, 2, 3, 4, None]
    assert sends[2]["msg"]["params"] == ["a", 1]  # recorded as on the wire: a list
    assert all("raw" not in m and "error" not in m for m in sends)
    assert [m["msg"]["id"] for m in recv(agent)] == [1, 2, 3, 4]
    assert all("error" not in m for m in recv(agent))

    spawn_ev = process_events(agent, "spawn")
    assert spawn_ev == [{"what": "spawn", "pid": agent.pid, "argv": agent.argv, "generation": 0}]
    assert the_exit(agent) == {"what": "exit", "pid": agent.pid, "returncode": 0,
                               "generation": 0, "signal": None}
    assert process_events(agent, "kill") == []  # exited on stdin EOF, nothing left to kill
    # Every response is recorded after its request.
    kinds = [(e.data["dir"], (e.data["msg"] or {}).get("id"))
             for e in hist(agent).of_kind("acp")]
    for rid in (1, 2, 3, 4):
        assert kinds.index(("send", rid)) < kinds.index(("recv", rid))
    assert "echo agent ready" in "".join(e.data["text"] for e in hist(agent).of_kind("stderr"))
    assert agent.close() == 0  # idempotent
    assert agent.request("initialize", {}, timeout=ANSWER).outcome == "exited"


def test_agent_script_runs_through_its_shebang(
    sandbox: Sandbox, no_orphans: Callable[[int | None], None]
) -> None:
    agent = AgentProcess([str(AGENTS / "echo.py")], env=sandbox.build_env(), cwd=sandbox.root,
                         history=None)
    agent.start()
    no_orphans(agent.pgid)
    try:
        assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    finally:
        assert agent.close() == 0


def test_concurrent_requests_each_get_their_own_answer(spawn: Spawn) -> None:
    agent = spawn("echo")
    results: dict[tuple[int, int], Any] = {}
    ids: list[int | None] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(100):
            reply = agent.request("_x/echo", {"t": t, "i": i}, timeout=ANSWER)
            with lock:
                results[(t, i)] = reply.result
                ids.append(reply.id)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 800
    for (t, i), result in results.items():
        assert result == {"method": "_x/echo", "params": {"t": t, "i": i}}
    assert sorted(i for i in ids if i is not None) == list(range(1, 801))


def test_start_errors_are_one_clear_line(sandbox: Sandbox, tmp_path: Path) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    cases = [
        (["/nonexistent/agent-binary"], sandbox.root, "not found"),
        (["no-such-agent-on-path-acp-fuzz"], sandbox.root, "not found"),
        ([str(plain)], sandbox.root, "not executable"),
        ([str(AGENTS / "echo.py")], str(tmp_path / "missing-dir"), "does not exist"),
        ([], sandbox.root, "empty command"),
    ]
    for argv, cwd, expected in cases:
        agent = AgentProcess(argv, env=sandbox.build_env(), cwd=cwd, history=History())
        with pytest.raises(AgentStartError) as info:
            agent.start()
        message = str(info.value)
        assert expected in message
        assert "\n" not in message
        assert agent.history is not None and len(agent.history) == 0
        assert agent.close() is None


# -- dying agents -----------------------------------------------------------------------------


def test_exit_at_start(spawn: Spawn) -> None:
    agent = spawn("exit_at_start")
    reply = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    assert reply.outcome == "exited"
    assert agent.wait_exit(ANSWER) == 3
    assert agent.close() == 3
    assert the_exit(agent)["returncode"] == 3
    assert the_exit(agent)["signal"] is None
    assert "fatal: refusing to start" in agent.stderr_tail
    assert live_members(agent.pgid or 0) == []


def test_settling_stderr_for_an_exit_waits_for_the_exit_and_its_last_words(
        sandbox: Sandbox, no_orphans: Callable[[int | None], None]) -> None:
    """An answer can fail for a closed stdout a moment before the process can be reaped (its
    ``poll()`` still says running): told the agent is exiting, settle_stderr waits for the
    exit, so the error that follows quotes the agent's last words (CI saw them lost)."""
    agent = AgentProcess(["sh", "-c", "sleep 0.5; echo last words >&2; exit 3"],
                         history=History(), env=sandbox.build_env(), cwd=sandbox.root)
    agent.start()
    no_orphans(agent.pgid)
    try:
        agent.settle_stderr(30.0, exiting=True)
        assert agent.stderr_tail == "last words\n"
        assert agent.wait_exit(0) == 3
    finally:
        agent.close()


def test_lines_sent_in_one_write_reach_the_agent_together(
        sandbox: Sandbox, no_orphans: Callable[[int | None], None]) -> None:
    """one_write: a prompt and the cancel right behind it are in the pipe together when the
    agent first reads (one write of less than PIPE_BUF is read whole), whatever the load; both
    are recorded, in order."""
    agent = AgentProcess(
        [sys.executable, "-c", "import os, sys; data = os.read(0, 1 << 16); "
         "sys.stderr.write(f'lines in the first read: {data.count(10)}\\n')"],
        history=History(), env=sandbox.build_env(), cwd=sandbox.root)
    agent.start()
    no_orphans(agent.pgid)
    try:
        with agent.one_write():
            pending = agent.send_request("session/prompt", {"sessionId": "s"})
            agent.notify("session/cancel", {"sessionId": "s"})
        assert pending.wait(30).outcome == "exited"
        agent.settle_stderr(30.0, exiting=True)
        assert agent.stderr_tail == "lines in the first read: 2\n"
        sent = [e.data["msg"].get("method") for e in agent.history.events
                if e.kind == "acp" and e.data.get("dir") == "send"]
        assert sent == ["session/prompt", "session/cancel"]
    finally:
        agent.close()


def test_caught_up_has_read_what_the_agent_wrote_before_it_signalled(
        sandbox: Sandbox, no_orphans: Callable[[int | None], None], tmp_path: Path) -> None:
    """caught_up: once the agent has written a line and then signalled by another way (here
    a FIFO; in a campaign, a request reaching the fake model), the line is read and handled,
    whatever the reader thread's schedule (a held turn's "still unanswered" rests on it)."""
    fifo = tmp_path / "signal"
    os.mkfifo(fifo)
    agent = AgentProcess(
        [sys.executable, "-c", "import sys, time; sys.stdout.write("
         "'{\"jsonrpc\": \"2.0\", \"method\": \"written/first\"}\\n'); "
         f"sys.stdout.flush(); open({str(fifo)!r}, 'w').write('now'); time.sleep(60)"],
        history=History(), env=sandbox.build_env(), cwd=sandbox.root)
    agent.start()
    no_orphans(agent.pgid)
    try:
        assert fifo.read_text() == "now"  # blocks until the agent has written its line
        assert agent.caught_up(30.0)
        assert any(e.kind == "acp" and e.data.get("dir") == "recv"
                   and e.data["msg"].get("method") == "written/first"
                   for e in agent.history.events)
    finally:
        agent.close(grace=0)


def test_written_waits_until_the_line_is_in_the_agents_pipe(
        sandbox: Sandbox, no_orphans: Callable[[int | None], None]) -> None:
    """written: a line queued is in the agent's stdin pipe before it returns True (a request
    beside a held turn must be there before the hold ends); a line the pipe cannot take, at
    an agent that reads nothing, is not, and written says so instead of waiting on."""
    agent = AgentProcess(["sh", "-c", "exec sleep 60"], history=History(),
                         env=sandbox.build_env(), cwd=sandbox.root)
    agent.start()
    no_orphans(agent.pgid)
    try:
        agent.send_request("small/one", {})
        assert agent.written(30.0)
        agent.send_request("huge/one", {"text": "x" * (4 << 20)})  # past any pipe's buffer
        assert not agent.written(0.2)
    finally:
        agent.close(grace=0)


def test_exit_in_the_middle_of_a_request(spawn: Spawn) -> None:
    agent = spawn("exit_mid_request")
    assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    reply = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=ANSWER)
    assert reply.outcome == "exited"
    assert reply.id == 2
    assert agent.wait_exit(ANSWER) == 5
    assert [m["msg"]["method"] for m in sent(agent)] == ["initialize", "session/new"]
    # Once the process is known dead, nothing more is sent.
    assert agent.request("session/new", {}, timeout=ANSWER).outcome == "exited"
    assert len(sent(agent)) == 2
    assert agent.close() == 5
    assert the_exit(agent)["returncode"] == 5


def test_writing_to_a_closed_stdin_is_exited_not_a_timeout(spawn: Spawn) -> None:
    agent = spawn("close_stdin")
    # The agent closes stdin before it answers, so by now our next write must fail.
    assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    reply = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=ANSWER)
    assert (reply.outcome, reply.id) == ("exited", 2)
    assert agent.alive  # deaf, not dead
    assert agent.request("session/new", {}, timeout=ANSWER).outcome == "exited"
    assert agent.close(grace=0.2) == -15


def test_never_answers_initialize(spawn: Spawn) -> None:
    agent = spawn("never_init")
    reply = agent.request("initialize", {"protocolVersion": 1}, timeout=SHORT)
    assert (reply.outcome, reply.id) == ("timeout", 1)
    assert agent.alive
    # It exits on stdin EOF, so a generous grace needs no signal.
    assert agent.close(grace=ANSWER) == 0
    assert process_events(agent, "kill") == []
    assert the_exit(agent)["returncode"] == 0


def test_hangs_on_session_new(spawn: Spawn) -> None:
    agent = spawn("hang_session_new")
    assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    reply = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=SHORT)
    assert reply.outcome == "timeout"
    assert agent.close(grace=0.2) == -15
    kills = process_events(agent, "kill")
    assert [(k["signal"], k["reason"]) for k in kills][:1] == [(15, "grace-expired")]
    assert the_exit(agent)["signal"] == 15
    assert live_members(agent.pgid or 0) == []


def test_ignores_sigterm(spawn: Spawn) -> None:
    agent = spawn("ignore_sigterm")
    assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    assert agent.close(grace=0.2) == -9
    kills = [(k["signal"], k["reason"]) for k in process_events(agent, "kill")]
    assert kills[:2] == [(15, "grace-expired"), (9, "term-ignored")]
    assert the_exit(agent)["signal"] == 9
    assert live_members(agent.pgid or 0) == []


def test_grandchild_holding_the_pipes_after_the_agent_exits(spawn: Spawn) -> None:
    agent = spawn("grandchild", "exit")
    init = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    assert init.outcome == "ok"
    grandchild = init.result["grandchild"]
    # The agent exits while `sleep` keeps stdout open: no EOF comes, yet the request must
    # end as "exited" (a timeout here would mean the transport waited for EOF).
    reply = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=ANSWER)
    assert reply.outcome == "exited"
    assert agent.wait_exit(ANSWER) == 0
    assert is_running(grandchild)
    assert agent.close() == 0
    assert [k["reason"] for k in process_events(agent, "kill")] == ["group-cleanup"]
    assert live_members(agent.pgid or 0) == []
    assert not is_running(grandchild)
    assert not any(t.is_alive() for t in agent._threads)


def test_grandchild_holding_the_pipes_while_the_agent_hangs(spawn: Spawn) -> None:
    agent = spawn("grandchild", "hang")
    init = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    grandchild = init.result["grandchild"]
    reply = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=SHORT)
    assert reply.outcome == "timeout"
    assert agent.close(grace=0.2) == -9
    assert the_exit(agent)["signal"] == 9
    assert live_members(agent.pgid or 0) == []
    assert not is_running(grandchild)
    assert not any(t.is_alive() for t in agent._threads)


# -- malformed output -------------------------------------------------------------------------


def test_non_json_lines_are_recorded_not_fatal(spawn: Spawn) -> None:
    agent = spawn("non_json")
    reply = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    assert reply.outcome == "ok"  # its answer ends in CRLF
    assert reply.result["protocolVersion"] == 1
    got = [(m.get("error"), m.get("raw"), m["msg"]) for m in recv(agent)]
    assert got[:6] == [
        ("invalid-json", "Starting agent... this is not json", None),
        ("not-object", "[1, 2, 3]", None),
        ("not-object", "42", None),
        ("invalid-json", "", None),
        ("invalid-json", '{"jsonrpc": "2.0", "method": ', None),
        ("invalid-json", "NaN", None),
    ]
    assert got[6] == (None, None, {"jsonrpc": "2.0", "method": "session/update",
                                   "params": {"crlf": True}})
    assert got[7][2]["id"] == 1


def test_invalid_utf8(spawn: Spawn) -> None:
    agent = spawn("invalid_utf8")
    assert agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER).outcome == "ok"
    bad = recv(agent)[0]
    assert bad["error"] == "invalid-utf8"
    assert bad["msg"] is None
    assert "bad \ufffd\ufffd bytes" in bad["raw"]


def test_half_line_then_silence(spawn: Spawn) -> None:
    agent = spawn("half_line")
    reply = agent.request("initialize", {"protocolVersion": 1}, timeout=SHORT)
    assert reply.outcome == "timeout"
    assert agent.close(grace=ANSWER) == 0
    partial = recv(agent)
    assert partial == [{"dir": "recv", "msg": None, "error": "partial-line",
                        "raw": '{"jsonrpc":"2.0","id":1,"result":{"protocolVer',
                        "size": 46}]


def test_wrong_and_duplicate_ids(spawn: Spawn) -> None:
    agent = spawn("wrong_ids")
    first = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
    assert (first.outcome, first.result) == ("ok", {"which": "right"})
    second = agent.request("session/new", {"cwd": "/x", "mcpServers": []}, timeout=ANSWER)
    assert (second.outcome, second.result, second.id) == ("ok", {"n": 2}, 2)
    got = [(m["msg"]["id"], m["msg"]["result"].get("which"), m.get("error"))
           for m in recv(agent)]
    assert got == [
        (1001, "unknown", "unknown-id"),
        ("1", "string", "unknown-id"),
        (1, "right", None),
        (1, "duplicate", "duplicate-id"),
        (1, "duplicate", "duplicate-id"),
        (2, None, None),
    ]


def test_answer_after_timeout_is_marked_late(spawn: Spawn) -> None:
    agent = spawn("echo")
    held = agent.request("_test/hold", {}, timeout=SHORT)
    assert (held.outcome, held.id) == ("timeout", 1)
    agent.notify("_test/release", None)
    # The echo agent answers the held request before this one, so once this is answered
    # the late answer is in the history.
    assert agent.request("_x/ping", {}, timeout=ANSWER).outcome == "ok"
    late = [m for m in recv(agent) if m["msg"]["id"] == 1]
    assert late == [{"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 1,
                                            "result": {"released": True}}, "error": "late"}]


def test_send_raw(spawn: Spawn) -> None:
    agent = spawn("echo")
    agent.send_raw(b'{"jsonrpc":"2.0","id":"raw-1","method":"_x/raw"}\n')
    agent.send_raw(b"this is not json\n")
    assert agent.request("_x/sync", {}, timeout=ANSWER).outcome == "ok"
    sends = sent(agent)
    assert sends[0] == {"dir": "send", "raw": '{"jsonrpc":"2.0","id":"raw-1","method":"_x/raw"}\n',
                        "msg": {"jsonrpc": "2.0", "id": "raw-1", "method": "_x/raw"}}
    assert sends[1] == {"dir": "send", "raw": "this is not json\n", "msg": None}
    answers = recv(agent)
    assert answers[0]["msg"]["id"] == "raw-1" and "error" not in answers[0]
    assert answers[1]["msg"]["error"]["code"] == -32700
    assert "error" not in answers[1]  # an id:null parse error is not an unknown id


def test_line_cap_boundary(spawn: Spawn) -> None:
    agent = spawn("echo", max_line_bytes=300)

    def line(length: int) -> str:
        head, tail = '{"jsonrpc":"2.0","method":"x","params":"', '"}'
        return head + "p" * (length - len(head) - len(tail)) + tail

    reply = agent.request("_test/emit", {"stdout": [line(300), line(301), line(300)]},
                          timeout=ANSWER)
    assert reply.outcome == "ok"
    got = recv(agent)
    assert got[0]["msg"]["method"] == "x" and "error" not in got[0]
    assert (got[1]["error"], got[1]["size"], got[1]["raw"]) == ("oversize", 301, line(301))
    assert got[2]["msg"]["method"] == "x" and "error" not in got[2]


# -- volume -----------------------------------------------------------------------------------


def test_40mb_line_is_never_held_whole(spawn: Spawn) -> None:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        agent = spawn("huge_line")
        reply = agent.request("initialize", {"protocolVersion": 1}, timeout=ANSWER)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reply.outcome == "ok"
    big = recv(agent)[0]
    assert (big["error"], big["size"], big["msg"]) == ("oversize", 40_000_000, None)
    assert big["raw"].startswith('{"jsonrpc":"2.0","method":"session/update"')
    assert len(big["raw"]) == 4096
    # The cap is 8 MiB; the whole line would be 40 MB (80 MB with a join copy).
    assert peak - base < 32 * 1024 * 1024, f"peak growth {(peak - base) / 2**20:.1f} MiB"


def test_flood_of_notifications_does_not_block_the_answer(spawn: Spawn) -> None:
    agent = spawn("flood")
    reply = agent.request("initialize", {"protocolVersion": 1}, timeout=120)
    assert reply.outcome == "ok"
    got = recv(agent)
    assert len(got) == 100_001
    assert got[-1]["msg"]["id"] == 1
    texts = [m["msg"]["params"]["update"]["content"]["text"] for m in got[:-1]]
    assert texts[0] == "chunk 0" and texts[-1] == "chunk 99999"
    assert agent.close() == 0


def test_stderr_is_drained_bounded_and_truncated_once(spawn: Spawn) -> None:
    agent = spawn("echo", stderr_record_limit=50_000, stderr_tail_bytes=1000)
    reply = agent.request("_test/emit", {"stderr_bytes": 200_000, "stderr": "x"},
                          timeout=ANSWER)
    assert reply.outcome == "ok"
    # The agent is blocked if stderr is not drained; this answer proves it is.
    assert agent.request("_x/after", {}, timeout=ANSWER).outcome == "ok"
    assert agent.close() == 0
    events = [dict(e.data) for e in hist(agent).of_kind("stderr")]
    truncated = [e for e in events if e.get("truncated")]
    assert len(truncated) == 1
    assert events[-1] is not None and events[-1].get("truncated") is True
    assert sum(len(e["text"]) for e in events) == 50_000  # all ASCII: chars == bytes
    assert all(e["generation"] == 0 for e in events)
    assert agent.stderr_tail == "e" * 1000


# -- the client side --------------------------------------------------------------------------


def test_default_client_handler(spawn: Spawn, sandbox: Sandbox) -> None:
    root = sandbox.new_cwd("session-a")
    Path(root, "a.txt").write_text("l1\nl2\nl3\n")
    outside = Path(sandbox.root, "outside.txt")
    outside.write_text("secret\n")
    Path(root, "link").symlink_to(outside)
    agent = spawn("client_calls", client_handler=default_client_handler([root]))
    allow_once = [{"optionId": "r1", "name": "No", "kind": "reject_once"},
                  {"optionId": "a2", "name": "Always", "kind": "allow_always"},
                  {"optionId": "a1", "name": "Once", "kind": "allow_once"}]
    rejects = [{"optionId": "r1", "name": "No", "kind": "reject_once"},
               {"optionId": "r2", "name": "Never", "kind": "reject_always"}]
    calls = [
        ("session/request_permission", {"sessionId": "s", "toolCall": {}, "options": allow_once}),
        ("session/request_permission", {"sessionId": "s", "toolCall": {}, "options": rejects}),
        ("session/request_permission", {"sessionId": "s", "toolCall": {}, "options": []}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/a.txt"}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/a.txt", "line": 2, "limit": 1}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/a.txt", "line": 2}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/../outside.txt"}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/link"}),
        ("fs/read_text_file", {"sessionId": "s", "path": f"{root}/missing.txt"}),
        ("fs/read_text_file", {"sessionId": "s", "path": "a.txt"}),
        ("fs/write_text_file", {"sessionId": "s", "path": f"{root}/sub/new.txt",
                                "content": "hello\n"}),
        ("fs/write_text_file", {"sessionId": "s", "path": f"{root}/../escape.txt",
                                "content": "x"}),
        ("terminal/create", {"sessionId": "s", "command": "ls"}),
        ("session/unknown_thing", {}),
    ]
    reply = agent.request(
        "_test/call_client",
        {"calls": [{"method": m, "params": p} for m, p in calls]},
        timeout=ANSWER,
    )
    assert reply.outcome == "ok"
    responses = reply.result["responses"]
    assert [r["id"] for r in responses] == [f"c{i}" for i in range(1, len(calls) + 1)]

    def outcome(r: dict[str, Any]) -> Any:
        return r["result"] if "result" in r else r["error"]["code"]

    assert [outcome(r) for r in responses] == [
        {"outcome": {"outcome": "selected", "optionId": "r1"}},  # refused, never approved
        {"outcome": {"outcome": "selected", "optionId": "r1"}},
        {"outcome": {"outcome": "cancelled"}},
        {"content": "l1\nl2\nl3\n"},
        {"content": "l2\n"},
        {"content": "l2\nl3\n"},
        -32602,
        -32602,
        -32002,
        -32602,
        {},
        -32602,
        -32601,
        -32601,
    ]
    assert Path(root, "sub", "new.txt").read_text() == "hello\n"
    assert not Path(sandbox.work, "escape.txt").exists()
    # The agent's requests are recorded as recv events, our answers as send events.
    asked = [m["msg"]["method"] for m in recv(agent) if "method" in m["msg"]]
    assert asked == [m for m, _ in calls]
    answered = [m["msg"]["id"] for m in sent(agent) if "method" not in m["msg"]]
    assert answered == [f"c{i}" for i in range(1, len(calls) + 1)]


def test_client_handler_absent_or_broken(spawn: Spawn) -> None:
    def broken(method: str, params: Any) -> Any:
        if method == "custom/error":
            raise RpcError(-32010, "custom", {"k": 1})
        raise ValueError("handler bug")

    call = {"calls": [{"method": "custom/error", "params": {}},
                      {"method": "fs/read_text_file", "params": {}}]}
    no_handler = spawn("client_calls")
    reply = no_handler.request("_test/call_client", call, timeout=ANSWER)
    assert [r["error"]["code"] for r in reply.result["responses"]] == [-32601, -32601]

    with_bug = spawn("client_calls", client_handler=broken)
    reply = with_bug.request("_test/call_client", call, timeout=ANSWER)
    errors = [r["error"] for r in reply.result["responses"]]
    assert errors[0] == {"code": -32010, "message": "custom", "data": {"k": 1}}
    assert errors[1]["code"] == -32603
    assert "ValueError: handler bug" in errors[1]["data"]


# -- the sandbox ------------------------------------------------------------------------------


def test_sandbox_env_is_explicit(
    spawn: Spawn, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACP_FUZZ_LEAK_CANARY", "leaked")
    monkeypatch.setenv("ACP_FUZZ_PASSED", "passed")
    env = sandbox.build_env({"OPENAI_BASE_URL": "http://127.0.0.1:1", "TERM": "xterm"},
                            passthrough=["ACP_FUZZ_PASSED", "ACP_FUZZ_NOT_SET"])
    assert env == {
        "PATH": os.environ["PATH"],
        "HOME": sandbox.home,
        "TMPDIR": os.path.join(sandbox.home, ".tmpdir"),
        "LANG": "C.UTF-8",
        "TERM": "xterm",  # extra wins
        "NO_COLOR": "1",
        "ACP_FUZZ_PASSED": "passed",
        "OPENAI_BASE_URL": "http://127.0.0.1:1",
    }
    agent = spawn("echo")
    seen = agent.request("_test/env", {}, timeout=ANSWER).result
    assert seen == sandbox.build_env()
    assert "ACP_FUZZ_LEAK_CANARY" not in seen


def test_sandbox_tree_and_cleanup(tmp_path: Path) -> None:
    with Sandbox(parent=str(tmp_path)) as sb:
        root = sb.root
        assert os.path.isabs(root) and os.path.basename(root).startswith("acp-fuzz-")
        assert os.path.isdir(sb.home) and os.path.isdir(sb.tmpdir) and os.path.isdir(sb.work)
        cwd = sb.new_cwd("s1")
        assert cwd == os.path.join(root, "work", "s1") and os.path.isdir(cwd)
        assert sb.new_cwd("s1") == cwd
        for bad in ("", ".", "..", "a/b", "../x"):
            with pytest.raises(ValueError):
                sb.new_cwd(bad)
        # Read-only leftovers must not stop the clean-up.
        ro = Path(sb.home, "ro")
        ro.mkdir()
        Path(ro, "f").write_text("x")
        ro.chmod(0o500)
    assert not os.path.exists(root)

    with Sandbox(keep=True, parent=str(tmp_path)) as kept:
        pass
    assert os.path.isdir(kept.root)


def test_redact_env() -> None:
    env = {"OPENAI_API_KEY": "sk-1", "GH_TOKEN": "t", "client_secret": "s", "api_key": "k",
           "PGPASSWORD": "p", "PATH": "/bin", "HOME": "/h"}
    assert redact_env(env) == {"OPENAI_API_KEY": REDACTED, "GH_TOKEN": REDACTED,
                               "client_secret": REDACTED, "api_key": REDACTED,
                               "PGPASSWORD": REDACTED, "PATH": "/bin", "HOME": "/h"}
    assert env["OPENAI_API_KEY"] == "sk-1"  # a copy
