"""A small ACP client built on the Python SDK (``agent-client-protocol``, module ``acp``).

acp-fuzz runs it (``tests/realagent/test_sdk_clients.py``, ``docs/findings.md``) to see what a
client built on the SDK puts on the wire. It is written the way the SDK's own example
(``examples/client.py``) is: a :class:`acp.Client` for the agent's calls, the SDK's stream
helper ``acp.spawn_agent_process`` and its ``ClientSideConnection`` methods, with the care an
editor should take over the systemPrompt RFD::

    python client.py [--via raw|kwargs|typed] [--override] [--system-prompt TEXT]
                     [session|new|reattach] PROMPT...

The agent is the command line in ``$ACP_FUZZ_AGENT`` (split like a shell line). ``session``
(the default): initialize, ``session/new`` (with the system prompt where
``sessionCapabilities.systemPrompt`` is advertised; ``override`` only with ``--override`` and
only where ``mode.override`` is advertised), prompt; then, as after an editor restart, a second
agent process: initialize, reattach (``session/load`` where ``loadSession`` is advertised, else
``session/resume`` where ``sessionCapabilities.resume`` is), re-sending the prompt the session
was created with, prompt again, and ``session/close`` where advertised. ``new`` does the first
half and keeps the session in ``$HOME/.acp-fuzz-py-sdk-client.json``; ``reattach`` the second.

The SDK (0.12.1) has no ``systemPrompt`` anywhere in its schema: its pydantic models drop
``sessionCapabilities.systemPrompt`` from the ``initialize`` answer, and the typed lifecycle
methods put any extra keyword argument into ``_meta``. So ``--via`` says how the prompt goes:

``raw`` (the default: what a careful client has to do)
    the capability read from the raw ``initialize`` answer (a stream observer, the public
    ``observers`` argument of the SDK's connection), and the lifecycle requests that carry the
    field sent as raw requests on the SDK's connection; everything else typed.
``kwargs``
    the same gating, but the prompt passed as ``systemPrompt=`` to the typed ``new_session``,
    ``load_session`` and ``resume_session``, as their ``**kwargs`` invite: the SDK sends it as
    ``_meta.systemPrompt``.
``typed``
    the SDK's typed API only: the capability is looked for in the typed answer, where 0.12.1
    never has it, so no prompt is ever sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentMessageChunk,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
    TextContentBlock,
)

STATE = Path.home() / ".acp-fuzz-py-sdk-client.json"
NAME = "acp-fuzz-py-sdk-client"


class PrintingClient(Client):
    """The agent's side of the conversation: print the agent's text, refuse the rest."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            print(update.content.text, flush=True)

    async def request_permission(self, session_id: str, tool_call: Any, options: Any,
                                 **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


class Agent:
    """One agent process and the SDK connection to it, with the raw initialize answer."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.raw_init: dict[str, Any] = {}

    def observe(self, event: StreamEvent) -> None:
        msg = event.message
        # The SDK numbers requests from 0, and initialize is the first.
        if event.direction is StreamDirection.INCOMING and msg.get("id") == 0 \
                and "method" not in msg and isinstance(msg.get("result"), dict):
            self.raw_init = msg["result"]

    async def initialize(self, conn: Any) -> InitializeResponse:
        return await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
                terminal=False),
            client_info=Implementation(name=NAME, version="1.0.0"))

    def advertised_prompt(self, init: InitializeResponse) -> Any:
        """``sessionCapabilities.systemPrompt`` as this client can see it, or None."""
        sess = init.agent_capabilities.session_capabilities if init.agent_capabilities else None
        typed = getattr(sess, "system_prompt", None)  # a later SDK may model it
        if typed is not None or self.args.via == "typed":
            return typed
        caps = self.raw_init.get("agentCapabilities") or {}
        return (caps.get("sessionCapabilities") or {}).get("systemPrompt")

    def system_prompt(self, init: InitializeResponse) -> dict[str, Any] | None:
        advertised = self.advertised_prompt(init)
        if advertised is None:
            return None
        mode = advertised.get("mode") if isinstance(advertised, dict) \
            else getattr(advertised, "mode", None)
        override = (mode.get("override") if isinstance(mode, dict)
                    else getattr(mode, "override", None)) if mode is not None else None
        return {"mode": "override" if self.args.override and override is not None else "append",
                "content": [{"type": "text", "text": self.args.system_prompt}]}

    async def lifecycle(self, conn: Any, method: str, params: dict[str, Any],
                        prompt: dict[str, Any] | None) -> Any:
        """``session/new``, ``load`` or ``resume``, with ``prompt`` as --via says."""
        typed = {"session/new": conn.new_session, "session/load": conn.load_session,
                 "session/resume": conn.resume_session}[method]
        if prompt is None:
            return await typed(**params)
        if self.args.via == "kwargs":
            return await typed(**params, systemPrompt=prompt)
        wire = {"cwd": params["cwd"], "mcpServers": [], "systemPrompt": prompt}
        if "session_id" in params:
            wire["sessionId"] = params["session_id"]
        return await conn._conn.send_request(method, wire)  # the SDK has no systemPrompt field

    async def run(self, op: Any) -> Any:
        argv = shlex.split(os.environ.get("ACP_FUZZ_AGENT", ""))
        if not argv:
            raise SystemExit(f"{NAME}: $ACP_FUZZ_AGENT is not set")
        async with spawn_agent_process(PrintingClient(), *argv,
                                       observers=[self.observe]) as (conn, _proc):
            return await op(conn, await self.initialize(conn))


async def create(args: argparse.Namespace) -> dict[str, Any]:
    agent = Agent(args)

    async def op(conn: Any, init: InitializeResponse) -> dict[str, Any]:
        prompt = agent.system_prompt(init)
        cwd = os.getcwd()
        new = await agent.lifecycle(conn, "session/new", {"cwd": cwd, "mcp_servers": []}, prompt)
        sid = new["sessionId"] if isinstance(new, dict) else new.session_id
        await conn.prompt(session_id=sid, prompt=[text_block(args.text)])
        return {"sessionId": sid, "cwd": cwd, "systemPrompt": prompt}

    result: dict[str, Any] = await agent.run(op)
    return result


async def reattach(state: dict[str, Any], args: argparse.Namespace) -> bool:
    agent = Agent(args)

    async def op(conn: Any, init: InitializeResponse) -> bool:
        caps = init.agent_capabilities
        sess = caps.session_capabilities if caps else None
        # Re-send the session's own prompt (SP-CLIENT-RESEND-SHOULD), where it is advertised.
        prompt = state["systemPrompt"] if agent.advertised_prompt(init) is not None else None
        params = {"session_id": state["sessionId"], "cwd": state["cwd"], "mcp_servers": []}
        if caps is not None and caps.load_session:
            await agent.lifecycle(conn, "session/load", params, prompt)
        elif sess is not None and sess.resume is not None:
            await agent.lifecycle(conn, "session/resume", params, prompt)
        else:
            print("the agent can neither load nor resume a session", file=sys.stderr)
            return False
        await conn.prompt(session_id=state["sessionId"], prompt=[text_block(args.text)])
        if sess is not None and sess.close is not None:
            await conn.close_session(session_id=state["sessionId"])
        return True

    done: bool = await agent.run(op)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=NAME)
    p.add_argument("--via", choices=("raw", "kwargs", "typed"), default="raw")
    p.add_argument("--override", action="store_true")
    p.add_argument("--system-prompt",
                   default="You are a careful assistant. Answer in one short sentence.")
    p.add_argument("words", nargs="*")
    args = p.parse_args(argv)
    words = list(args.words)
    command = words.pop(0) if words and words[0] in ("session", "new", "reattach") else "session"
    args.text = " ".join(words) or "hello"
    if command == "new":
        STATE.write_text(json.dumps(asyncio.run(create(args))), encoding="utf-8")
    elif command == "reattach":
        asyncio.run(reattach(json.loads(STATE.read_text(encoding="utf-8")), args))
    else:
        state = asyncio.run(create(args))
        asyncio.run(reattach(state, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
