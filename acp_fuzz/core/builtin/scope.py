"""What a prompt must not change beside the instructions (pure): ``scope.tools-changed``, the
tools a session's model requests offer, and ``scope.config-changed``, the modes and config
options its ``session/new`` answer offers, compared between sessions made with an ``append``
or ``override`` prompt and sessions made without one, in the same run.

The RFD: override "only changes the instructions the agent itself authors: it does not change
tool availability, MCP servers, permissions, or session configuration" (MUST under override,
SP-AGENT-OVERRIDE-SCOPE-DEF, spelled out as SP-AGENT-OVERRIDE-MUST; SHOULD under append,
acp-fuzz's reading ACPFUZZ-APPEND-SCOPE-SHOULD). A session whose mode or model was switched,
whose state is unknown, or whose prompt is not settled is not compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.builtin.capabilities import without_meta
from acp_fuzz.core.builtin.evidence import clip
from acp_fuzz.core.checks import Judge, builtin
from acp_fuzz.core.history import Event
from acp_fuzz.core.ops import CARRIES_PROMPT
from acp_fuzz.core.sessions import IDS, ModelRequest, Reply, SessionModel
from acp_fuzz.core.tools import tool_names

__all__ = ["LEVELS", "config_of", "prompt_mode", "scope"]

#: The severity and rule of a change under each prompt mode.
LEVELS = {"override": ("MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF"),
          "append": ("SHOULD", "ACPFUZZ-APPEND-SCOPE-SHOULD")}


@dataclass
class _Seen:
    """The sessions made without a prompt so far: the tool sets of their turn requests by
    (API, turn number, whether the session has MCP servers), and the configuration their
    ``session/new`` answers offered."""

    tools: dict[tuple[str, int, bool], list[frozenset[str]]] = field(default_factory=dict)
    #: The sessions an accepted new, load, resume or fork gave acp-fuzz's MCP server (a fork
    #: also those whose source had it). An agent may offer tools of its own for any MCP
    #: server (codex-acp adds list_mcp_resources, read_mcp_resource, ...): a session with
    #: one is compared only with sessions that have one too, never with a plain one.
    mcp: set[str] = field(default_factory=set)
    config: list[str] = field(default_factory=list)
    #: The last ``session/new`` answer's configuration (its event), until its step's reply.
    answer: tuple[int, str] | None = None


@builtin(
    "scope.tools-changed", severity="MUST", rule="SP-AGENT-OVERRIDE-SCOPE-DEF",
    summary="a session with an override (append: SHOULD) prompt offers the model other tools than "
            "the sessions without a prompt",
    also=[
        ("scope.config-changed", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF",
         "session/new with an override (append: SHOULD) prompt answers other modes or config "
         "options than without a prompt"),
    ],
)
def scope(j: Judge, ev: Event) -> None:
    """Judge each turn request's tools, and each accepted ``session/new``'s configuration
    (its answer is kept until the step's reply says how the prompt was classified)."""
    c = j.change
    if isinstance(c, ModelRequest) and c.route == "turn" and c.session is not None:
        _tools(j, c, ev.seq)
    elif isinstance(c, Reply) and c.outcome == "ok" and c.op in CARRIES_PROMPT:
        _mcp(j.memo(_Seen), c)
        if c.op == "new":
            _config(j, c)
    elif ev.kind == "acp" and ev.data.get("dir") != "send" and not ev.data.get("error"):
        msg = ev.data.get("msg")
        if isinstance(msg, Mapping) and isinstance(msg.get("id"), IDS) \
                and isinstance(msg.get("result"), Mapping) \
                and j.tracker.requests.get(msg["id"]) == "session/new":
            j.memo(_Seen).answer = (ev.seq, config_of(msg["result"]))


def prompt_mode(m: SessionModel) -> str | None:
    """``none``, ``append`` or ``override``: the prompt the session settled on; ``None``
    while it may use more than one, or when it is not compared (switched, unknown state)."""
    if m.tainted or m.mode_switched or len(m.candidates) != 1:
        return None
    p = m.candidates[0].prompt
    return "none" if p is None else p.mode if p.mode in LEVELS else None


def _tools(j: Judge, c: ModelRequest, seq: int) -> None:
    m = c.session
    assert m is not None
    mode = prompt_mode(m)
    x = c.x
    if mode is None or x.turn is None:
        return
    # acp-fuzz's own MCP server's tools are each session's canary: mcp.* judges them.
    tools = frozenset(t for t in tool_names(x.api, x.body) if "acpfuzz_mcp_" not in t)
    seen = j.memo(_Seen)
    key = (x.api, x.turn, x.session in seen.mcp)
    if mode == "none":
        seen.tools.setdefault(key, []).append(tools)
        return
    plain = seen.tools.get(key)
    if not plain:
        return
    severity, rule = LEVELS[mode]
    j.judge_as("scope.tools-changed", rule)
    dropped = sorted(frozenset.intersection(*plain) - tools)
    added = sorted(tools - frozenset.union(*plain))
    if dropped or added:
        what = "; ".join(s for s in (f"without {', '.join(dropped)}" if dropped else "",
                                     f"with {', '.join(added)} added" if added else "") if s)
        j.report_as("scope.tools-changed",
                    f"session {x.session} ({mode}): its turn {x.turn} offers the model other "
                    f"tools than the sessions without a prompt ({what})",
                    severity=severity, rule=rule, session=x.session, model_event=seq,
                    dropped=clip(dropped), added=clip(added), tools=clip(sorted(tools)))


def _mcp(seen: _Seen, c: Reply) -> None:
    source = c.args.get("session")
    if c.target is not None and (c.args.get("mcp") or (
            c.op == "fork" and isinstance(source, str) and source in seen.mcp)):
        seen.mcp.add(c.target)


def config_of(result: Mapping[str, Any]) -> str:
    """A ``session/new`` answer's configuration, as one comparable text: its ``modes`` and
    ``configOptions`` (``_meta`` left out)."""
    return json.dumps(without_meta({"modes": result.get("modes"),
                                    "configOptions": result.get("configOptions")}, 0),
                      sort_keys=True, default=repr)


def _config(j: Judge, c: Reply) -> None:
    seen = j.memo(_Seen)
    if seen.answer is None:
        return
    seq, now = seen.answer
    seen.answer = None
    if c.kind in ("omitted", "null"):
        seen.config.append(now)
        return
    sp = c.args.get("systemPrompt")
    mode = sp.get("mode") if isinstance(sp, Mapping) else None
    if c.kind != "valid" or mode not in LEVELS or len(set(seen.config)) != 1:
        return  # no settled configuration of sessions without a prompt to compare with
    severity, rule = LEVELS[str(mode)]
    j.judge_as("scope.config-changed", rule)
    handle = c.args.get("session")
    if now != seen.config[0]:
        j.report_as("scope.config-changed",
                    f"session {handle} ({mode}): session/new offers other modes or config "
                    "options than it does for a session without a prompt",
                    severity=severity, rule=rule,
                    session=handle if isinstance(handle, str) else None, acp_event=seq,
                    without_prompt=clip(json.loads(seen.config[0])), now=clip(json.loads(now)))
