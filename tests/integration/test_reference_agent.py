"""The reference agent, driven as a real subprocess over stdio.

The NDJSON client and the Chat Completions server are both written here on purpose: the agent
must be testable without the rest of acp-fuzz. Each test gets its own ``HOME``, so sessions on
disk never leak between tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz import reference_agent
from acp_fuzz.reference_agent import BUGS, DEFAULT_INSTRUCTIONS, VARIANTS
from acp_fuzz.reference_agent.agent import (
    COMPACTION_BUGS,
    DIRECTORY_BUGS,
    PLAN_INSTRUCTION,
    STATUS_BUGS,
    SWITCH_BUGS,
    TITLE_BUGS,
)

pytestmark = pytest.mark.integration

# Generous: only reached when the agent is broken (a missing answer), never on the happy path.
READ_TIMEOUT_S = 15.0
CWD = "/work/project"
P = "You review code. Focus on security."
Q = "Answer only in French."


def defaults(cwd: str = CWD) -> str:
    return f"{DEFAULT_INSTRUCTIONS}\n\nWorking directory: {cwd}"


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def sp(mode: str, *texts: str) -> dict[str, Any]:
    return {"mode": mode, "content": [text(t) for t in texts]}


# ---------------------------------------------------------------------------------------------
# A recording Chat Completions server.
# ---------------------------------------------------------------------------------------------


class ModelServer:
    """Answers POST /v1/chat/completions and records every request body and header."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.status = 200
        self.reply = "ok"
        self.failures = 0  # how many of the next requests fail with 503 (a model fault)
        # Set: the next request waits for it (the model is thinking), after setting arrived.
        self.hold: threading.Event | None = None
        self.arrived = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                server.paths.append(self.path)
                server.headers.append(dict(self.headers))
                server.requests.append(json.loads(self.rfile.read(length)))
                hold, server.hold = server.hold, None
                if hold is not None:
                    server.arrived.set()
                    hold.wait(READ_TIMEOUT_S)
                body = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": server.reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                status = server.status
                if server.failures > 0:
                    server.failures -= 1
                    status = 503
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        self.requests.clear()
        self.headers.clear()
        self.paths.clear()
        self.status = 200
        self.reply = "ok"
        self.failures = 0
        self.hold = None

    def system(self, index: int = -1) -> str:
        """The system message of a recorded request."""
        messages = self.requests[index]["messages"]
        assert messages[0]["role"] == "system"
        content = messages[0]["content"]
        assert isinstance(content, str)
        return content

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


# ---------------------------------------------------------------------------------------------
# A minimal NDJSON client around the agent subprocess.
# ---------------------------------------------------------------------------------------------


class AgentProcess:
    def __init__(self, env: dict[str, str], stderr_path: Path, *args: str) -> None:
        self.stderr = stderr_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "acp_fuzz.reference_agent", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.next_id = 1
        self.init_result: dict[str, Any] = {}
        # A reader thread lets every wait have a timeout, so a silent agent fails the test
        # instead of hanging it.
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))
        self.inbox.put(None)  # EOF

    def write_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.write_raw(json.dumps(message).encode() + b"\n")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def receive(self) -> dict[str, Any]:
        message = self.inbox.get(timeout=READ_TIMEOUT_S)
        assert message is not None, "the agent closed stdout"
        return message

    def call(
        self, method: str, params: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Send a request; return the notifications that preceded its response, and the response."""
        request_id = self.next_id
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        notes: list[dict[str, Any]] = []
        while True:
            received = self.receive()
            if "method" in received:
                notes.append(received)
                continue
            assert received["id"] == request_id, received
            return notes, received

    def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        _, response = self.call(method, params)
        assert "result" in response, response
        result = response["result"]
        assert isinstance(result, dict)
        return result

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        _, response = self.call(method, params)
        assert "error" in response, response
        error = response["error"]
        assert isinstance(error, dict)
        return error

    def init(self) -> AgentProcess:
        self.init_result = self.ok("initialize", {"protocolVersion": 1,
                                                  "clientCapabilities": {}})
        return self

    def new(self, prompt: dict[str, Any] | None = None, cwd: str = CWD) -> str:
        params: dict[str, Any] = {"cwd": cwd, "mcpServers": []}
        if prompt is not None:
            params["systemPrompt"] = prompt
        session_id = self.ok("session/new", params)["sessionId"]
        assert isinstance(session_id, str)
        return session_id

    def prompt(self, session_id: str, words: str = "hello") -> dict[str, Any]:
        return self.ok("session/prompt", {"sessionId": session_id, "prompt": [text(words)]})

    def busy(self, session_id: str, method: str, params: dict[str, Any]
             ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A turn of ``session_id`` and, written right behind its prompt (so it arrives while
        the turn runs), ``method``: the answers to both (the prompt's, then the other's)."""
        first, second = self.next_id, self.next_id + 1
        self.next_id += 2
        self.send({"jsonrpc": "2.0", "id": first, "method": "session/prompt",
                   "params": {"sessionId": session_id, "prompt": [text("busy turn")]}})
        self.send({"jsonrpc": "2.0", "id": second, "method": method, "params": params})
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < 2:
            received = self.receive()
            if "id" in received and "method" not in received:
                answers[received["id"]] = received
        return answers[first], answers[second]

    def listed(self) -> list[dict[str, Any]]:
        sessions = self.ok("session/list", {})["sessions"]
        assert isinstance(sessions, list)
        return sessions

    def close(self) -> int:
        """Close stdin (EOF), wait for the exit status; kill the process if it hangs."""
        try:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()
            return self.proc.wait(timeout=READ_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.stderr.close()


class Spawner:
    """Starts agents that share one HOME (so a second agent is a "restart") and reaps them."""

    def __init__(self, home: Path, model: ModelServer) -> None:
        self.home = home
        self.model = model
        self.started: list[AgentProcess] = []
        self.stderr_path = home / "agent-stderr.log"

    def env(self, quiet: bool, base_url: str | None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "OPENAI_BASE_URL": base_url or self.model.base_url,
            "OPENAI_API_KEY": "test-key",
        }
        if quiet:
            env["ACP_REF_QUIET"] = "1"
        return env

    def __call__(self, *args: str, quiet: bool = True, base_url: str | None = None) -> AgentProcess:
        agent = AgentProcess(self.env(quiet, base_url), self.stderr_path, *args)
        self.started.append(agent)
        return agent

    def reap(self) -> None:
        for agent in self.started:
            agent.close()


# ---------------------------------------------------------------------------------------------
# initialize and framing
# ---------------------------------------------------------------------------------------------


def test_initialize_advertises_exact_capabilities(spawn: Spawner) -> None:
    agent = spawn()
    result = agent.ok("initialize", {"protocolVersion": 1})
    assert result == {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
            "sessionCapabilities": {
                "list": {},
                "resume": {},
                "fork": {},
                "close": {},
                "delete": {},
                "systemPrompt": {"mode": {"override": {}}},
            },
        },
        "authMethods": [],
        "agentInfo": {"name": "acp-fuzz-reference-agent", "version": "0.1.0"},
    }


def test_bad_input_gets_errors_and_the_agent_survives(spawn: Spawner) -> None:
    agent = spawn()
    assert agent.error("session/new", {"cwd": CWD, "mcpServers": []})["code"] == -32600
    agent.init()
    for raw, code in [
        (b"{not json\n", -32700),
        (b"[]\n", -32600),
        (b'"x"\n', -32600),
        (b"null\n", -32600),
    ]:
        agent.write_raw(raw)
        reply = agent.receive()
        assert reply["id"] is None and reply["error"]["code"] == code, (raw, reply)
    # Ignored without an answer: blank line, unknown notifications, a stray response.
    agent.write_raw(b"\n\r\n")
    agent.notify("_vendor/ping", {})
    agent.notify("zz/unknown", {})
    agent.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    # If any of those had been answered, this call would see a mismatched id first.
    assert agent.error("zz/unknown", {}) == {
        "code": -32601,
        "message": "Method not found",
        "data": {"method": "zz/unknown"},
    }
    assert agent.error("_vendor/thing", {})["code"] == -32601
    assert agent.error("session/new", None)["code"] == -32602  # params missing
    _, response = agent.call("session/list", {})
    assert response["result"] == {"sessions": []}
    assert agent.close() == 0


def test_unknown_bug_is_a_usage_error(spawn: Spawner) -> None:
    agent = spawn("--bug", "no-such-bug")
    assert agent.close() == 2


def test_stderr_log_never_contains_prompt_text(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn(quiet=False).init()
    session = agent.new(sp("append", "SECRET-INSTRUCTION"))
    agent.prompt(session)
    assert agent.close() == 0
    log = spawn.stderr_path.read_text()
    assert "session/new" in log  # logging is on ...
    assert "SECRET-INSTRUCTION" not in log  # ... and the prompt text stays out of it


# ---------------------------------------------------------------------------------------------
# systemPrompt validation: every invalid payload is -32602 and changes nothing.
# ---------------------------------------------------------------------------------------------

INVALID_SYSTEM_PROMPTS: dict[str, Any] = {
    "string": "You review code.",
    "array": [text(P)],
    "number": 7,
    "mode-missing": {"content": [text(P)]},
    "mode-not-string": {"mode": 1, "content": [text(P)]},
    "mode-null": {"mode": None, "content": [text(P)]},
    "mode-unknown": {"mode": "prepend", "content": [text(P)]},
    "mode-vendor": {"mode": "_acme", "content": [text(P)]},
    "mode-wrong-case": {"mode": "Append", "content": [text(P)]},
    "content-missing": {"mode": "append"},
    "content-not-array": {"mode": "append", "content": P},
    "content-empty": {"mode": "append", "content": []},
    "block-not-object": {"mode": "append", "content": [P]},
    "block-text-missing": {"mode": "append", "content": [{"type": "text"}]},
    "block-text-not-string": {"mode": "append", "content": [{"type": "text", "text": 5}]},
    "block-image": {
        "mode": "append",
        "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
    },
    "block-audio": {
        "mode": "append",
        "content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}],
    },
    "block-resource": {
        "mode": "append",
        "content": [{"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}],
    },
    "block-resource-link": {
        "mode": "append",
        "content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}],
    },
    "block-unknown-type": {"mode": "append", "content": [{"type": "video", "text": P}]},
    "second-block-bad": {"mode": "override", "content": [text(P), {"type": "image"}]},
}

INVALID_OTHER_PARAMS: dict[str, dict[str, Any]] = {
    "cwd-missing": {"mcpServers": []},
    "cwd-relative": {"cwd": "project", "mcpServers": []},
    "cwd-not-string": {"cwd": 3, "mcpServers": []},
    "mcpServers-missing": {"cwd": CWD},
    "mcpServers-not-array": {"cwd": CWD, "mcpServers": {}},
}


@pytest.mark.parametrize("payload", INVALID_SYSTEM_PROMPTS.values(), ids=INVALID_SYSTEM_PROMPTS)
def test_new_rejects_invalid_system_prompt_without_side_effects(
    spawn: Spawner, payload: Any
) -> None:
    agent = spawn().init()
    agent.new(sp("append", P))
    before = agent.listed()
    error = agent.error("session/new", {"cwd": CWD, "mcpServers": [], "systemPrompt": payload})
    assert error["code"] == -32602
    assert error["message"].startswith("Invalid params: ")
    assert agent.listed() == before
    assert agent.new() == "sess-2"  # no id was burnt either: nothing was created


@pytest.mark.parametrize("params", INVALID_OTHER_PARAMS.values(), ids=INVALID_OTHER_PARAMS)
def test_new_rejects_invalid_params_without_side_effects(
    spawn: Spawner, params: dict[str, Any]
) -> None:
    agent = spawn().init()
    params = {**params, "systemPrompt": sp("append", P)}
    assert agent.error("session/new", params)["code"] == -32602
    assert agent.listed() == []


@pytest.mark.parametrize("method", ["session/load", "session/resume", "session/fork"])
@pytest.mark.parametrize(
    "payload",
    [
        INVALID_SYSTEM_PROMPTS[k]
        for k in ("string", "mode-unknown", "content-empty", "block-image", "second-block-bad")
    ],
    ids=["string", "mode-unknown", "content-empty", "block-image", "second-block-bad"],
)
def test_lifecycle_rejects_invalid_system_prompt_without_side_effects(
    spawn: Spawner, model: ModelServer, method: str, payload: Any
) -> None:
    agent = spawn().init()
    session = agent.new(sp("append", P))
    agent.prompt(session, "first turn")
    before = agent.listed()
    notes, response = agent.call(
        method, {"sessionId": session, "cwd": CWD, "mcpServers": [], "systemPrompt": payload}
    )
    assert response["error"]["code"] == -32602
    assert notes == []  # in particular, a rejected load replays nothing
    assert agent.listed() == before  # no fork, no new updatedAt
    agent.prompt(session, "second turn")
    assert model.system() == f"{defaults()}\n\n{P}"  # the stored prompt is untouched


def test_meta_and_unknown_keys_are_ignored(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    payload = {
        "mode": "append",
        "content": [{"type": "text", "text": P, "_meta": {"x": 1}, "annotations": {}}],
        "_meta": {"traceparent": "00-x"},
        "futureField": True,
    }
    agent.prompt(agent.new(payload))
    assert model.system() == f"{defaults()}\n\n{P}"


# ---------------------------------------------------------------------------------------------
# What reaches the model
# ---------------------------------------------------------------------------------------------


def test_no_prompt_and_null_prompt_use_the_defaults(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    agent.prompt(agent.new())
    params: dict[str, Any] = {"cwd": "/elsewhere", "mcpServers": [], "systemPrompt": None}
    agent.prompt(agent.ok("session/new", params)["sessionId"])
    assert model.system(0) == defaults()
    assert model.system(1) == defaults("/elsewhere")  # the environment line is per session


def test_append_and_override_system_text_is_exact(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    # Blocks are joined with a blank line, verbatim: no stripping of the client's whitespace.
    blocks = ("  first block\n", "second\tblock  ")
    appended = agent.new(sp("append", *blocks))
    overridden = agent.new(sp("override", *blocks))
    agent.prompt(appended, "question one")
    agent.prompt(overridden, "question two")
    client_text = "  first block\n\n\nsecond\tblock  "
    assert model.system(0) == f"{defaults()}\n\n{client_text}"
    assert model.system(1) == client_text  # override keeps nothing of the defaults
    assert model.requests[1]["messages"] == [
        {"role": "system", "content": client_text},
        {"role": "user", "content": "question two"},
    ]


def test_model_request_shape_and_reply_streaming(spawn: Spawner, model: ModelServer) -> None:
    model.reply = "the answer"
    agent = spawn().init()
    session = agent.new(sp("append", P))
    notes, response = agent.call(
        "session/prompt",
        {
            "sessionId": session,
            "prompt": [text("read"), {"type": "resource_link", "uri": "file:///a.py", "name": "a"}],
        },
    )
    assert response["result"] == {"stopReason": "end_turn"}
    assert notes == [
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": session,
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "the answer"},
                },
            },
        }
    ]
    assert model.paths == ["/v1/chat/completions"]
    assert model.headers[0]["Authorization"] == "Bearer test-key"
    body = model.requests[0]
    assert body["model"] == "reference-model" and body["stream"] is False
    assert body["messages"][1:] == [{"role": "user", "content": "read\nfile:///a.py"}]
    # The second turn carries the first one as history.
    agent.prompt(session, "again")
    assert model.requests[1]["messages"][1:] == [
        {"role": "user", "content": "read\nfile:///a.py"},
        {"role": "assistant", "content": "the answer"},
        {"role": "user", "content": "again"},
    ]


def test_unadvertised_prompt_blocks_are_rejected(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    session = agent.new()
    for block in (
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}},
    ):
        error = agent.error("session/prompt", {"sessionId": session, "prompt": [block]})
        assert error["code"] == -32602
    assert model.requests == []


def test_model_failure_is_an_error_and_leaves_history_alone(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = spawn().init()
    session = agent.new()
    model.status = 500
    error = agent.error("session/prompt", {"sessionId": session, "prompt": [text("lost")]})
    assert error["code"] == -32603
    assert error["message"].startswith("model request failed: ")
    model.status = 200
    agent.prompt(session, "kept")
    assert model.requests[-1]["messages"][1:] == [{"role": "user", "content": "kept"}]


def test_unreachable_model_is_an_error_not_a_crash(spawn: Spawner) -> None:
    # A port that was free a moment ago: nothing listens on it.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = spawn(base_url=f"http://127.0.0.1:{port}/v1").init()
    session = agent.new()
    error = agent.error("session/prompt", {"sessionId": session, "prompt": [text("x")]})
    assert error["code"] == -32603
    assert error["message"].startswith("model request failed: ")
    assert agent.listed()[0]["sessionId"] == session  # still alive and answering


def test_cancel_that_arrived_before_the_turn_cancels_it(spawn: Spawner) -> None:
    agent = spawn().init()
    session = agent.new()
    # One write, so the cancel is already in the agent's pipe when the turn starts.
    prompt = {
        "jsonrpc": "2.0",
        "id": 500,
        "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [text("x")]},
    }
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}
    agent.write_raw(json.dumps(prompt).encode() + b"\n" + json.dumps(cancel).encode() + b"\n")
    assert agent.receive() == {"jsonrpc": "2.0", "id": 500, "result": {"stopReason": "cancelled"}}
    # The cancel was consumed with that turn; the next turn runs normally.
    assert agent.prompt(session) == {"stopReason": "end_turn"}


# ---------------------------------------------------------------------------------------------
# Lifecycle
# ---------------------------------------------------------------------------------------------


def test_unknown_sessions_are_not_found(spawn: Spawner) -> None:
    agent = spawn().init()
    cases: list[tuple[str, dict[str, Any]]] = [
        ("session/prompt", {"sessionId": "sess-9", "prompt": [text("x")]}),
        ("session/load", {"sessionId": "sess-9", "cwd": CWD, "mcpServers": []}),
        ("session/resume", {"sessionId": "sess-9", "cwd": CWD}),
        ("session/fork", {"sessionId": "sess-9", "cwd": CWD}),
        ("session/close", {"sessionId": "sess-9"}),
        ("session/load", {"sessionId": "../../etc/passwd", "cwd": CWD, "mcpServers": []}),
    ]
    for method, params in cases:
        error = agent.error(method, params)
        assert error["code"] == -32002, method
        assert error["data"] == {"sessionId": params["sessionId"]}
    assert agent.listed() == []


def test_ids_and_timestamps_are_deterministic(spawn: Spawner) -> None:
    agent = spawn().init()
    first = agent.new(cwd="/a")
    second = agent.new(cwd="/b")
    assert (first, second) == ("sess-1", "sess-2")
    assert agent.listed() == [
        {"sessionId": "sess-1", "cwd": "/a", "updatedAt": "2026-01-01T00:00:01Z"},
        {"sessionId": "sess-2", "cwd": "/b", "updatedAt": "2026-01-01T00:00:02Z"},
    ]
    assert agent.ok("session/list", {"cwd": "/b"})["sessions"] == [agent.listed()[1]]
    assert agent.ok("session/list", {"cwd": "/none"})["sessions"] == []


def test_load_replays_history_before_responding(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    session = agent.new(sp("append", P))
    model.reply = "reply one"
    agent.prompt(session, "turn one")
    model.reply = "reply two"
    agent.prompt(session, "turn two")
    notes, response = agent.call(
        "session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []}
    )
    assert response["result"] == {}
    assert [
        (n["params"]["update"]["sessionUpdate"], n["params"]["update"]["content"]) for n in notes
    ] == [
        ("user_message_chunk", text("turn one")),
        ("agent_message_chunk", text("reply one")),
        ("user_message_chunk", text("turn two")),
        ("agent_message_chunk", text("reply two")),
    ]
    assert all(n["params"]["sessionId"] == session for n in notes)
    # resume replays nothing
    notes, response = agent.call("session/resume", {"sessionId": session, "cwd": CWD})
    assert (notes, response["result"]) == ([], {})


def test_restart_keeps_sessions_and_their_prompts(spawn: Spawner, model: ModelServer) -> None:
    first = spawn().init()
    session = first.new(sp("append", P))
    first.prompt(session, "before restart")
    assert first.close() == 0

    second = spawn().init()
    assert [s["sessionId"] for s in second.listed()] == [session]
    # Not loaded in this process yet: prompting it is "not found".
    assert (
        second.error("session/prompt", {"sessionId": session, "prompt": [text("x")]})["code"]
        == -32002
    )
    notes, _ = second.call(
        "session/load",
        {"sessionId": session, "cwd": CWD, "mcpServers": [], "systemPrompt": sp("append", Q)},
    )
    assert len(notes) == 2  # the turn from the first process is replayed
    second.prompt(session, "after restart")
    assert model.system() == f"{defaults()}\n\n{Q}"  # the re-sent prompt replaced P
    assert model.requests[-1]["messages"][1:3] == [
        {"role": "user", "content": "before restart"},
        {"role": "assistant", "content": "ok"},
    ]
    assert second.new() != session  # the id counter survived the restart
    assert second.close() == 0

    third = spawn().init()
    third.ok("session/resume", {"sessionId": session, "cwd": CWD})  # prompt omitted: kept
    third.prompt(session)
    assert model.system() == f"{defaults()}\n\n{Q}"


def test_null_prompt_on_resume_keeps_and_resent_prompt_replaces(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = spawn().init()
    session = agent.new(sp("append", P))
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": None})
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}"
    agent.ok(
        "session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": sp("override", Q)}
    )
    agent.prompt(session)
    assert model.system() == Q


def test_fork_inherits_or_replaces_and_never_touches_the_source(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = spawn().init()
    source = agent.new(sp("append", P))
    agent.prompt(source, "shared turn")
    inherited = agent.ok("session/fork", {"sessionId": source, "cwd": CWD})["sessionId"]
    replaced = agent.ok(
        "session/fork", {"sessionId": source, "cwd": CWD, "systemPrompt": sp("override", Q)}
    )["sessionId"]
    assert len({source, inherited, replaced}) == 3
    agent.prompt(inherited, "in fork one")
    assert model.system() == f"{defaults()}\n\n{P}"
    agent.prompt(replaced, "in fork two")
    assert model.system() == Q
    assert model.requests[-1]["messages"][1:3] == [  # the conversation was copied
        {"role": "user", "content": "shared turn"},
        {"role": "assistant", "content": "ok"},
    ]
    agent.prompt(source, "in source")
    assert model.system() == f"{defaults()}\n\n{P}"
    # The forks' turns did not reach the source's history.
    assert [m["content"] for m in model.requests[-1]["messages"][1:]] == [
        "shared turn",
        "ok",
        "in source",
    ]


def test_close_unloads_but_keeps_the_session_on_disk(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    session = agent.new(sp("override", P))
    assert agent.ok("session/close", {"sessionId": session}) == {}
    assert (
        agent.error("session/prompt", {"sessionId": session, "prompt": [text("x")]})["code"]
        == -32002
    )
    assert [s["sessionId"] for s in agent.listed()] == [session]
    agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    agent.prompt(session)
    assert model.system() == P


def test_modes_are_offered_and_a_switch_keeps_the_prompt(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--variant", "switches").init()
    created = agent.ok("session/new", {"cwd": CWD, "mcpServers": [],
                                       "systemPrompt": sp("append", P)})
    session = created["sessionId"]
    assert created["modes"]["currentModeId"] == "code"
    assert [m["id"] for m in created["modes"]["availableModes"]] == ["ask", "code", "plan"]
    assert agent.ok("session/set_mode", {"sessionId": session, "modeId": "plan"}) == {}
    agent.prompt(session)
    # The plan mode's own line joins the defaults; the client prompt stays, at the end.
    assert model.system() == f"{defaults()}\n{PLAN_INSTRUCTION}\n\n{P}"
    assert agent.error("session/set_mode", {"sessionId": session,
                                            "modeId": "turbo"})["code"] == -32602
    assert agent.error("session/set_mode", {"sessionId": "sess-999",
                                            "modeId": "ask"})["code"] == -32002
    # The mode is the session's: a fork takes it, a load reports it.
    fork = agent.ok("session/fork", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    assert fork["modes"]["currentModeId"] == "plan"
    loaded = agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    assert loaded["modes"]["currentModeId"] == "plan"


def test_the_model_option_is_offered_and_a_switch_keeps_the_prompt(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--variant", "switches").init()
    created = agent.ok("session/new", {"cwd": CWD, "mcpServers": [],
                                       "systemPrompt": sp("append", P)})
    (option,) = created["configOptions"]
    assert (option["id"], option["type"], option["currentValue"]) == \
        ("model", "select", "reference-model")
    session = created["sessionId"]
    changed = agent.ok("session/set_config_option", {"sessionId": session, "configId": "model",
                                                     "value": "reference-model-mini"})
    assert changed["configOptions"][0]["currentValue"] == "reference-model-mini"
    agent.prompt(session)
    assert model.requests[-1]["model"] == "reference-model-mini"
    assert model.system() == f"{defaults()}\n\n{P}"
    assert agent.error("session/set_config_option", {"sessionId": session, "configId": "x",
                                                     "value": "y"})["code"] == -32602


def test_without_the_switches_variant_there_are_no_modes(spawn: Spawner) -> None:
    agent = spawn().init()
    created = agent.ok("session/new", {"cwd": CWD, "mcpServers": []})
    assert set(created) == {"sessionId"}
    assert agent.error("session/set_mode", {"sessionId": created["sessionId"],
                                            "modeId": "ask"})["code"] == -32601


def test_titles_are_set_by_the_client_on_any_stored_session_and_keep_the_prompt(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--variant", "titles").init()
    assert agent.init_result["agentCapabilities"]["sessionCapabilities"]["title"] == {}
    session = agent.new(sp("append", P))
    # Trimmed (the schema lets an agent normalize), and the stored title is answered.
    assert agent.ok("session/set_title", {"sessionId": session,
                                          "title": "  Release checklist  "}) == \
        {"title": "Release checklist"}
    assert [s.get("title") for s in agent.listed()] == ["Release checklist"]
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}"
    for bad in ("   ", None, 7):
        assert agent.error("session/set_title", {"sessionId": session,
                                                 "title": bad})["code"] == -32602
    assert agent.error("session/set_title", {"sessionId": "sess-999",
                                             "title": "x"})["code"] == -32002
    # A session that is stored but not loaded in this process may be retitled too.
    agent.close()
    agent = spawn("--variant", "titles").init()
    assert agent.ok("session/set_title", {"sessionId": session, "title": "Later"}) == \
        {"title": "Later"}
    agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}"


def test_additional_directories_are_checked_and_a_moved_session_keeps_its_prompt(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--variant", "directories").init()
    caps = agent.init_result["agentCapabilities"]["sessionCapabilities"]
    assert caps["additionalDirectories"] == {}
    roots = {"additionalDirectories": [CWD + "-extra"]}
    created = agent.ok("session/new", {"cwd": CWD, "mcpServers": [], **roots,
                                       "systemPrompt": sp("append", P)})
    session = created["sessionId"]
    for bad in ("/abs", ["relative/path"], [3]):
        assert agent.error("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": [],
                                            "additionalDirectories": bad})["code"] == -32602
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD + "-moved", **roots})
    agent.prompt(session)
    # The session runs in its new directory, with its prompt.
    assert model.system() == f"{defaults(CWD + '-moved')}\n\n{P}"
    assert [s["cwd"] for s in agent.listed()] == [CWD + "-moved"]


def test_without_the_titles_variant_there_is_no_retitle(spawn: Spawner) -> None:
    agent = spawn().init()
    assert "title" not in agent.init_result["agentCapabilities"]["sessionCapabilities"]
    assert agent.error("session/set_title", {"sessionId": agent.new(),
                                             "title": "x"})["code"] == -32601


def test_delete_removes_the_session_for_good_and_is_idempotent(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn().init()
    keep, gone = agent.new(sp("append", P)), agent.new(sp("append", Q))
    assert agent.ok("session/delete", {"sessionId": gone}) == {}
    assert [s["sessionId"] for s in agent.listed()] == [keep]
    assert agent.error("session/prompt", {"sessionId": gone, "prompt": [text("x")]})["code"] \
        == -32002
    assert agent.error("session/load", {"sessionId": gone, "cwd": CWD,
                                        "mcpServers": []})["code"] == -32002
    # SES-AGENT-DELETE-IDEMPOTENT-SHOULD: deleting it again, or an unknown id, succeeds.
    assert agent.ok("session/delete", {"sessionId": gone}) == {}
    assert agent.ok("session/delete", {"sessionId": "sess-999"}) == {}
    # A new session in the same directory starts from the defaults, not the deleted prompt.
    agent.prompt(agent.new())
    assert Q not in model.system()


# ---------------------------------------------------------------------------------------------
# Planted bugs: each one shows its defect, and the same steps pass without it.
# ---------------------------------------------------------------------------------------------


def start(spawn: Spawner, bug: str | None) -> AgentProcess:
    return spawn(*(["--bug", bug] if bug else [])).init()


class Trial:
    """One run of a bug's reproduction: the agent (planted or correct), the fake model, and
    :meth:`restart`, which starts the agent again with the same options in the same HOME."""

    def __init__(self, spawn: Spawner, model: ModelServer, args: list[str]) -> None:
        self.spawn, self.model, self.args = spawn, model, args
        self.agent = spawn(*args).init()

    def restart(self) -> AgentProcess:
        self.agent.close()
        self.agent = self.spawn(*self.args).init()
        return self.agent


Reproduction = Callable[[Trial], bool]
#: bug -> its minimal reproduction: True when the defect shows.
_REPRODUCTIONS: dict[str, Reproduction] = {}


def reproduces(name: str) -> Callable[[Reproduction], Reproduction]:
    def register(function: Reproduction) -> Reproduction:
        assert name not in _REPRODUCTIONS, f"two reproductions for bug {name}"
        _REPRODUCTIONS[name] = function
        return function
    return register


def correct_variant(name: str) -> str | None:
    """The ``--variant`` the correct counterpart of bug ``name`` needs (the bug plants it)."""
    if name in COMPACTION_BUGS:
        # The correct agent compacts too; the one that holds a change back holds it whole.
        return "defer-until-compaction" if name == "compaction-keeps-stale" else "compacting"
    # The switch bugs plant modes and models themselves; the correct agent offers them with
    # --variant switches (and so for titles and directories).
    return "switches" if name in SWITCH_BUGS else "titles" if name in TITLE_BUGS \
        else "status" if name in STATUS_BUGS else "directories" if name in DIRECTORY_BUGS \
        else None


def reproduce(spawn: Spawner, model: ModelServer, name: str, planted: bool) -> bool:
    """Run bug ``name``'s minimal reproduction; return True when the defect shows.

    ``planted`` selects ``--bug name`` or a correct agent, so each scenario is also checked
    not to fire on the correct agent.
    """
    if name not in _REPRODUCTIONS:
        raise AssertionError(f"no reproduction for bug {name}")
    variant = correct_variant(name)
    args = ["--bug", name] if planted else ["--variant", variant] if variant else []
    return _REPRODUCTIONS[name](Trial(spawn, model, args))


def answer_to_new(agent: AgentProcess, system_prompt: Any, **extra: Any) -> dict[str, Any]:
    """The whole answer (result or error) to a session/new carrying ``system_prompt``."""
    params = {"cwd": CWD, "mcpServers": [], "systemPrompt": system_prompt, **extra}
    return agent.call("session/new", params)[1]


def answer_to_prompt(agent: AgentProcess, session: str,
                     words: str = "hello") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The updates of a turn and the whole answer (result or error) to its prompt."""
    return agent.call("session/prompt", {"sessionId": session, "prompt": [text(words)]})


def said(notes: list[dict[str, Any]]) -> list[str]:
    """The agent's message chunks among a turn's updates."""
    return [n["params"]["update"]["content"]["text"] for n in notes
            if n["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]


@reproduces("leak")
def _leak(t: Trial) -> bool:
    a = t.agent.new(sp("append", P))
    t.agent.new(sp("append", Q))
    t.agent.prompt(a)
    return t.model.system() != f"{defaults()}\n\n{P}"


def after_cold_resume(t: Trial, resent: dict[str, Any]) -> str:
    """new A (append P); restart; resume A re-sending ``resent``; prompt A: the system
    message of that turn."""
    session = t.agent.new(sp("append", P))
    agent = t.restart()
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": resent})
    agent.prompt(session)
    return t.model.system()


@reproduces("lost-after-restart")
def _lost_after_restart(t: Trial) -> bool:
    return P not in after_cold_resume(t, sp("append", P))


@reproduces("history-lost-after-restart")
def _history_lost_after_restart(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.agent.prompt(session, "first words")
    agent = t.restart()
    agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    agent.prompt(session, "second words")
    texts = [m["content"] for m in t.model.requests[-1]["messages"]]
    return "first words" not in texts


@reproduces("load-erases-session")
def _load_erases_session(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.agent.prompt(session, "first words")
    _, response = t.agent.call("session/load",
                               {"sessionId": session, "cwd": CWD, "mcpServers": []})
    return "error" in response


@reproduces("delete-leaves-prompt")
def _delete_leaves_prompt(t: Trial) -> bool:
    t.agent.ok("session/delete", {"sessionId": t.agent.new(sp("append", P))})
    t.agent.prompt(t.agent.new())
    return P in t.model.system()


@reproduces("duplicate-on-resume")
def _duplicate_on_resume(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.agent.ok("session/resume", {"sessionId": session, "cwd": CWD,
                                  "systemPrompt": sp("append", P)})
    t.agent.prompt(session)
    return t.model.system().count(P) != 1


@reproduces("user-turn")
def _user_turn(t: Trial) -> bool:
    t.agent.prompt(t.agent.new(sp("append", P)), "question")
    return (P not in t.model.system()
            or t.model.requests[-1]["messages"][-1]["content"] != "question")


@reproduces("accept-unknown-mode")
def _accept_unknown_mode(t: Trial) -> bool:
    return "result" in answer_to_new(t.agent, sp("prepend", P))


@reproduces("replace-as-override")
def _replace_as_override(t: Trial) -> bool:
    response = answer_to_new(t.agent, sp("replace", P))
    if "result" not in response:
        return False
    t.agent.prompt(response["result"]["sessionId"])
    return t.model.system() == P  # the defaults replaced: "replace" read as override


@reproduces("hang-on-empty-content")
def _hang_on_empty_content(t: Trial) -> bool:
    # Requests are answered in order: when the list after it is answered and the empty
    # content is not, it never will be (no wait on a clock).
    agent = t.agent
    agent.send({"jsonrpc": "2.0", "id": "empty", "method": "session/new", "params": {
        "cwd": CWD, "mcpServers": [], "systemPrompt": {"mode": "append", "content": []}}})
    agent.send({"jsonrpc": "2.0", "id": "after", "method": "session/list", "params": {}})
    answered = set()
    while "after" not in answered:
        message = agent.receive()
        if "id" in message and "method" not in message:
            answered.add(message["id"])
    return "empty" not in answered


@reproduces("side-effect-before-validation")
def _side_effect_before_validation(t: Trial) -> bool:
    response = answer_to_new(t.agent, sp("prepend", P))
    assert response["error"]["code"] == -32602  # the answer itself is right ...
    return t.agent.listed() != []  # ... but an orphan session exists


def _dies_of_new(t: Trial, system_prompt: dict[str, Any]) -> bool:
    """Whether a ``session/new`` with ``system_prompt`` kills the agent (exit status 1)."""
    agent = t.agent
    agent.send({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                "params": {"cwd": CWD, "mcpServers": [], "systemPrompt": system_prompt}})
    if agent.inbox.get(timeout=READ_TIMEOUT_S) is None:  # stdout closed: the agent died
        assert agent.proc.wait(timeout=READ_TIMEOUT_S) == 1
        return True
    return False


@reproduces("crash-on-image")
def _crash_on_image(t: Trial) -> bool:
    return _dies_of_new(t, {"mode": "append", "content": [{"type": "image", "data": "AA",
                                                           "mimeType": "image/png"}]})


@reproduces("huge-prompt-crash")
def _huge_prompt_crash(t: Trial) -> bool:
    from acp_fuzz.core.fills import SIZES, filler
    return _dies_of_new(t, {"mode": "append", "content": [
        {"type": "text", "text": filler(SIZES["huge-8m"])}]})


@reproduces("override-keeps-default")
@reproduces("tiny-baseline")
def _override_keeps_default(t: Trial) -> bool:
    t.agent.prompt(t.agent.new(sp("override", P)))
    return t.model.system() != P


@reproduces("fork-drops-prompt")
def _fork_drops_prompt(t: Trial) -> bool:
    source = t.agent.new(sp("append", P))
    fork = t.agent.ok("session/fork", {"sessionId": source, "cwd": CWD,
                                       "systemPrompt": sp("append", P)})
    t.agent.prompt(fork["sessionId"])
    return P not in t.model.system()


@reproduces("fork-corrupts-source")
def _fork_corrupts_source(t: Trial) -> bool:
    source = t.agent.new(sp("append", P))
    t.agent.ok("session/fork", {"sessionId": source, "cwd": CWD,
                                "systemPrompt": sp("append", Q)})
    t.agent.prompt(source)
    return t.model.system() != f"{defaults()}\n\n{P}"


@reproduces("drop-last-block")
def _drop_last_block(t: Trial) -> bool:
    t.agent.prompt(t.agent.new(sp("append", P, Q)))
    return t.model.system() != f"{defaults()}\n\n{P}\n\n{Q}"


@reproduces("truncate-64k")
def _truncate_64k(t: Trial) -> bool:
    long_text = "x" * 65536 + "END"
    t.agent.prompt(t.agent.new(sp("append", long_text)))
    return not t.model.system().endswith(long_text)


@reproduces("lost-override-after-restart")
def _lost_override_after_restart(t: Trial) -> bool:
    session = t.agent.new(sp("override", P))
    agent = t.restart()
    agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": [],
                              "systemPrompt": sp("override", P)})
    agent.prompt(session)
    return t.model.system() != P


@reproduces("vendor-meta-wins")
def _vendor_meta_wins(t: Trial) -> bool:
    created = t.agent.ok("session/new", {"cwd": CWD, "mcpServers": [],
                                         "systemPrompt": sp("append", P),
                                         "_meta": {"systemPrompt": {"append": Q}}})
    t.agent.prompt(created["sessionId"])
    return t.model.system() != f"{defaults()}\n\n{P}"


def drops_prompt(t: Trial, method: str, **params: Any) -> bool:
    """new A (append P); ``method`` on A, which succeeds; prompt A: True when P is gone."""
    session = t.agent.new(sp("append", P))
    t.agent.ok(method, {"sessionId": session, **params})
    t.agent.prompt(session)
    return P not in t.model.system()


@reproduces("model-switch-drops-prompt")
def _model_switch_drops_prompt(t: Trial) -> bool:
    return drops_prompt(t, "session/set_config_option", configId="model",
                        value="reference-model-mini")


@reproduces("moved-cwd-drops-prompt")
def _moved_cwd_drops_prompt(t: Trial) -> bool:
    return drops_prompt(t, "session/load", cwd=CWD + "-moved", mcpServers=[],
                        systemPrompt=sp("append", P))


@reproduces("title-drops-prompt")
def _title_drops_prompt(t: Trial) -> bool:
    return drops_prompt(t, "session/set_title", title="Renamed")


@reproduces("status-drops-prompt")
def _status_drops_prompt(t: Trial) -> bool:
    return drops_prompt(t, "session/status")


@reproduces("busy-resume-drops-prompt")
def _busy_resume_drops_prompt(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    turn, resumed = t.agent.busy(session, "session/resume", {
        "sessionId": session, "cwd": CWD, "systemPrompt": sp("append", P)})
    assert "result" in turn and "result" in resumed, (turn, resumed)
    t.agent.prompt(session)
    return P not in t.model.system()


@reproduces("version-above-offer")
def _version_above_offer(t: Trial) -> bool:
    # Trial offers protocol version 1; the answer must not be above it.
    return bool(t.agent.init_result["protocolVersion"] != 1)


@reproduces("mode-drops-prompt")
def _mode_drops_prompt(t: Trial) -> bool:
    return drops_prompt(t, "session/set_mode", modeId="ask")


@reproduces("compaction-drops-prompt")
def _compaction_drops_prompt(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.agent.prompt(session)
    t.agent.prompt(session, "/compact")
    t.agent.prompt(session)
    return P not in t.model.system()


@reproduces("compaction-keeps-stale")
def _compaction_keeps_stale(t: Trial) -> bool:
    agent, model = t.agent, t.model
    session = agent.new(sp("append", P))
    agent.prompt(session)
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD,
                                "systemPrompt": sp("append", Q)})
    agent.prompt(session)
    assert P in model.system() and Q not in model.system()  # held back, correctly so
    agent.prompt(session, "/compact")
    agent.prompt(session)
    return Q not in model.system()


# The bugs of real agents' findings (tests/quality/test_known_shapes.py).


@reproduces("sdk-options-win")
def _sdk_options_win(t: Trial) -> bool:
    # claude-agent-acp 0.101.0: the SDK's options field, set beside the standard one, wins.
    created = t.agent.ok("session/new", {
        "cwd": CWD, "mcpServers": [], "systemPrompt": sp("append", P),
        "_meta": {"claudeCode": {"options": {"systemPrompt": Q}}}})
    t.agent.prompt(created["sessionId"])
    return P not in t.model.system()


@reproduces("unstored-before-turn")
def _unstored_before_turn(t: Trial) -> bool:
    # codex-acp 2.6.0: a change before the session's first turn is refused.
    session = t.agent.new(sp("append", P))
    _, response = t.agent.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                  "systemPrompt": sp("append", Q)})
    return "error" in response


# One bug per report path (tests/quality/test_every_path.py).


@reproduces("refuse-override")
def _refuse_override(t: Trial) -> bool:
    return "error" in answer_to_new(t.agent, sp("override", P))


@reproduces("append-drops-defaults")
def _append_drops_defaults(t: Trial) -> bool:
    t.agent.prompt(t.agent.new(sp("append", P)))
    return DEFAULT_INSTRUCTIONS not in t.model.system()


@reproduces("cancel-errors")
def _cancel_errors(t: Trial) -> bool:
    session = t.agent.new()
    # One write, so the cancel is already in the agent's pipe when the turn starts.
    prompt = {"jsonrpc": "2.0", "id": "turn", "method": "session/prompt",
              "params": {"sessionId": session, "prompt": [text("x")]}}
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}
    t.agent.write_raw(json.dumps(prompt).encode() + b"\n" + json.dumps(cancel).encode() + b"\n")
    answer = t.agent.receive()
    assert answer["id"] == "turn", answer
    return answer.get("result") != {"stopReason": "cancelled"}


def during_turn(t: Trial, what: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    """The answers to a turn of a new session while ``what`` is written as the model thinks
    (its request held until then), up to a ``session/list`` sent last: the agent reads its
    input in order, so what was not answered before the list's answer never will be."""
    session = t.agent.new()
    t.model.arrived.clear()
    t.model.hold = release = threading.Event()
    t.agent.send({"jsonrpc": "2.0", "id": "turn", "method": "session/prompt",
                  "params": {"sessionId": session, "prompt": [text("x")]}})
    assert t.model.arrived.wait(READ_TIMEOUT_S), "the turn never asked the model"
    params = {"requestId": "turn"} if what["method"] == "$/cancel_request" \
        else {"sessionId": session}
    t.agent.send({"jsonrpc": "2.0", **what, "params": {**params, **extra}})
    t.agent.send({"jsonrpc": "2.0", "id": "mark", "method": "session/list", "params": {}})
    release.set()
    out = []
    while not out or out[-1].get("id") != "mark":
        message = t.agent.receive()
        if "id" in message:
            out.append(message)
    return out


def _turn_answer(answers: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((a for a in answers if a["id"] == "turn"), None)


@reproduces("cancel-ignored-mid-turn")
def _cancel_ignored_mid_turn(t: Trial) -> bool:
    turn = _turn_answer(during_turn(t, {"method": "session/cancel"}))
    return turn is None or turn.get("result") != {"stopReason": "cancelled"}


@reproduces("close-keeps-turn")
def _close_keeps_turn(t: Trial) -> bool:
    turn = _turn_answer(during_turn(t, {"id": "close", "method": "session/close"}))
    return turn is not None and turn.get("result") == {"stopReason": "end_turn"}


@reproduces("close-drops-turn")
def _close_drops_turn(t: Trial) -> bool:
    return _turn_answer(during_turn(t, {"id": "close", "method": "session/close"})) is None


@reproduces("cancel-request-unanswered")
def _cancel_request_unanswered(t: Trial) -> bool:
    turn = _turn_answer(during_turn(t, {"method": "$/cancel_request"}))
    if turn is not None:  # the correct agent: -32800, the request was cancelled
        assert turn.get("error", {}).get("code") == -32800, turn
    return turn is None


def _mode_switch_during_turn(t: Trial) -> dict[str, Any] | None:
    """The answer to a session/set_mode (to the plan mode) written while the model thinks
    (``None``: never answered); the turn itself is answered either way."""
    answers = during_turn(t, {"id": "switch", "method": "session/set_mode"}, modeId="plan")
    assert _turn_answer(answers) is not None, answers
    return next((a for a in answers if a["id"] == "switch"), None)


@reproduces("set-mode-during-turn-unanswered")
def _set_mode_during_turn_unanswered(t: Trial) -> bool:
    switch = _mode_switch_during_turn(t)
    if switch is not None:  # the correct agent: switched, once the turn ended
        assert switch.get("result") == {}, switch
    return switch is None


@reproduces("set-mode-refused-during-turn")
def _set_mode_refused_during_turn(t: Trial) -> bool:
    switch = _mode_switch_during_turn(t)
    assert switch is not None
    return "error" in switch


@reproduces("second-prompt-unanswered")
def _second_prompt_unanswered(t: Trial) -> bool:
    answers = during_turn(t, {"id": "second", "method": "session/prompt"}, prompt=[text("y")])
    assert _turn_answer(answers) is not None, answers
    second = next((a for a in answers if a["id"] == "second"), None)
    if second is not None:  # the correct agent: run after the first
        assert second.get("result") == {"stopReason": "end_turn"}, second
    return second is None


def cancelled(t: Trial, method: str, params: dict[str, Any]
              ) -> tuple[dict[str, Any] | None, list[Any]]:
    """The answer to ``method`` written with its $/cancel_request in the same write
    (``None``: never answered, up to a session/list sent last), and the session ids that
    list shows."""
    agent = t.agent
    request = {"jsonrpc": "2.0", "id": "req", "method": method, "params": params}
    cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "req"}}
    listing = {"jsonrpc": "2.0", "id": "mark", "method": "session/list", "params": {}}
    agent.write_raw(b"".join(json.dumps(m).encode() + b"\n"
                             for m in (request, cancel, listing)))
    out: dict[str, Any] = {}
    while "mark" not in out:
        message = agent.receive()
        if "id" in message:
            out[message["id"]] = message
    listed = [s.get("sessionId") for s in out["mark"].get("result", {}).get("sessions", [])]
    return out.get("req"), listed


def cancelled_new(t: Trial) -> tuple[dict[str, Any] | None, list[Any]]:
    """:func:`cancelled` of a session/new."""
    return cancelled(t, "session/new", {"cwd": CWD, "mcpServers": []})


@reproduces("cancel-new-unanswered")
def _cancel_new_unanswered(t: Trial) -> bool:
    answer, _ = cancelled_new(t)
    if answer is not None:  # the correct agent: -32800, before anything is made
        assert answer.get("error", {}).get("code") == -32800, answer
    return answer is None


@reproduces("cancel-new-leaves-session")
def _cancel_new_leaves_session(t: Trial) -> bool:
    answer, listed = cancelled_new(t)
    assert answer is not None and answer.get("error", {}).get("code") == -32800, answer
    return listed != []


def cancelled_lifecycle(t: Trial, method: str) -> tuple[dict[str, Any] | None, list[Any]]:
    """A session made, then ``method`` (a load, resume or fork of it) written with its
    $/cancel_request in the same write (:func:`cancelled`): its answer, and the session ids
    the list then shows that it did not before."""
    session = t.agent.new(sp("append", P))
    before = {x["sessionId"] for x in t.agent.ok("session/list", {})["sessions"]}
    answer, listed = cancelled(t, method, {"sessionId": session, "cwd": CWD, "mcpServers": []})
    return answer, [x for x in listed if x not in before]


@reproduces("cancel-load-unanswered")
def _cancel_load_unanswered(t: Trial) -> bool:
    unanswered = False
    for method in ("session/load", "session/resume", "session/fork"):
        answer, left = cancelled_lifecycle(t, method)
        if answer is not None:  # the correct agent: -32800, and nothing changed or made
            assert answer.get("error", {}).get("code") == -32800 and left == [], answer
        unanswered = unanswered or answer is None
        t.restart()  # (an unanswered request may hold the agent)
    return unanswered


@reproduces("cancel-fork-leaves-session")
def _cancel_fork_leaves_session(t: Trial) -> bool:
    answer, left = cancelled_lifecycle(t, "session/fork")
    assert answer is not None and answer.get("error", {}).get("code") == -32800, answer
    return left != []


@reproduces("cancel-load-keeps-prompt")
def _cancel_load_keeps_prompt(t: Trial) -> bool:
    kept = False
    for method in ("session/load", "session/resume"):
        session = t.agent.new(sp("append", P))
        answer, _ = cancelled(t, method, {"sessionId": session, "cwd": CWD, "mcpServers": [],
                                          "systemPrompt": sp("append", Q)})
        assert answer is not None and answer.get("error", {}).get("code") == -32800, answer
        t.agent.prompt(session)
        kept = kept or Q in t.model.system()  # the correct agent: P, the cancelled Q not
    return kept


@reproduces("fork-during-turn-unanswered")
def _fork_during_turn_unanswered(t: Trial) -> bool:
    answers = during_turn(t, {"id": "fork", "method": "session/fork"}, cwd=CWD, mcpServers=[])
    assert _turn_answer(answers) is not None, answers
    fork = next((a for a in answers if a["id"] == "fork"), None)
    if fork is not None:  # the correct agent: forked, once the turn ended
        assert isinstance(fork.get("result", {}).get("sessionId"), str), fork
    return fork is None


@reproduces("set-config-during-turn-unanswered")
def _set_config_during_turn_unanswered(t: Trial) -> bool:
    answers = during_turn(t, {"id": "switch", "method": "session/set_config_option"},
                          configId="model", value="reference-model-mini")
    assert _turn_answer(answers) is not None, answers
    switch = next((a for a in answers if a["id"] == "switch"), None)
    if switch is not None:  # the correct agent: switched, once the turn ended
        assert "configOptions" in switch.get("result", {}), switch
    return switch is None


@reproduces("delete-drops-turn")
def _delete_drops_turn(t: Trial) -> bool:
    answers = during_turn(t, {"id": "delete", "method": "session/delete"})
    assert next((a for a in answers if a["id"] == "delete"), {}).get("result") == {}, answers
    turn = _turn_answer(answers)
    if turn is not None:  # the correct agent: the turn ran on, then the session went
        assert turn.get("result") == {"stopReason": "end_turn"}, turn
    return turn is None


def beside_held_turn(t: Trial, method: str, params: dict[str, Any]) -> bool:
    """Sessions A (P) and B (Q); ``method`` of B (``params`` beside its session id) written
    while A's model request is held, then A's next turn: whether that turn runs on B's
    prompt instead of A's."""
    a, b = t.agent.new(sp("append", P)), t.agent.new(sp("append", Q))
    t.model.arrived.clear()
    t.model.hold = release = threading.Event()
    t.agent.send({"jsonrpc": "2.0", "id": "turn-a", "method": "session/prompt",
                  "params": {"sessionId": a, "prompt": [text("x")]}})
    assert t.model.arrived.wait(READ_TIMEOUT_S), "A's turn never asked the model"
    t.agent.send({"jsonrpc": "2.0", "id": "of-b", "method": method,
                  "params": {"sessionId": b, **params}})
    release.set()
    answered: set[Any] = set()
    while answered != {"turn-a", "of-b"}:
        message = t.agent.receive()
        if message.get("id") in ("turn-a", "of-b"):
            assert "result" in message, message
            answered.add(message["id"])
    answer_to_prompt(t.agent, a)
    return Q in t.model.system() and P not in t.model.system()


@reproduces("reattach-swaps-running-prompt")
def _reattach_swaps_running_prompt(t: Trial) -> bool:
    # B is loaded while A's model is answering; A's next turn shows whose prompt it has.
    return beside_held_turn(t, "session/load", {"cwd": CWD, "mcpServers": []})


@reproduces("shared-prompt-slot")
def _shared_prompt_slot(t: Trial) -> bool:
    # B's turn starts while A's model is answering; A's next turn shows whose prompt it has.
    return beside_held_turn(t, "session/prompt", {"prompt": [text("y")]})


@reproduces("turn-fails-on-64k")
def _turn_fails_on_64k(t: Trial) -> bool:
    session = t.agent.new(sp("append", "x" * 65536 + "END"))  # accepted, by both agents
    _, answer = answer_to_prompt(t.agent, session)
    return "error" in answer


@reproduces("cold-load-keeps-old")
def _cold_load_keeps_old(t: Trial) -> bool:
    return Q not in after_cold_resume(t, sp("append", Q))


ESCAPABLE = 'Answer only in <b>French</b> & say "bonjour".'


@reproduces("html-escapes-prompt")
def _html_escapes_prompt(t: Trial) -> bool:
    t.agent.prompt(t.agent.new(sp("append", ESCAPABLE)))
    return ESCAPABLE not in t.model.system()


@reproduces("vendor-meta-also")
def _vendor_meta_also(t: Trial) -> bool:
    created = t.agent.ok("session/new", {"cwd": CWD, "mcpServers": [],
                                         "systemPrompt": sp("append", P),
                                         "_meta": {"systemPrompt": {"append": Q}}})
    t.agent.prompt(created["sessionId"])
    return Q in t.model.system()


@reproduces("skip-unsupported-blocks")
def _skip_unsupported_blocks(t: Trial) -> bool:
    audio = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
    return "result" in answer_to_new(t.agent, {"mode": "append", "content": [text(P), audio]})


@reproduces("accept-draft-string")
def _accept_draft_string(t: Trial) -> bool:
    return "result" in answer_to_new(t.agent, P)


#: A systemPrompt refused for its second block, with a text block first.
REFUSED = {"mode": "append", "content": [text(Q), {"type": "audio", "data": "UklGRg==",
                                                   "mimeType": "audio/wav"}]}


@reproduces("rejected-text-applied")
def _rejected_text_applied(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    refused = t.agent.error("session/load", {"sessionId": session, "cwd": CWD,
                                             "mcpServers": [], "systemPrompt": REFUSED})
    assert refused["code"] == -32602
    t.agent.prompt(session)
    return Q in t.model.system()


@reproduces("refused-reattach-unloads")
def _refused_reattach_unloads(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    refused = t.agent.error("session/load", {"sessionId": session, "cwd": CWD,
                                             "mcpServers": [], "systemPrompt": REFUSED})
    assert refused["code"] == -32602
    _, answer = answer_to_prompt(t.agent, session)
    return "error" in answer


@reproduces("untied-digest")
def _untied_digest(t: Trial) -> bool:
    t.agent.new(sp("append", P))
    t.agent.new(sp("append", Q))
    # No turn ran: a request that holds both sessions' prompts is tied to neither.
    return any(P in json.dumps(r) and Q in json.dumps(r) for r in t.model.requests)


@reproduces("title-from-other-prompt")
def _title_from_other_prompt(t: Trial) -> bool:
    t.agent.new(sp("append", P))
    other = t.agent.new()
    notes, _ = t.agent.call("session/prompt", {"sessionId": other, "prompt": [text("hi")]})
    titles = [n["params"]["update"].get("title") for n in notes
              if n["params"]["update"]["sessionUpdate"] == "session_info_update"]
    listed = t.agent.ok("session/list", {})["sessions"]
    return titles == [P] and any(s.get("title") == P for s in listed)


@reproduces("replay-prompt-as-user")
def _replay_prompt_as_user(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    notes, _ = t.agent.call("session/load", {"sessionId": session, "cwd": CWD,
                                             "mcpServers": []})
    return any(n["params"]["update"]["sessionUpdate"] == "user_message_chunk"
               and n["params"]["update"]["content"]["text"] == P for n in notes)


@reproduces("error-quotes-other-prompt")
def _error_quotes_other_prompt(t: Trial) -> bool:
    t.agent.new(sp("append", P))
    error = t.agent.error("session/new", {"cwd": CWD, "mcpServers": [],
                                          "systemPrompt": {"mode": "prepend",
                                                           "content": [text(Q)]}})
    return P in json.dumps(error)


@reproduces("capabilities-drift-after-restart")
def _capabilities_drift_after_restart(t: Trial) -> bool:
    first = t.agent.init_result["agentCapabilities"]
    t.agent.new()
    return bool(t.restart().init_result["agentCapabilities"] != first)


@reproduces("override-drops-tools")
def _override_drops_tools(t: Trial) -> bool:
    plain = t.agent.new()
    t.agent.prompt(plain)
    before = [tool["function"]["name"] for tool in t.model.requests[-1]["tools"]]
    t.agent.prompt(t.agent.new(sp("override", P)))
    after = [tool["function"]["name"] for tool in t.model.requests[-1]["tools"]]
    assert before == ["read_file", "list_directory"]
    return after != before


@reproduces("override-changes-config")
def _override_changes_config(t: Trial) -> bool:
    plain = t.agent.ok("session/new", {"cwd": CWD, "mcpServers": []})
    over = t.agent.ok("session/new", {"cwd": CWD, "mcpServers": [],
                                      "systemPrompt": sp("override", P)})
    return bool(plain["configOptions"] != over["configOptions"])


def _named(tool: str) -> dict[str, Any]:
    return {"cwd": CWD, "mcpServers": [{"name": "acp-fuzz", "command": sys.executable,
                                        "args": ["-m", "acp_fuzz.mcp_server", "--tool", tool],
                                        "env": []}]}


def _mcp_names(t: Trial) -> list[str]:
    return [tool["function"]["name"] for tool in t.model.requests[-1]["tools"]][2:]


@reproduces("override-drops-mcp-tools")
def _override_drops_mcp_tools(t: Trial) -> bool:
    t.agent.prompt(t.agent.ok("session/new", _named("tool_a"))["sessionId"])
    assert _mcp_names(t) == ["mcp__acp-fuzz__tool_a"]
    over = t.agent.ok("session/new", {**_named("tool_b"), "systemPrompt": sp("override", P)})
    t.agent.prompt(over["sessionId"])
    return _mcp_names(t) != ["mcp__acp-fuzz__tool_b"]


@reproduces("mcp-tools-leak")
def _mcp_tools_leak(t: Trial) -> bool:
    t.agent.ok("session/new", _named("tool_a"))
    t.agent.prompt(t.agent.new())
    return _mcp_names(t) != []


@reproduces("omit-falls-back-when-talked")
def _omit_falls_back_when_talked(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    kept = []
    for _ in range(2):  # the first resume before a conversation, the second after one
        t.agent.ok("session/resume", {"sessionId": session, "cwd": CWD})
        t.agent.prompt(session)
        kept.append(P in t.model.system())
    return kept[0] != kept[1]  # either choice is allowed, not both


@reproduces("camelcase-stop-reason")
def _camelcase_stop_reason(t: Trial) -> bool:
    return bool(t.agent.prompt(t.agent.new())["stopReason"] != "end_turn")


@reproduces("escape-changed-prompt")
def _escape_changed_prompt(t: Trial) -> bool:
    session = t.agent.new()
    t.agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": [],
                                "systemPrompt": sp("append", ESCAPABLE)})
    t.agent.prompt(session)
    return ESCAPABLE not in t.model.system()


@reproduces("delete-keeps-live")
def _delete_keeps_live(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.agent.ok("session/delete", {"sessionId": session})
    _, answer = answer_to_prompt(t.agent, session)
    return "result" in answer  # the correct agent answers -32002: the session is gone


@reproduces("cold-load-new-id")
def _cold_load_new_id(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    agent = t.restart()
    agent.ok("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []})
    listed = [s["sessionId"] for s in agent.ok("session/list", {})["sessions"]]
    return session not in listed


# Model faults (tests/quality/test_faults.py): the fake model fails one request.


@reproduces("retry-drops-prompt")
def _retry_drops_prompt(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.model.failures = 1
    t.agent.prompt(session)
    failed, retried = t.model.requests  # both agents retry once
    return bool(retried["messages"] != failed["messages"])


@reproduces("fault-ends-silently")
def _fault_ends_silently(t: Trial) -> bool:
    session = t.agent.new(sp("append", P))
    t.model.failures = 1
    notes, answer = answer_to_prompt(t.agent, session)
    return answer.get("result") == {"stopReason": "end_turn"} and not said(notes)


def test_every_reproduction_is_of_a_planted_bug() -> None:
    assert set(_REPRODUCTIONS) <= set(BUGS)


def test_the_package_docstring_describes_every_bug_and_variant() -> None:
    """acp_fuzz/reference_agent/__init__.py lists each --bug and --variant as a heading."""
    doc = reference_agent.__doc__ or ""
    bugs, variants = doc.split("Planted bugs (``--bug NAME``)")[1].split("Correct variants")
    headings = [re.findall(r"^``([a-z0-9-]+)``$", part, re.MULTILINE)
                for part in (bugs, variants)]
    assert (sorted(headings[0]), sorted(headings[1])) == (sorted(BUGS), sorted(VARIANTS))


@pytest.mark.parametrize("name", sorted(BUGS))
def test_planted_bug_shows_its_defect(spawn: Spawner, model: ModelServer, name: str) -> None:
    assert reproduce(spawn, model, name, planted=True)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_correct_agent_passes_each_bug_reproduction(
    spawn: Spawner, model: ModelServer, name: str
) -> None:
    assert not reproduce(spawn, model, name, planted=False)


def test_a_busy_session_refuses_a_reattach_and_changes_nothing_under_busy_refuses(
        spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--variant", "busy-refuses").init()
    session = agent.new(sp("append", P))
    turn, refused = agent.busy(session, "session/resume", {
        "sessionId": session, "cwd": CWD, "systemPrompt": sp("append", Q)})
    assert turn["result"] == {"stopReason": "end_turn"}
    assert refused["error"]["code"] == -32000 and "busy" in refused["error"]["message"]
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}"  # the refused change changed nothing
    # Once the turn is over, the same request is applied.
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": sp("append", Q)})
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{Q}"


def test_a_busy_reattach_refused_for_its_payload_leaves_the_next_reattach_alone(
        spawn: Spawner, model: ModelServer) -> None:
    """Under busy-refuses, a reattach that arrives while a turn runs and carries an invalid
    payload is refused for the payload; the next reattach, with the session idle, is not
    refused as busy (it was: the busy mark stayed behind for it; found by a campaign)."""
    agent = spawn("--variant", "busy-refuses").init()
    session = agent.new(sp("append", P))
    audio = {"mode": "append", "content": [text(Q), {"type": "audio", "data": "UklGRg==",
                                                     "mimeType": "audio/wav"}]}
    _, refused = agent.busy(session, "session/resume", {
        "sessionId": session, "cwd": CWD, "systemPrompt": audio})
    assert refused["error"]["code"] == -32602
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": sp("append", P)})
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}"


def test_bug_may_be_planted_twice_and_each_shows(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--bug", "user-turn", "--bug", "override-keeps-default").init()
    agent.prompt(agent.new(sp("override", P)), "question")
    # override-keeps-default: the defaults stay; user-turn: the client text is in the user turn.
    assert model.requests[-1]["messages"] == [
        {"role": "system", "content": defaults()},
        {"role": "user", "content": f"[System]\n{P}\n\nquestion"},
    ]


def test_user_turn_bug_moves_the_text_into_the_user_message(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = start(spawn, "user-turn")
    agent.prompt(agent.new(sp("append", P)), "question")
    assert model.requests[-1]["messages"] == [
        {"role": "system", "content": defaults()},
        {"role": "user", "content": f"[System]\n{P}\n\nquestion"},
    ]


def test_duplicate_bug_repeats_the_client_text(spawn: Spawner, model: ModelServer) -> None:
    agent = start(spawn, "duplicate-on-resume")
    session = agent.new(sp("append", P))
    params = {"sessionId": session, "cwd": CWD, "mcpServers": [], "systemPrompt": sp("append", P)}
    agent.ok("session/load", params)
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{P}\n\n{P}"


@pytest.mark.parametrize("variant, turns", [("defer-then-apply", [P, Q, Q]),
                                            ("defer-until-restart", [P, P, P])])
def test_deferring_variants_keep_the_old_prompt_then_apply(
    spawn: Spawner, model: ModelServer, variant: str, turns: list[str]
) -> None:
    agent = spawn("--variant", variant).init()
    session = agent.new(sp("append", P))
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "systemPrompt": sp("append", Q)})
    for text in turns:
        agent.prompt(session)
        assert model.system() == f"{defaults()}\n\n{text}"
    # A new process applies the stored change, whatever the variant.
    agent.close()
    agent = spawn("--variant", variant).init()
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD})
    agent.prompt(session)
    assert model.system() == f"{defaults()}\n\n{Q}"


def test_help_lists_every_bug_and_variant() -> None:
    """argparse formats help text with %: a bug whose text says "90 %" once made --help a
    traceback."""
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz.reference_agent", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    flat = " ".join(proc.stdout.split())
    assert all(name in flat for name in (*BUGS, *VARIANTS)), flat[:300]
