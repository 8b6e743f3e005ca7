"""The reference agent speaking ACP v2, driven as a real subprocess over stdio.

The client, the fake model and the agent spawner are those of ``test_reference_agent.py``
(v1); this file adds what v2 changes: version negotiation, the v2 ``initialize`` answer, a turn
that is answered first (``messageId``) and reported through ``state_update`` notifications,
``session/resume`` with ``replayFrom`` in place of ``session/load``, and the planted load bugs
reached through it. Every v2 message the agent sends here is checked against the protocol's own
v2 schema (``tests/fixtures/acp-schema/v2/schema.unstable.json``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from test_reference_agent import (
    CWD,
    AgentProcess,
    ModelServer,
    P,
    Q,
    Spawner,
    defaults,
    sp,
    text,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "acp-schema" / "v2" / "schema.unstable.json"


@cache
def _defs() -> dict[str, Any]:
    defs = json.loads(SCHEMA.read_text(encoding="utf-8"))["$defs"]
    assert isinstance(defs, dict)
    return defs


@cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": _defs()})


def assert_valid(name: str, instance: Any) -> None:
    """``instance`` validates against the v2 schema's ``$defs[name]``."""
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: {errors[0].message} at {list(errors[0].path)}: {instance}"


SNAPSHOT = {"sessionUpdate": "state_update", "state": "idle"}


def messages_of(notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The notes without the state snapshot every v2 resume ends with."""
    return [n for n in notes if n["params"]["update"] != SNAPSHOT]


def assert_update(note: dict[str, Any], session: str) -> dict[str, Any]:
    """``note`` is a valid v2 ``session/update`` for ``session``; returns its update."""
    assert note["jsonrpc"] == "2.0" and note["method"] == "session/update" and "id" not in note
    assert_valid("UpdateSessionNotification", note["params"])
    assert note["params"]["sessionId"] == session
    update = note["params"]["update"]
    assert isinstance(update, dict)
    return update


# ---------------------------------------------------------------------------------------------
# Fixtures and a v2 client on top of the v1 one.
# ---------------------------------------------------------------------------------------------


INFO = {"name": "acp-fuzz-tests", "version": "0"}


def init_v2(agent: AgentProcess, offer: int = 2) -> AgentProcess:
    agent.init_result = agent.ok("initialize", {"protocolVersion": offer, "info": INFO,
                                                "capabilities": {}})
    return agent


def new_v2(agent: AgentProcess, prompt: dict[str, Any] | None = None, cwd: str = CWD) -> str:
    params: dict[str, Any] = {"cwd": cwd}  # v2: mcpServers is optional
    if prompt is not None:
        params["systemPrompt"] = prompt
    result = agent.ok("session/new", params)
    assert_valid("NewSessionResponse", result)
    session_id = result["sessionId"]
    assert isinstance(session_id, str)
    return session_id


def receive_turn(agent: AgentProcess, request_id: int, session: str
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The answer to prompt ``request_id`` (which must come first), then the session's
    updates up to and including the ``idle`` state update that ends the turn."""
    response = agent.receive()
    assert response.get("id") == request_id and "method" not in response, response
    updates: list[dict[str, Any]] = []
    while True:
        update = assert_update(agent.receive(), session)
        updates.append(update)
        if update["sessionUpdate"] == "state_update" and update["state"] == "idle":
            return response, updates


def turn(agent: AgentProcess, session: str, words: str = "hello"
         ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One v2 turn: the prompt's result (``{"messageId": ...}``) and the turn's updates."""
    request_id = agent.next_id
    agent.next_id += 1
    agent.send({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt",
                "params": {"sessionId": session, "prompt": [text(words)]}})
    response, updates = receive_turn(agent, request_id, session)
    assert "result" in response, response
    assert_valid("PromptResponse", response["result"])
    return response["result"], updates


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] if u["sessionUpdate"] != "state_update"
            else f"{u['state']}:{u.get('stopReason')}" if u["state"] == "idle" else u["state"]
            for u in updates]


def replayed(notes: list[dict[str, Any]], session: str) -> list[tuple[str, str, list[Any]]]:
    """(kind, messageId, content) of each replayed message."""
    out = []
    for note in notes:
        update = assert_update(note, session)
        out.append((update["sessionUpdate"], update["messageId"], update["content"]))
    return out


# ---------------------------------------------------------------------------------------------
# initialize: negotiation and the v2 answer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "offer", "answer"), [
    ((), 2, 2),
    ((), 1, 1),
    ((), 5, 2),
    (("--variant", "v1-only"), 2, 1),
    (("--variant", "v1-only"), 1, 1),
    (("--bug", "version-above-offer"), 1, 2),
    (("--bug", "version-above-offer"), 2, 3),
    (("--dialect", "claude-meta"), 2, 1),
    (("--dialect", "goose"), 7, 1),
])
def test_version_negotiation(spawn: Spawner, args: tuple[str, ...], offer: int,
                             answer: int) -> None:
    agent = spawn(*args)
    result = agent.ok("initialize", {"protocolVersion": offer, "info": INFO,
                                     "clientInfo": INFO, "clientCapabilities": {}})
    assert result["protocolVersion"] == answer
    # The answer's shape is the version the agent then speaks (the bug speaks v2).
    speaks_v2 = answer >= 2
    assert ("capabilities" in result) is speaks_v2
    assert ("agentCapabilities" in result) is not speaks_v2
    if speaks_v2:
        assert_valid("InitializeResponse", result)


@pytest.mark.parametrize(("args", "supported"), [
    ((), [1, 2]),
    (("--variant", "v1-only"), [1]),
    (("--dialect", "pi-meta"), [1]),
])
def test_no_supported_version_at_or_below_the_offer_is_32022(
    spawn: Spawner, args: tuple[str, ...], supported: list[int]
) -> None:
    agent = spawn(*args)
    for offer in (0, -3):
        error = agent.error("initialize", {"protocolVersion": offer, "info": INFO})
        assert error == {"code": -32022, "message": "Unsupported protocol version",
                         "data": {"requested": offer, "supported": supported}}
        assert_valid("Error", error)
    # Not initialized by the refusals.
    assert agent.error("session/list", {})["code"] == -32600
    assert agent.error("initialize", {"protocolVersion": True})["code"] == -32602
    init_v2(agent)
    assert agent.listed() == []


def test_v2_initialize_answer_is_exact_and_valid(spawn: Spawner) -> None:
    result = init_v2(spawn()).init_result
    assert result == {
        "protocolVersion": 2,
        "info": {"name": "acp-fuzz-reference-agent", "version": "0.1.0"},
        "capabilities": {"session": {
            "fork": {},
            "delete": {},
            "systemPrompt": {"mode": {"override": {}}},
        }},
        "authMethods": [],
    }
    assert_valid("InitializeResponse", result)
    both = init_v2(spawn("--variant", "titles", "--variant", "directories")).init_result
    assert_valid("InitializeResponse", both)
    assert both["capabilities"]["session"] == {
        **result["capabilities"]["session"], "title": {}, "additionalDirectories": {}}


def test_a_second_initialize_changes_the_version(spawn: Spawner) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent)
    load = {"sessionId": session, "cwd": CWD, "mcpServers": []}
    assert agent.error("session/load", load)["code"] == -32601
    agent.init()  # protocolVersion 1
    assert agent.ok("session/load", load) == {}


# ---------------------------------------------------------------------------------------------
# A v2 turn
# ---------------------------------------------------------------------------------------------


def test_v2_turn_is_answered_first_then_reported(spawn: Spawner, model: ModelServer) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent, sp("append", P))
    model.reply = "the reply"
    result, updates = turn(agent, session, "the question")
    assert kinds(updates) == ["running", "user_message", "agent_message", "idle:end_turn"]
    running, user, reply, idle = updates
    assert running == {"sessionUpdate": "state_update", "state": "running"}
    assert user == {"sessionUpdate": "user_message", "messageId": result["messageId"],
                    "content": [text("the question")]}
    assert reply["content"] == [text("the reply")]
    assert reply["messageId"] != result["messageId"]
    assert idle == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    # The model call is v1's.
    assert model.system() == f"{defaults()}\n\n{P}"
    assert model.requests[-1]["messages"][1:] == [{"role": "user", "content": "the question"}]
    # A second turn carries the first one, as plain role/content messages.
    result2, _ = turn(agent, session, "next")
    assert model.requests[-1]["messages"][1:] == [
        {"role": "user", "content": "the question"},
        {"role": "assistant", "content": "the reply"},
        {"role": "user", "content": "next"},
    ]
    assert result2["messageId"] not in (result["messageId"], reply["messageId"])


def test_v2_message_ids_are_deterministic(tmp_path: Path, model: ModelServer) -> None:
    def ids(home: Path) -> list[str]:
        home.mkdir()
        spawner = Spawner(home, model)
        try:
            agent = init_v2(spawner())
            session = new_v2(agent)
            out = []
            for _ in range(2):
                result, updates = turn(agent, session)
                out += [result["messageId"], updates[2]["messageId"]]
            return out
        finally:
            spawner.reap()

    first = ids(tmp_path / "one")
    assert len(set(first)) == 4
    assert ids(tmp_path / "two") == first  # the same requests from a fresh HOME


def test_v2_unknown_session_and_bad_prompt_are_errors_with_no_turn(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = init_v2(spawn())
    _, response = agent.call("session/prompt", {"sessionId": "sess-9", "prompt": [text("x")]})
    assert response["error"] == {"code": -32002, "message": "Session not found",
                                 "data": {"sessionId": "sess-9"}}
    session = new_v2(agent)
    _, response = agent.call("session/prompt", {"sessionId": session, "prompt": "x"})
    assert response["error"]["code"] == -32602
    agent.ok("session/close", {"sessionId": session})
    _, response = agent.call("session/prompt", {"sessionId": session, "prompt": [text("x")]})
    assert response["error"]["code"] == -32002
    # No turn started for any of them: the next message is the answer to this call.
    assert agent.listed()[0]["sessionId"] == session
    assert model.requests == []


def test_v2_cancel_ends_the_turn_idle_cancelled(spawn: Spawner, model: ModelServer) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent)
    # One write, so the cancel is already in the agent's pipe when the turn starts.
    prompt = {"jsonrpc": "2.0", "id": 500, "method": "session/prompt",
              "params": {"sessionId": session, "prompt": [text("x")]}}
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}
    agent.write_raw(json.dumps(prompt).encode() + b"\n" + json.dumps(cancel).encode() + b"\n")
    response, updates = receive_turn(agent, 500, session)
    assert_valid("PromptResponse", response["result"])
    assert kinds(updates) == ["running", "user_message", "idle:cancelled"]
    assert updates[1]["messageId"] == response["result"]["messageId"]
    assert model.requests == []
    # The cancel was consumed with that turn; the next one runs, and the cancelled message
    # was not kept and its id is not reused.
    result, updates = turn(agent, session, "y")
    assert kinds(updates)[-1] == "idle:end_turn"
    assert result["messageId"] != response["result"]["messageId"]
    assert model.requests[-1]["messages"][1:] == [{"role": "user", "content": "y"}]


def test_v2_model_failure_ends_the_turn_idle_error(spawn: Spawner, model: ModelServer) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent)
    model.status = 500
    result, updates = turn(agent, session, "lost")
    assert kinds(updates) == ["running", "user_message", "idle:error"]
    error = updates[-1]["error"]
    assert error["code"] == -32603 and error["message"].startswith("model request failed: ")
    model.status = 200
    result2, updates = turn(agent, session, "kept")
    assert kinds(updates)[-1] == "idle:end_turn"
    assert result2["messageId"] != result["messageId"]
    assert model.requests[-1]["messages"][1:] == [{"role": "user", "content": "kept"}]


# ---------------------------------------------------------------------------------------------
# v2 lifecycle: no load, no modes, resume with replayFrom
# ---------------------------------------------------------------------------------------------


def test_v2_has_no_load_and_no_modes(spawn: Spawner) -> None:
    agent = init_v2(spawn("--variant", "switches"))
    created = agent.ok("session/new", {"cwd": CWD, "mcpServers": []})
    assert_valid("NewSessionResponse", created)
    session = created["sessionId"]
    assert "modes" not in created
    assert [o["configId"] for o in created["configOptions"]] == ["model"]
    for method, params in [
        ("session/load", {"sessionId": session, "cwd": CWD, "mcpServers": []}),
        ("session/set_mode", {"sessionId": session, "modeId": "plan"}),
    ]:
        assert agent.error(method, params) == {"code": -32601, "message": "Method not found",
                                               "data": {"method": method}}
    changed = agent.ok("session/set_config_option", {"sessionId": session, "configId": "model",
                                                     "type": "id",
                                                     "value": "reference-model-mini"})
    assert_valid("SetSessionConfigOptionResponse", changed)
    assert changed["configOptions"][0]["currentValue"] == "reference-model-mini"
    resumed = agent.ok("session/resume", {"sessionId": session, "cwd": CWD})
    assert_valid("ResumeSessionResponse", resumed)
    assert "modes" not in resumed
    forked = agent.ok("session/fork", {"sessionId": session, "cwd": CWD})
    assert_valid("ForkSessionResponse", forked)
    assert "modes" not in forked


def test_v2_new_needs_only_cwd(spawn: Spawner) -> None:
    agent = init_v2(spawn())
    new_v2(agent)
    assert agent.error("session/new", {"cwd": CWD, "mcpServers": {}})["code"] == -32602
    assert agent.error("session/new", {"mcpServers": []})["code"] == -32602
    assert len(agent.listed()) == 1


def test_v2_resume_replays_from_start_only_when_asked(
    spawn: Spawner, model: ModelServer
) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent, sp("append", P))
    live = []
    for n in ("one", "two"):
        model.reply = f"reply {n}"
        result, updates = turn(agent, session, f"turn {n}")
        live += [result["messageId"], updates[2]["messageId"]]
    expected = [
        ("user_message", live[0], [text("turn one")]),
        ("agent_message", live[1], [text("reply one")]),
        ("user_message", live[2], [text("turn two")]),
        ("agent_message", live[3], [text("reply two")]),
    ]
    # The replay comes before the answer, each message under the id it had when live, and
    # then the current-state snapshot the v2 schema asks of every resume (StateUpdate).
    snapshot = SNAPSHOT
    notes, response = agent.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                    "replayFrom": {"type": "start"}})
    assert response["result"] == {}
    assert replayed(notes[:-1], session) == expected
    assert assert_update(notes[-1], session) == snapshot
    # Omitted or null: no replay, only the snapshot.
    for extra in ({}, {"replayFrom": None}):
        notes, response = agent.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                        **extra})
        assert response["result"] == {}
        assert [assert_update(n, session) for n in notes] == [snapshot]
    # In a new process too (the ids are kept with the conversation).
    agent.close()
    again = init_v2(spawn())
    notes, response = again.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                    "mcpServers": [],
                                                    "replayFrom": {"type": "start"}})
    assert response["result"] == {}
    assert replayed(notes[:-1], session) == expected
    assert assert_update(notes[-1], session) == snapshot
    model.reply = "ok"
    result, _ = turn(again, session, "three")
    assert result["messageId"] not in live
    assert model.system() == f"{defaults()}\n\n{P}"


@pytest.mark.parametrize("cursor", [
    {"type": "_vendor"},
    {"type": "message", "messageId": "m0"},
    {},
    {"type": 1},
    "start",
    ["start"],
    7,
])
def test_v2_unsupported_replay_cursor_is_32602_and_changes_nothing(
    spawn: Spawner, model: ModelServer, cursor: Any
) -> None:
    agent = init_v2(spawn())
    session = new_v2(agent, sp("append", P))
    turn(agent, session, "kept")
    notes, response = agent.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                    "replayFrom": cursor,
                                                    "systemPrompt": sp("append", Q)})
    assert notes == []
    assert response["error"]["code"] == -32602
    turn(agent, session, "again")
    assert model.system() == f"{defaults()}\n\n{P}"  # the rejected request's prompt: unused
    # Unknown sessions with a valid cursor are still "not found".
    error = agent.error("session/resume", {"sessionId": "sess-9", "cwd": CWD,
                                           "replayFrom": {"type": "start"}})
    assert error == {"code": -32002, "message": "Session not found",
                     "data": {"sessionId": "sess-9"}}


# ---------------------------------------------------------------------------------------------
# Planted bugs whose trigger is session/load fire through v2 resume with replay
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("planted", [True, False])
def test_load_erases_session_fires_through_v2_replay(
    spawn: Spawner, model: ModelServer, planted: bool
) -> None:
    agent = init_v2(spawn(*(["--bug", "load-erases-session"] if planted else [])))
    session = new_v2(agent, sp("append", P))
    turn(agent, session, "first words")
    # A plain resume is not a load: it never fires.
    assert agent.ok("session/resume", {"sessionId": session, "cwd": CWD}) == {}
    replay = {"sessionId": session, "cwd": CWD, "replayFrom": {"type": "start"}}
    notes, response = agent.call("session/resume", replay)
    if not planted:
        assert "result" in response and len(messages_of(notes)) == 2
        assert notes[-1]["params"]["update"] == SNAPSHOT
        return
    assert notes == []
    assert response["error"] == {"code": -32603, "message": "Internal error",
                                 "data": {"details": "No previous sessions found for this "
                                                     "project."}}
    notes, response = agent.call("session/resume", replay)  # succeeds, and nothing is left
    assert (messages_of(notes), response["result"]) == ([], {})


@pytest.mark.parametrize("planted", [True, False])
def test_history_lost_after_restart_fires_through_v2_replay(
    spawn: Spawner, model: ModelServer, planted: bool
) -> None:
    args = ["--bug", "history-lost-after-restart"] if planted else []
    first = init_v2(spawn(*args))
    session = new_v2(first, sp("append", P))
    turn(first, session, "first words")
    first.close()
    second = init_v2(spawn(*args))
    notes, response = second.call("session/resume", {"sessionId": session, "cwd": CWD,
                                                     "replayFrom": {"type": "start"}})
    assert response["result"] == {}
    turn(second, session, "second words")
    texts = [m["content"] for m in model.requests[-1]["messages"]]
    assert ("first words" not in texts) is planted
    assert (messages_of(notes) == []) is planted
    assert model.system() == f"{defaults()}\n\n{P}"  # the prompt itself survived


@pytest.mark.parametrize("planted", [True, False])
def test_lost_override_after_restart_fires_through_v2_replay(
    spawn: Spawner, model: ModelServer, planted: bool
) -> None:
    args = ["--bug", "lost-override-after-restart"] if planted else []
    first = init_v2(spawn(*args))
    session = new_v2(first, sp("override", P))
    first.close()
    second = init_v2(spawn(*args))
    second.ok("session/resume", {"sessionId": session, "cwd": CWD,
                                 "replayFrom": {"type": "start"},
                                 "systemPrompt": sp("override", P)})
    turn(second, session)
    assert (model.system() != P) is planted


def test_version_above_offer_then_speaks_v2(spawn: Spawner, model: ModelServer) -> None:
    agent = spawn("--bug", "version-above-offer")
    result = agent.ok("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert result["protocolVersion"] == 2
    session = new_v2(agent)
    assert agent.error("session/load", {"sessionId": session, "cwd": CWD,
                                        "mcpServers": []})["code"] == -32601
    _, updates = turn(agent, session)
    assert kinds(updates) == ["running", "user_message", "agent_message", "idle:end_turn"]

