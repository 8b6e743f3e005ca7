"""The reference agent's compaction (--variant compacting and its bugs), driven over stdio
against a real local Chat Completions server (test_reference_agent's ModelServer)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_reference_agent import CWD, ModelServer, Spawner, sp, text

FIXED = "acp-fuzz reference agent: summarise the conversation so far."


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


@pytest.fixture
def spawn(tmp_path: Path, model: ModelServer) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path, model)
    yield spawner
    spawner.reap()


def summaries(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if str(r["messages"][0]["content"]).startswith(FIXED)]


def commands(notes: list[dict[str, Any]]) -> list[Any]:
    return [n["params"]["update"]["availableCommands"] for n in notes
            if n.get("method") == "session/update"
            and n["params"]["update"].get("sessionUpdate") == "available_commands_update"]


def new(agent: Any, prompt: str) -> tuple[str, list[dict[str, Any]]]:
    notes, response = agent.call("session/new", {"cwd": CWD, "mcpServers": [],
                                                 "systemPrompt": sp("append", prompt)})
    session = response["result"]["sessionId"]
    # the advertisement follows the answer
    return session, [*notes, agent.receive()] if "compacting" in str(agent.proc.args) else notes


def test_compact_command_is_advertised_only_when_compacting(spawn: Spawner) -> None:
    agent = spawn("--variant", "compacting").init()
    _, notes = new(agent, "P-one")
    assert commands(notes) == [[{"name": "compact",
                                 "description": "Summarise the conversation to free context"}]]
    plain = spawn().init()
    notes, _ = plain.call("session/new", {"cwd": CWD, "mcpServers": []})
    assert commands(notes) == []


@pytest.mark.parametrize("bug", [None, "compaction-drops-prompt"])
def test_compact_makes_one_summary_request(spawn: Spawner, model: ModelServer,
                                           bug: str | None) -> None:
    args = ["--variant", "compacting"] + (["--bug", bug] if bug else [])
    agent = spawn(*args).init()
    session, _ = new(agent, "CLIENT-PROMPT-X")
    agent.prompt(session, "first turn")
    model.reset()
    notes, response = agent.call("session/prompt", {"sessionId": session,
                                                    "prompt": [text("/compact")]})
    assert response["result"]["stopReason"] == "end_turn"
    assert len(model.requests) == 1 and len(summaries(model.requests)) == 1
    assert "first turn" in model.requests[0]["messages"][1]["content"]
    chunks = [n for n in notes if n["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) == 1
    # no compaction_update: the client did not advertise session.compaction
    assert not [n for n in notes if n["params"]["update"]["sessionUpdate"] == "compaction_update"]
    model.reset()
    agent.prompt(session, "after")
    assert ("CLIENT-PROMPT-X" in model.system()) == (bug is None)


@pytest.mark.parametrize("variant,applied", [(("--variant", "defer-until-compaction"), True),
                                             (("--bug", "compaction-keeps-stale"), False)])
def test_changed_prompt_waits_for_compaction(spawn: Spawner, model: ModelServer,
                                             variant: tuple[str, str], applied: bool) -> None:
    agent = spawn(*variant).init()
    session, _ = new(agent, "OLD-PROMPT")
    agent.prompt(session, "one")
    agent.ok("session/resume", {"sessionId": session, "cwd": CWD, "mcpServers": [],
                                "systemPrompt": sp("append", "NEW-PROMPT")})
    agent.receive()  # its available_commands_update
    model.reset()
    agent.prompt(session, "two")
    assert "OLD-PROMPT" in model.system() and "NEW-PROMPT" not in model.system()
    agent.prompt(session, "/compact")
    model.reset()
    agent.prompt(session, "three")
    assert ("NEW-PROMPT" in model.system()) == applied
    assert ("OLD-PROMPT" in model.system()) == (not applied)


class Pressing:
    """A real local HTTP server: replies report ``prompt_tokens`` (usage), or the first turn
    request gets HTTP 400 ``context_length_exceeded`` (overflow)."""

    def __init__(self, mode: str) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode, self.refused = mode, False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                summary = str(body["messages"][0]["content"]).startswith(FIXED)
                status, answer = 200, {"choices": [{"message": {"role": "assistant",
                                                                "content": "ok"}}],
                                       "usage": {"prompt_tokens": 10}}
                if server.mode == "usage" and not summary:
                    answer["usage"] = {"prompt_tokens": 120_000}
                if server.mode == "overflow" and not summary and not server.refused \
                        and len(server.requests) > 1:
                    server.refused, status = True, 400
                    answer = {"error": {"message": "too long", "type": "invalid_request_error",
                                        "code": "context_length_exceeded"}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_usage_near_the_window_compacts_before_the_next_turn(spawn: Spawner) -> None:
    server = Pressing("usage")
    try:
        agent = spawn("--variant", "compacting", base_url=server.base_url)
        agent.ok("initialize", {"protocolVersion": 1,
                                "clientCapabilities": {"session": {"compaction": {}}}})
        session, _ = new(agent, "P-usage")
        agent.prompt(session, "one")
        assert summaries(server.requests) == []
        notes, _ = agent.call("session/prompt", {"sessionId": session, "prompt": [text("two")]})
        kinds = [r["messages"][0]["content"].startswith(FIXED) for r in server.requests]
        assert kinds == [False, True, False]  # turn, summary, then the next turn's request
        statuses = [n["params"]["update"]["status"] for n in notes
                    if n["params"]["update"]["sessionUpdate"] == "compaction_update"]
        assert statuses == ["in_progress", "completed"]
    finally:
        server.close()


def test_context_length_error_compacts_and_retries_once(spawn: Spawner) -> None:
    server = Pressing("overflow")
    try:
        agent = spawn("--variant", "compacting", base_url=server.base_url).init()
        session, _ = new(agent, "P-overflow")
        agent.prompt(session, "one")
        answer = agent.prompt(session, "two")
        assert answer["stopReason"] == "end_turn"
        kinds = [r["messages"][0]["content"].startswith(FIXED) for r in server.requests]
        assert kinds == [False, False, True, False]  # turn 1, refused, summary, retry
        assert "P-overflow" in server.requests[-1]["messages"][0]["content"]
    finally:
        server.close()
