"""The stand-in agent of ``acp-fuzz client``: a small, reactive ACP agent played to a client.

``python -m acp_fuzz.engine.client.stand_in RUN_DIR`` speaks ACP v1 and v2 (NDJSON JSON-RPC on
stdio) to whatever client started it. It advertises the capability set written in
``RUN_DIR/config.json`` (:class:`~acp_fuzz.core.capability_sets.CapabilitySet`), answers every
request correctly for that set, and records every frame in both directions, so that the client
oracles (:mod:`acp_fuzz.core.client_oracles`) can judge what the client sent.

What it answers:

* ``initialize``: the set's answer (the offered version if it speaks it, else its newest
  below). Every other request before it gets ``-32600``.
* ``session/new``: a new session ``sess-<n>``. ``session/load`` (v1, when ``loadSession`` is
  advertised): replays the conversation as ``user_message_chunk`` / ``agent_message_chunk``
  updates, then ``{}``. ``session/resume`` (advertised in v1, always in v2): ``{}``; in v2
  ``replayFrom: {"type": "start"}`` replays the conversation as ``user_message`` /
  ``agent_message`` updates first, and a ``state_update`` ``idle`` snapshot precedes the
  answer. ``session/fork``: a new session with a copy of the conversation. ``session/close``:
  ``{}``. ``session/list``: every stored session (optionally by ``cwd``).
* ``session/prompt``: on a session this process created or reattached. v1: one
  ``agent_message_chunk``, then ``{"stopReason": "end_turn"}``. v2: ``{"messageId"}``, then
  ``state_update`` ``running``, the ``user_message`` echo, one ``agent_message`` and
  ``state_update`` ``idle`` with ``stopReason`` ``end_turn``. No model is asked.
* ``systemPrompt`` on new, load, resume and fork, when advertised: validated like a correct
  agent (a mode it supports, a non-empty array of text blocks, else ``-32602``, nothing
  changed). When not advertised it is ignored, as an agent that predates the field does.
* Methods it does not advertise, and unknown ones, get ``-32601``; an unknown session
  ``-32002`` with ``data.sessionId``.

State: sessions live in ``RUN_DIR/state.json`` (under ``flock``), shared by every stand-in of
one example, so a client may create a session in one command line and reattach it in the next.
Frames: ``RUN_DIR/conn-<n>.jsonl``, one JSON object a line: ``{"hello": {pid, argv}}`` first,
then ``{"dir": "send"|"recv", "msg": ...}`` per frame (``send``: from the client), then
``{"bye": ...}`` when stdin ends. ``n`` numbers the stand-in processes of the run from 0.
The stand-in uses the standard library and the core only, and never reads the clock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import IO, Any

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.errors import RpcError
from acp_fuzz.core.version import __version__

__all__ = ["StandIn", "main"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
NOT_FOUND = -32002
#: Lines longer than this are answered as invalid and recorded cut.
MAX_LINE = 16 * 1024 * 1024
RAW_KEEP = 4096


def _params(msg: Mapping[str, Any]) -> dict[str, Any]:
    params = msg.get("params", {})
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: params must be an object")
    return params


def _session_id(params: Mapping[str, Any]) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str):
        raise RpcError(INVALID_PARAMS, "Invalid params: sessionId must be a string")
    return sid


def _cwd(params: Mapping[str, Any]) -> str:
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise RpcError(INVALID_PARAMS, "Invalid params: cwd must be an absolute path")
    mcp = params.get("mcpServers")
    if mcp is not None and not isinstance(mcp, list):
        raise RpcError(INVALID_PARAMS, "Invalid params: mcpServers must be an array")
    return cwd


class StandIn:
    """One connection's logic. ``handle(line)`` returns the lines to write; the state of
    the sessions is read and written under the run's lock."""

    def __init__(self, run_dir: str, caps: CapabilitySet) -> None:
        self.run_dir = run_dir
        self.caps = caps
        self.version: int | None = None
        self.live: set[str] = set()  # sessions this process created or reattached

    # -- state -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def state(self) -> Iterator[dict[str, Any]]:
        """The shared state, locked; written back when the block ends without an error."""
        with open(os.path.join(self.run_dir, "lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = os.path.join(self.run_dir, "state.json")
            try:
                with open(path, encoding="utf-8") as f:
                    state: dict[str, Any] = json.load(f)
            except FileNotFoundError:
                state = {"next_session": 1, "next_conn": 0, "sessions": {}}
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = path + f".{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(state, f)
                os.replace(tmp, path)

    def connection_number(self) -> int:
        with self.state() as st:
            n = int(st["next_conn"])
            st["next_conn"] = n + 1
        return n

    # -- messages ----------------------------------------------------------------------------

    def handle(self, msg: Any) -> list[dict[str, Any]]:
        """The messages to send for one parsed line from the client."""
        if not isinstance(msg, dict):
            return [{"jsonrpc": "2.0", "id": None,
                     "error": {"code": INVALID_REQUEST, "message": "Invalid Request"}}]
        method = msg.get("method")
        if not isinstance(method, str):
            return []  # a response to a request of ours (there are none) or noise
        if "id" not in msg:
            return []  # session/cancel and every other notification: nothing to do
        out: list[dict[str, Any]] = []
        try:
            result = self.dispatch(method, _params(msg), out)
        except RpcError as e:
            return [{"jsonrpc": "2.0", "id": msg["id"], "error": e.to_error()}]
        after = result.pop("__after__", [])
        return [*out, {"jsonrpc": "2.0", "id": msg["id"], "result": result}, *after]

    def dispatch(self, method: str, params: dict[str, Any],
                 out: list[dict[str, Any]]) -> dict[str, Any]:
        if method == "initialize":
            result = self.caps.initialize_result(params.get("protocolVersion"),
                                                 version=__version__)
            self.version = result["protocolVersion"]
            return result
        if self.version is None:
            raise RpcError(INVALID_REQUEST, "Invalid Request: the connection is not "
                                            "initialized (send initialize first)")
        handler = {
            "session/new": self.new,
            "session/load": self.load,
            "session/resume": self.resume,
            "session/fork": self.fork,
            "session/close": self.close,
            "session/list": self.list_sessions,
            "session/prompt": self.prompt,
        }.get(method)
        if handler is None or not self.offers(method):
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return handler(params, out)

    def offers(self, method: str) -> bool:
        v2 = (self.version or 1) >= 2
        return {
            "session/load": not v2 and self.caps.load,
            "session/resume": v2 or self.caps.resume,
            "session/fork": self.caps.fork,
            "session/close": v2 or self.caps.close,
            "session/list": v2 or self.caps.list,
        }.get(method, True)

    def update(self, sid: str, update: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "session/update",
                "params": {"sessionId": sid, "update": update}}

    def system_prompt(self, params: Mapping[str, Any]) -> Any:
        """The request's prompt, validated where advertised (``None``: none, or not
        advertised and so ignored)."""
        sp = params.get("systemPrompt")
        if sp is None or not self.caps.system_prompt:
            return None
        if not isinstance(sp, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: systemPrompt must be an object")
        modes = ("append", "override") if self.caps.override else ("append",)
        if sp.get("mode") not in modes:
            raise RpcError(INVALID_PARAMS, f"Invalid params: unsupported systemPrompt mode "
                                           f"{json.dumps(sp.get('mode'))[:80]}")
        content = sp.get("content")
        if not isinstance(content, list) or not content:
            raise RpcError(INVALID_PARAMS, "Invalid params: systemPrompt.content must be a "
                                           "non-empty array")
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text" \
                    or not isinstance(block.get("text"), str):
                raise RpcError(INVALID_PARAMS, "Invalid params: systemPrompt.content holds "
                                               "only text blocks")
        return {"mode": sp["mode"], "content": content}

    def _find(self, st: dict[str, Any], sid: str) -> dict[str, Any]:
        session = st["sessions"].get(sid)
        if session is None:
            raise RpcError(NOT_FOUND, "Resource not found", {"sessionId": sid})
        return session  # type: ignore[no-any-return]

    def new(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        cwd = _cwd(params)
        sp = self.system_prompt(params)
        with self.state() as st:
            sid = f"sess-{st['next_session']}"
            st["next_session"] += 1
            st["sessions"][sid] = {"cwd": cwd, "systemPrompt": sp, "history": []}
        self.live.add(sid)
        return {"sessionId": sid}

    def replay(self, sid: str, history: list[list[str]], out: list[dict[str, Any]]) -> None:
        for i, (role, text) in enumerate(history):
            if (self.version or 1) >= 2:
                out.append(self.update(sid, {
                    "sessionUpdate": "user_message" if role == "user" else "agent_message",
                    "messageId": f"m{i}", "content": [{"type": "text", "text": text}]}))
            else:
                out.append(self.update(sid, {
                    "sessionUpdate": ("user_message_chunk" if role == "user"
                                      else "agent_message_chunk"),
                    "content": {"type": "text", "text": text}}))

    def reattach(self, params: dict[str, Any], out: list[dict[str, Any]], *,
                 replay: bool) -> dict[str, Any]:
        sid = _session_id(params)
        cwd = _cwd(params)
        sp = self.system_prompt(params)
        with self.state() as st:
            session = self._find(st, sid)
            if sp is not None:
                session["systemPrompt"] = sp
            session["cwd"] = cwd
            history = list(session["history"])
        if replay:
            self.replay(sid, history, out)
        if (self.version or 1) >= 2:
            out.append(self.update(sid, {"sessionUpdate": "state_update", "state": "idle"}))
        self.live.add(sid)
        return {}

    def load(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        return self.reattach(params, out, replay=True)

    def resume(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        replay = False
        if (self.version or 1) >= 2 and params.get("replayFrom") is not None:
            cursor = params["replayFrom"]
            if not isinstance(cursor, dict) or cursor.get("type") != "start":
                raise RpcError(INVALID_PARAMS, "Invalid params: unsupported replayFrom")
            replay = True
        return self.reattach(params, out, replay=replay)

    def fork(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        source = _session_id(params)
        cwd = _cwd(params)
        sp = self.system_prompt(params)
        with self.state() as st:
            src = self._find(st, source)
            sid = f"sess-{st['next_session']}"
            st["next_session"] += 1
            st["sessions"][sid] = {"cwd": cwd, "history": list(src["history"]),
                                   "systemPrompt": sp if sp is not None
                                   else src.get("systemPrompt")}
        self.live.add(sid)
        return {"sessionId": sid}

    def close(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        sid = _session_id(params)
        with self.state() as st:
            self._find(st, sid)
        self.live.discard(sid)
        return {}

    def list_sessions(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        cwd = params.get("cwd")
        with self.state() as st:
            sessions = [{"sessionId": sid, "cwd": s["cwd"]}
                        for sid, s in st["sessions"].items()
                        if not isinstance(cwd, str) or s["cwd"] == cwd]
        return {"sessions": sessions}

    def prompt(self, params: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        sid = _session_id(params)
        blocks = params.get("prompt")
        if not isinstance(blocks, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: prompt must be an array")
        if sid not in self.live:
            raise RpcError(NOT_FOUND, "Resource not found: the session is not loaded here "
                                      "(load or resume it first)", {"sessionId": sid})
        text = "\n".join(b["text"] for b in blocks
                         if isinstance(b, dict) and isinstance(b.get("text"), str))
        with self.state() as st:
            session = self._find(st, sid)
            turn = len(session["history"]) // 2 + 1
            reply = f"acp-fuzz stand-in: turn {turn} received"
            position = len(session["history"])
            session["history"] += [["user", text], ["assistant", reply]]
        if (self.version or 1) < 2:
            out.append(self.update(sid, {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": reply}}))
            return {"stopReason": "end_turn"}
        after = [
            self.update(sid, {"sessionUpdate": "state_update", "state": "running"}),
            self.update(sid, {"sessionUpdate": "user_message", "messageId": f"m{position}",
                              "content": [{"type": "text", "text": text}]}),
            self.update(sid, {"sessionUpdate": "agent_message",
                              "messageId": f"m{position + 1}",
                              "content": [{"type": "text", "text": reply}]}),
            self.update(sid, {"sessionUpdate": "state_update", "state": "idle",
                              "stopReason": "end_turn"}),
        ]
        return {"messageId": f"m{position}", "__after__": after}


class _Log:
    """The connection's frame log: one JSON line per record, one ``write`` each."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode("ascii"))


def serve(run_dir: str, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        caps = CapabilitySet.from_wire(json.load(f)["capabilities"])
    agent = StandIn(run_dir, caps)
    n = agent.connection_number()
    agent.caps = caps.for_connection(n)  # the set's "changes": another one from the second on
    log = _Log(os.path.join(run_dir, f"conn-{n}.jsonl"))
    # The command line it was started by (client_campaign.agent_command), not sys.argv,
    # whose first word is this file's path: a portable cassette rewrites the interpreter.
    argv = [sys.executable, "-m", "acp_fuzz.engine.client.stand_in", *sys.argv[1:]]
    log.write({"hello": {"pid": os.getpid(), "argv": argv}})

    def send(msg: dict[str, Any]) -> None:
        log.write({"dir": "recv", "msg": msg})
        stdout.write(json.dumps(msg, separators=(",", ":")).encode("utf-8") + b"\n")
        stdout.flush()

    reason = "eof"
    try:
        while True:
            raw = stdin.readline(MAX_LINE + 1)
            if not raw:
                break
            if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                stdin.readline()  # the rest of the line, dropped
                log.write({"dir": "send", "msg": None, "error": "oversize",
                           "raw": raw[:RAW_KEEP].decode("utf-8", "replace")})
                send({"jsonrpc": "2.0", "id": None,
                      "error": {"code": INVALID_REQUEST, "message": "Invalid Request: line "
                                                                    "too long"}})
                continue
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            try:
                msg = json.loads(text)
            except ValueError:
                log.write({"dir": "send", "msg": None, "error": "invalid-json",
                           "raw": text[:RAW_KEEP]})
                send({"jsonrpc": "2.0", "id": None,
                      "error": {"code": PARSE_ERROR, "message": "Parse error"}})
                continue
            if isinstance(msg, dict):
                log.write({"dir": "send", "msg": msg})
            else:
                log.write({"dir": "send", "msg": None, "error": "not-object",
                           "raw": text[:RAW_KEEP]})
            for out in agent.handle(msg):
                send(out)
    except BrokenPipeError:
        reason = "stdout-closed"
    log.write({"bye": {"reason": reason}})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.stderr.write("usage: python -m acp_fuzz.engine.client.stand_in RUN_DIR "
                         "(started by acp-fuzz client)\n")
        return 2
    try:
        return serve(args[0], sys.stdin.buffer, sys.stdout.buffer)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
