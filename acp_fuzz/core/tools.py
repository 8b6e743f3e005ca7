"""The tools a model request offers, by name, per model API (pure).

The gateway records every request body whole; this reads the tool definitions out of it:

* OpenAI Chat Completions: ``tools[].function.name`` (``tools[].name`` for a bare one);
* OpenAI Responses: ``tools[].name`` for a function, ``tools[].server_label`` prefixed
  ``mcp:`` for a remote MCP server, else the tool's ``type`` (``web_search``, ...);
* Anthropic Messages: ``tools[].name``;
* Gemini: ``tools[].functionDeclarations[].name`` (or ``function_declarations``), else the
  key of a built-in tool (``googleSearch``, ``codeExecution``).

A body of any other shape offers no tool the harness can name. Everything is bounded: a
request is the agent's, and may hold anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_TOOLS", "tool_names"]

#: At most this many tools are read from one request.
MAX_TOOLS = 512


def tool_names(api: str, body: Any) -> frozenset[str]:
    """The names of the tools ``body`` (a request of ``api``) offers the model."""
    tools = body.get("tools") if isinstance(body, Mapping) else None
    if not isinstance(tools, list):
        return frozenset()
    out: set[str] = set()
    for tool in tools[:MAX_TOOLS]:
        if not isinstance(tool, Mapping):
            continue
        if api == "gemini":
            out |= _gemini(tool)
        elif api == "openai.responses" and tool.get("type") not in (None, "function"):
            label = tool.get("server_label")
            out.add(f"mcp:{label}" if tool.get("type") == "mcp" and isinstance(label, str)
                    else str(tool.get("type"))[:128])
        else:
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")
            if isinstance(name, str):
                out.add(name[:256])
    return frozenset(out)


def _gemini(tool: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key in ("functionDeclarations", "function_declarations"):
        decls = tool.get(key)
        if isinstance(decls, list):
            out |= {d["name"][:256] for d in decls[:MAX_TOOLS]
                    if isinstance(d, Mapping) and isinstance(d.get("name"), str)}
    if not out:
        out |= {str(k)[:128] for k in list(tool)[:16]
                if k not in ("functionDeclarations", "function_declarations")}
    return out
