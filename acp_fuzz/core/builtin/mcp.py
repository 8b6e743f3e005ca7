"""The MCP servers a session names (pure): ``mcp.tool-missing``, the tool of acp-fuzz's MCP
server that a session named missing from its turn under an append or override prompt, while
sessions without a prompt show theirs; ``mcp.tool-leak``, another session's MCP tool in a
session's model request.

A step that says ``"mcp": true`` names acp-fuzz's stdio MCP server, whose one tool is the
session's canary (``acpfuzz_mcp_<hex>``, recorded in the step as ``mcp_tool``). The servers
are the session's own: a load or resume that names none leaves it none owed; a fork owes the
tool its own request named, and may hold its source's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from acp_fuzz.core.builtin.evidence import clip
from acp_fuzz.core.builtin.scope import LEVELS, prompt_mode
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import CARRIES_PROMPT
from acp_fuzz.core.sessions import ModelRequest, Reply
from acp_fuzz.core.tools import tool_names

__all__ = ["MCP_TOOL_PREFIX", "mcp"]

#: What every tool name of acp-fuzz's MCP server starts with (an agent may prefix it:
#: ``mcp__acp-fuzz__acpfuzz_mcp_...``).
MCP_TOOL_PREFIX = "acpfuzz_mcp_"


@dataclass
class _Named:
    """The tools of acp-fuzz's MCP server by session: the one each owes now (its last
    accepted new, load, resume or fork named it), every one it may hold, and every one a
    step named (accepted or not)."""

    owed: dict[str, str | None] = field(default_factory=dict)
    own: dict[str, set[str]] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)
    step_tool: str | None = None
    #: A session without a prompt showed its server's tool: the agent passes them on.
    shown_plain: bool = False


@builtin(
    "mcp.tool-missing", severity="MUST", rule="SP-AGENT-OVERRIDE-SCOPE-DEF",
    summary="the tool of an MCP server a session named is missing from its turn under override "
            "(append: SHOULD), while sessions without a prompt get theirs",
    also=[
        ("mcp.tool-leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST",
         "a session's model request offers the tool of an MCP server another session named"),
    ],
)
def mcp(j: Judge, ev: Event) -> None:
    """Follow which session named which tool; judge each model request tied to a session."""
    seen = j.memo(_Named)
    c = j.change
    if ev.kind == "step":
        tool = ev.data.get("mcp_tool")
        args = ev.data.get("args")
        seen.step_tool = tool if isinstance(tool, str) else None
        if seen.step_tool is not None and isinstance(args, Mapping):
            handle = args.get("new", args.get("session"))
            if isinstance(handle, str):
                seen.named[handle] = seen.step_tool
    elif isinstance(c, Reply) and c.outcome == "ok" and c.op in CARRIES_PROMPT:
        _accepted(seen, c)
    elif isinstance(c, ModelRequest) and c.session is not None and c.route != "untied":
        _judge(j, seen, c, ev.seq)


def _accepted(seen: _Named, c: Reply) -> None:
    handle = c.target
    if handle is None:
        return
    tool = seen.step_tool if c.args.get("mcp") else None
    seen.owed[handle] = tool
    own = seen.own.setdefault(handle, set())
    if tool is not None:
        own.add(tool)
    source = c.args.get("session")
    if c.op == "fork" and isinstance(source, str):
        own |= seen.own.get(source, set())


def _judge(j: Judge, seen: _Named, c: ModelRequest, seq: int) -> None:
    x = c.x
    handle = x.session
    assert handle is not None
    hay = "\n".join(sorted(tool_names(x.api, x.body))) + "\n" + c.everything
    others = {h: t for h, t in seen.named.items() if h != handle
              and t not in seen.own.get(handle, set())}
    if others:
        j.judge_as("mcp.tool-leak")
        hit = next(((h, t) for h, t in sorted(others.items()) if t in hay), None)
        if hit is not None:
            kind = "side request" if x.side else "model request"
            j.report_as("mcp.tool-leak", f"session {handle}'s {kind} offers session {hit[0]}'s "
                        f"MCP tool {hit[1]}", session=handle, foreign_session=hit[0],
                        model_event=seq, tool=hit[1])
    tool = seen.owed.get(handle)
    mode = prompt_mode(c.session) if c.session is not None else None
    if c.route != "turn" or tool is None or mode is None:
        return
    if mode == "none":
        seen.shown_plain = seen.shown_plain or tool in hay
        return
    if not seen.shown_plain:
        return  # no session without a prompt showed the agent passing MCP tools on
    severity, rule = LEVELS[mode]
    j.judge_as("mcp.tool-missing", rule)
    if tool not in hay:
        j.report_as("mcp.tool-missing",
                    f"session {handle} ({mode}): its turn offers the model no tool of the MCP "
                    f"server it named ({tool}), which sessions without a prompt get",
                    severity=severity, rule=rule, session=handle, model_event=seq, tool=tool,
                    tools=clip(sorted(tool_names(x.api, x.body))))
