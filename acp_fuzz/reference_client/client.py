"""The reference client's logic: a small, correct ACP client, with planted bugs.

See the package docstring (``acp_fuzz/reference_client/__init__.py``) for what it does.
Standard library only; the agent is a subprocess spoken to over its stdio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["BUGS", "COMMANDS", "Client", "ClientError", "main"]

CLIENT_NAME = "acp-fuzz-reference-client"
CLIENT_VERSION = "1.0.0"
DEFAULT_PROMPT = "You are a careful assistant. Answer in one short sentence."

#: Planted defects, each against one client rule of the RFD (docs/rules.md).
BUGS: dict[str, str] = {
    "unadvertised-prompt": "sends systemPrompt whether or not the agent advertised it "
                           "(SP-CLIENT-GATE-MUSTNOT)",
    "override-unadvertised": "sends the --mode override it was asked for without checking "
                             "mode.override (SP-CLIENT-OVERRIDE-GATE-MUSTNOT)",
    "image-block": "adds an image block (a logo) to the systemPrompt content "
                   "(SP-CLIENT-CONTENT-TEXT-MUSTNOT)",
    "empty-content": "on load, resume and fork sends content [] to mean 'keep the stored "
                     "prompt' (SP-CLIENT-CONTENT-EMPTY-MUSTNOT)",
    "resume-ungated": "reattaches with session/resume whenever loadSession is not "
                      "advertised, without checking sessionCapabilities.resume "
                      "(CAP-CLIENT-GATE-MUSTNOT)",
    "new-before-initialize": "sends session/new first, and initializes only when it is "
                             "refused (INIT-CLIENT-FIRST-MUST)",
    "no-resend": "does not re-send the session's systemPrompt on load, resume and fork "
                 "(SP-CLIENT-RESEND-SHOULD)",
    "changed-on-reattach": "re-sends the prompt on load, resume and fork with a line added "
                           "(SP-CLIENT-RESEND-SHOULD)",
    "legacy-meta-only": "sends the prompt as _meta.systemPrompt ({append: text}) instead of "
                        "the standard field, even where it is advertised",
    "null-is-advertised": "reads a capability key that is present as advertised, null "
                          "included (systemPrompt: null, mode.override: null)",
    "string-prompt": "sends systemPrompt as a bare string, an earlier draft's shape, instead "
                     "of {mode, content} (ACPFUZZ-CLIENT-PROMPT-SHAPE-MUST)",
}

COMMANDS = ("session", "new", "prompt", "list")

#: A 1x1 PNG, for the image-block bug.
_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU"
        "5ErkJggg==")


class ClientError(Exception):
    """Something the client cannot do: printed as one line, exit status 1."""


class Connection:
    """JSON-RPC over the agent's stdio: one request at a time, notifications collected."""

    def __init__(self, argv: list[str], log: IO[str]) -> None:
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        except OSError as e:
            raise ClientError(f"cannot start the agent {argv[0]!r}: {e.strerror or e}") from None
        self.next_id = 0
        self.log = log
        self.updates: list[dict[str, Any]] = []

    def write(self, msg: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ClientError("the agent closed its input") from None

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise ClientError("the agent exited")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg and "id" in msg:
                # A request of the agent's (permission, fs, terminal): not supported here.
                self.write({"jsonrpc": "2.0", "id": msg["id"],
                            "error": {"code": -32601, "message": "Method not found"}})
                continue
            return msg

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        """The result, or :class:`RpcFailed` for an error answer."""
        rid = self.next_id
        self.next_id += 1
        self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": dict(params)})
        while True:
            msg = self.read()
            if "method" in msg:
                if msg.get("method") == "session/update" and isinstance(msg.get("params"),
                                                                         dict):
                    self.updates.append(msg["params"])
                continue
            if msg.get("id") != rid:
                continue
            if "error" in msg:
                raise RpcFailed(method, msg["error"])
            return msg.get("result")

    def wait_idle(self, session_id: str) -> str:
        """v2: read updates until the session's ``state_update`` ``idle``; its stop reason."""
        while True:
            for i, params in enumerate(self.updates):
                update = params.get("update")
                if params.get("sessionId") == session_id and isinstance(update, dict) \
                        and update.get("sessionUpdate") == "state_update" \
                        and update.get("state") == "idle":
                    del self.updates[: i + 1]
                    return str(update.get("stopReason"))
            msg = self.read()
            if msg.get("method") == "session/update" and isinstance(msg.get("params"), dict):
                self.updates.append(msg["params"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class RpcFailed(ClientError):
    def __init__(self, method: str, error: Any) -> None:
        message = error.get("message") if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        super().__init__(f"{method} failed: {code} {message}")
        self.code = code


class Client:
    """One run of the client: connect, initialize, and the command's requests."""

    def __init__(self, agent: list[str], *, bugs: set[str], prompt_text: str, mode: str,
                 offer: int, state: Path, cwd: str, log: IO[str]) -> None:
        self.agent = agent
        self.bugs = bugs
        self.prompt_text = prompt_text
        self.mode = mode
        self.offer = offer
        self.state = state
        self.cwd = cwd
        self.log = log
        self.conn: Connection | None = None
        self.init: dict[str, Any] = {}
        self.version = 1

    # -- what the agent advertised -----------------------------------------------------------

    def session_caps(self) -> dict[str, Any]:
        if self.version >= 2:
            caps = self.init.get("capabilities")
            sess = caps.get("session") if isinstance(caps, dict) else None
            return sess if isinstance(sess, dict) else {}
        caps = self.init.get("agentCapabilities")
        sess = caps.get("sessionCapabilities") if isinstance(caps, dict) else None
        return sess if isinstance(sess, dict) else {}

    def can(self, method: str) -> bool:
        sess = self.session_caps()
        if self.version >= 2:
            if method in ("resume", "close", "list"):
                return isinstance(self.init.get("capabilities", {}).get("session"), dict)
            return method != "load" and isinstance(sess.get(method), dict)
        if method == "load":
            caps = self.init.get("agentCapabilities")
            return isinstance(caps, dict) and caps.get("loadSession") is True
        return isinstance(sess.get(method), dict)

    def prompt_capability(self) -> dict[str, Any] | None:
        caps = self.session_caps()
        sp = caps.get("systemPrompt")
        if "null-is-advertised" in self.bugs and "systemPrompt" in caps:
            return sp if isinstance(sp, dict) else {}  # BUG(null-is-advertised)
        return sp if isinstance(sp, dict) else None

    def override_advertised(self) -> bool:
        cap = self.prompt_capability()
        mode = cap.get("mode") if cap is not None else None
        if "null-is-advertised" in self.bugs:
            # BUG(null-is-advertised): the key is there, whatever it holds.
            return isinstance(mode, dict) and "override" in mode
        return isinstance(mode, dict) and isinstance(mode.get("override"), dict)

    # -- the system prompt -------------------------------------------------------------------

    def new_prompt(self) -> dict[str, Any] | None:
        """The systemPrompt of a new session: None when there is no text or the agent did
        not advertise the field."""
        if not self.prompt_text:
            return None
        if self.prompt_capability() is None and "unadvertised-prompt" not in self.bugs:
            return None
        mode = self.mode
        if mode == "override" and not self.override_advertised() \
                and "override-unadvertised" not in self.bugs:
            self.log.write("reference client: the agent does not advertise override; "
                           "appending instead\n")
            mode = "append"
        content: list[dict[str, Any]] = [{"type": "text", "text": self.prompt_text}]
        if "image-block" in self.bugs:
            content.append({"type": "image", "mimeType": "image/png", "data": _PNG})
        return {"mode": mode, "content": content}

    def with_prompt(self, params: dict[str, Any], sp: dict[str, Any] | None, *,
                    reattach: bool) -> dict[str, Any]:
        """``params`` with the prompt put where it goes."""
        if "legacy-meta-only" in self.bugs:
            if self.prompt_text:  # BUG(legacy-meta-only): to every agent, like acpx 0.19
                params["_meta"] = {"systemPrompt": {"append": self.prompt_text}}
            return params
        if reattach and sp is not None:
            if "no-resend" in self.bugs:
                return params
            if sp["mode"] == "override" and not self.override_advertised() \
                    and "override-unadvertised" not in self.bugs:
                # This connection no longer offers override: the gate's MUST NOT comes
                # before re-sending (a SHOULD), and an append would be another prompt.
                self.log.write("reference client: the agent no longer advertises override; "
                               "not re-sending the session's prompt\n")
                return params
            if "empty-content" in self.bugs:
                sp = {"mode": sp["mode"], "content": []}
            elif "changed-on-reattach" in self.bugs:
                sp = {"mode": sp["mode"],
                      "content": [*sp["content"], {"type": "text", "text": "(resumed)"}]}
        if sp is not None and (self.prompt_capability() is not None
                               or "unadvertised-prompt" in self.bugs):
            # BUG(string-prompt): the text alone, as an earlier draft of the RFD had it
            params["systemPrompt"] = self.prompt_text if "string-prompt" in self.bugs else sp
        return params

    # -- requests ----------------------------------------------------------------------------

    def connect(self) -> Connection:
        conn = Connection(self.agent, self.log)
        self.conn = conn
        if "new-before-initialize" in self.bugs:
            with contextlib.suppress(RpcFailed):  # BUG(new-before-initialize)
                conn.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        result = conn.request("initialize", {
            "protocolVersion": self.offer,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                   "terminal": False},
            "clientInfo": {"name": CLIENT_NAME, "version": CLIENT_VERSION},
            **({"info": {"name": CLIENT_NAME, "version": CLIENT_VERSION}, "capabilities": {}}
               if self.offer >= 2 else {}),
        })
        if not isinstance(result, dict):
            raise ClientError("initialize answered no object")
        version = result.get("protocolVersion")
        if version not in (1, 2) or version > self.offer:
            raise ClientError(f"the agent answered protocol version {version!r}, which this "
                              "client does not speak")
        self.init, self.version = result, version
        return conn

    def new_session(self) -> tuple[str, dict[str, Any] | None]:
        assert self.conn is not None
        sp = self.new_prompt()
        params = self.with_prompt({"cwd": self.cwd, "mcpServers": []}, sp, reattach=False)
        result = self.conn.request("session/new", params)
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str):
            raise ClientError("session/new answered no sessionId")
        return sid, sp

    def reattach(self, sid: str, sp: dict[str, Any] | None) -> None:
        """Load the session (v1 with loadSession; v2: resume from the start), else resume
        it; :class:`ClientError` when the agent offers neither."""
        assert self.conn is not None
        params = self.with_prompt({"sessionId": sid, "cwd": self.cwd, "mcpServers": []}, sp,
                                  reattach=True)
        if self.can("load"):
            self.conn.request("session/load", params)
        elif self.version >= 2:
            self.conn.request("session/resume", {**params, "replayFrom": {"type": "start"}})
        elif self.can("resume") or "resume-ungated" in self.bugs:
            self.conn.request("session/resume", params)
        else:
            raise ClientError("the agent advertises neither session/load nor session/resume: "
                              "cannot reattach the session")

    def prompt(self, sid: str, text: str) -> str:
        assert self.conn is not None
        self.conn.updates.clear()  # v2: a reattach's idle snapshot is not this turn's end
        result = self.conn.request("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": text}]})
        if self.version >= 2:
            return self.conn.wait_idle(sid)
        return str(result.get("stopReason")) if isinstance(result, dict) else "?"

    # -- commands ----------------------------------------------------------------------------

    def run(self, command: str, args: list[str]) -> int:
        self.connect()
        assert self.conn is not None
        if command == "session":
            sid, sp = self.new_session()
            self.say(f"session {sid}: {self.prompt(sid, 'Hello.')}")
            try:
                self.reattach(sid, sp)
                self.say(f"reattached {sid}: {self.prompt(sid, 'Still there?')}")
            except ClientError as e:
                self.say(f"not reattached: {e}")
            if self.can("fork"):
                params = self.with_prompt({"sessionId": sid, "cwd": self.cwd,
                                           "mcpServers": []}, sp, reattach=True)
                result = self.conn.request("session/fork", params)
                fork = result.get("sessionId") if isinstance(result, dict) else None
                if isinstance(fork, str):
                    self.say(f"fork {fork}: {self.prompt(fork, 'And you?')}")
            if self.can("close"):
                self.conn.request("session/close", {"sessionId": sid})
            return 0
        if command == "new":
            sid, sp = self.new_session()
            self.save({"sessionId": sid, "cwd": self.cwd, "systemPrompt": sp})
            self.say(f"session {sid}")
            return 0
        if command == "prompt":
            saved = self.load_state()
            self.cwd = saved["cwd"]
            sid, sp = saved["sessionId"], saved.get("systemPrompt")
            self.reattach(sid, sp if isinstance(sp, dict) else None)
            self.say(f"session {sid}: {self.prompt(sid, ' '.join(args) or 'Hello.')}")
            return 0
        if command == "list":
            if not self.can("list"):
                raise ClientError("the agent does not advertise session/list")
            result = self.conn.request("session/list", {})
            for s in (result or {}).get("sessions", []):
                self.say(str(s.get("sessionId")))
            return 0
        raise ClientError(f"unknown command {command!r}")

    def say(self, line: str) -> None:
        print(line, flush=True)

    def save(self, data: dict[str, Any]) -> None:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        self.state.write_text(json.dumps(data), encoding="utf-8")

    def load_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ClientError(f"no session stored in {self.state}: run `new` first") from None
        if not isinstance(data, dict) or not isinstance(data.get("sessionId"), str) \
                or not isinstance(data.get("cwd"), str):
            raise ClientError(f"{self.state} holds no session")
        return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_fuzz.reference_client",
        description="A correct ACP client for systemPrompt, with optional planted bugs. "
                    "Starts the agent given by --agent (default: $ACP_FUZZ_AGENT).")
    parser.add_argument("--agent", metavar="CMD", default=os.environ.get("ACP_FUZZ_AGENT"),
                        help="the agent's command line (split like a shell line)")
    parser.add_argument("--bug", choices=sorted(BUGS), action="append", default=[],
                        help="plant a defect (repeatable): " + "; ".join(
                            f"{k}: {v}" for k, v in sorted(BUGS.items())))
    parser.add_argument("--system-prompt", default=DEFAULT_PROMPT, metavar="TEXT",
                        help="the session's system prompt ('' for none)")
    parser.add_argument("--mode", choices=("append", "override"), default="append")
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=2,
                        help="the ACP version offered (it speaks what the agent answers)")
    parser.add_argument("--state", type=Path, default=None, metavar="FILE",
                        help="where `new` stores the session for `prompt` (default: "
                             "$HOME/.acp-fuzz-reference-client/session.json)")
    parser.add_argument("command", nargs="?", default="session", choices=COMMANDS)
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    if not args.agent:
        parser.error("no agent: give --agent CMD or set $ACP_FUZZ_AGENT")
    agent = shlex.split(args.agent)
    state = args.state or Path.home() / ".acp-fuzz-reference-client" / "session.json"
    client = Client(agent, bugs=set(args.bug), prompt_text=args.system_prompt,
                    mode=args.mode, offer=args.protocol, state=state, cwd=os.getcwd(),
                    log=sys.stderr)
    try:
        return client.run(args.command, args.args)
    except ClientError as e:
        sys.stderr.write(f"reference client: {e}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if client.conn is not None:
            client.conn.close()
