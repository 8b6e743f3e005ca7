"""The reference agent: JSON-RPC dispatch, validation, lifecycle and the model call.

Read :mod:`acp_fuzz.reference_agent` (the package docstring) first: it lists what the agent
does and every ``--bug``. In this file the correct behaviour is the main path; each planted
defect is a small branch marked ``# BUG(<name>)`` so that it can be read (and deleted) on its own.

Rule ids such as ``SP-AGENT-ERROR-NOSIDEEFFECT-MUST`` refer to the acp-fuzz protocol reference.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import http.client
import json
import os
import select
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.version import __version__
from . import mcp
from .store import Session, Store, SystemPrompt

AGENT_NAME = "acp-fuzz-reference-agent"
AGENT_VERSION = __version__  # acp-fuzz's own (acp_fuzz.core.version imports nothing)
MODEL = "reference-model"
MODEL_TIMEOUT_S = 30.0

# The agent's own instructions. Under "append" the client text follows them after a blank line;
# under "override" the client text replaces ALL of them, including the working-directory line
# (SP-AGENT-OVERRIDE-DOC-SHOULD: this agent keeps nothing of its own under override).
DEFAULT_INSTRUCTIONS = (
    "You are the acp-fuzz reference agent, a careful coding assistant.\n"
    "Answer the user's request directly and concisely.\n"
    "Prefer small, reviewable changes and explain any risk you notice.\n"
    "Never invent files, commands or results you have not seen."
)


def modes_of(session: Session) -> dict[str, Any]:
    return {"currentModeId": session.mode, "availableModes": [dict(m) for m in MODES]}


def config_of(session: Session, protocol: int = 1) -> list[dict[str, Any]]:
    # v2 names the option's id ``configId``.
    option: dict[str, Any] = {"configId" if protocol >= 2 else "id": "model", "name": "Model",
                              "category": "model", "type": "select",
                              "currentValue": session.model,
                              "options": [{"value": m, "name": m} for m in MODELS]}
    return [option]


def default_instructions(cwd: str) -> str:
    """The agent's own instructions for a session: the fixed text plus one environment line.

    The environment line differs per session, which is deliberate: a harness that learns an
    agent's baseline prompt must tolerate dynamic parts.
    """
    return f"{DEFAULT_INSTRUCTIONS}\n\nWorking directory: {cwd}"


#: The project instruction file the agent reads from a session's working directory, and the
#: most of it it reads.
PROJECT_FILE = "AGENTS.md"
MAX_PROJECT_FILE = 64 * 1024


def project_instructions(cwd: str) -> str:
    """``AGENTS.md`` of the working directory, as the agent adds it to its defaults (a
    blank line, a heading, the text), or nothing: no such file, or not readable. Under
    override it goes with the defaults (the agent keeps nothing, SP-AGENT-OVERRIDE-DOC-SHOULD)."""
    try:
        with open(os.path.join(cwd, PROJECT_FILE), encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_PROJECT_FILE).strip()
    except OSError:
        return ""
    return f"\n\nProject instructions ({PROJECT_FILE}):\n{text}" if text else ""


# The defects ``--bug`` can plant (repeat it to plant several; each is its own branch). The
# package docstring describes each one with its minimal reproduction.
BUGS: dict[str, str] = {
    "retry-drops-prompt": "a model request retried after a failure (5xx, 429, a connection "
    "lost, an answer cut or not JSON) is rebuilt without the system message",
    "fault-ends-silently": "a failed model request ends the turn with end_turn and nothing "
    "said, instead of a retry or an error",
    "leak": "the most recently set client prompt is used for every session",
    "lost-after-restart": "after a restart, load/resume ignore both the re-sent and stored prompt",
    "duplicate-on-resume": "a prompt re-sent on load/resume is appended to the stored one",
    "user-turn": "the client prompt is prefixed to the user message, not put in the system slot",
    "accept-unknown-mode": "unknown modes are accepted and treated as append",
    "replace-as-override": "the mode spelling \"replace\" is accepted and treated as override "
    "(every other unknown mode is rejected)",
    "hang-on-empty-content": "a systemPrompt whose content is an empty array is never answered "
    "(the request hangs; the agent goes on serving the others)",
    "side-effect-before-validation": "session/new persists the session before validating",
    "crash-on-image": "an image block in systemPrompt makes the process exit(1)",
    "huge-prompt-crash": "a systemPrompt of more than 4 MiB of text makes the process exit(1) "
    "(an error answer is what it owes instead)",
    "override-keeps-default": "override behaves like append",
    "fork-drops-prompt": "forks always use the default instructions",
    "fork-corrupts-source": "a fork's re-sent prompt is written onto its source session too",
    "drop-last-block": "the last block of a multi-block prompt is lost",
    "truncate-64k": "the client text is truncated to 65536 characters",
    "lost-override-after-restart": "after a restart, a load or resume re-sending an override "
    "prompt is accepted and the session runs on the built-in defaults",
    "vendor-meta-wins": "a vendor _meta.systemPrompt next to the standard systemPrompt silently "
    "replaces it",
    "sdk-options-win": "a _meta.claudeCode.options.systemPrompt next to an accepted standard "
    "systemPrompt silently replaces it (claude-agent-acp 0.101.0)",
    "unstored-before-turn": "a session is stored with its first turn: before it, a load or "
    "resume changing its systemPrompt is refused with -32602, after a close one re-sending it "
    "too, and one without a prompt is accepted but its next turn never answered (codex-acp "
    "2.6.0)",
    "tiny-baseline": "the defaults are a billing header and a one-line SDK identity, both kept "
    "under override (a quirk the oracles must not call MUST)",
    "history-lost-after-restart": "a session loaded or resumed in a new process keeps its "
    "prompt but not its conversation (the transcript is not persisted)",
    "load-erases-session": "the first session/load of a session with a conversation erases "
    "the stored transcript, then fails with 'No previous sessions found' (gemini-cli 0.61.0, "
    "within the minute of its creation); later loads work",
    "delete-leaves-prompt": "a deleted session's prompt stays behind as the default of its "
    "working directory: the next session made there without a prompt runs on it",
    "mode-drops-prompt": "session/set_mode rebuilds the session's options from the mode's "
    "preset, and the client prompt is lost",
    "model-switch-drops-prompt": "session/set_config_option of the model starts the session "
    "over on the new model, without the client prompt",
    "title-drops-prompt": "session/set_title rewrites the stored session from its listing "
    "entry, which has no client prompt",
    "status-drops-prompt": "session/status reloads the session from its listing entry, which "
    "has no client prompt (a query with a side effect)",
    "moved-cwd-drops-prompt": "a session loaded or resumed in another directory starts over "
    "there: the prompt the request re-sent is accepted but not used",
    "version-above-offer": "initialize answers protocolVersion one above the version the "
    "client offered (a version it was not offered), then speaks v2",
    "busy-resume-drops-prompt": "a load or resume that arrives while a turn of the session "
    "runs is accepted, but the session comes out of it without its client prompt",
    "compaction-drops-prompt": "after a compaction the session's system prompt is rebuilt "
    "from the built-in defaults only: the client prompt is gone (implies --variant compacting)",
    "compaction-keeps-stale": "a changed prompt is held back until the next compaction, as "
    "under --variant defer-until-compaction, but the compaction keeps the old prompt: the "
    "change is never applied",
    "refuse-override": "a valid override systemPrompt is refused with -32602, though the agent "
    "advertises mode.override",
    "append-drops-defaults": "append behaves like override: the client text alone is the "
    "system message",
    "cancel-errors": "a prompt whose session/cancel the agent sees is answered with -32603 "
    "instead of the stop reason cancelled",
    "cancel-ignored-mid-turn": "a session/cancel that arrives while the model is answering is "
    "not looked for: the turn ends end_turn (one that came before the model call still stops "
    "it)",
    "shared-prompt-slot": "the client prompt of the turn running is kept in one process-wide "
    "slot that every turn's start overwrites, and a turn stores the slot's prompt as its "
    "session's when it ends: a turn of another session that starts while the model is "
    "answering leaves its prompt to this session from its next turn on",
    "close-keeps-turn": "a session/close that arrives while the model is answering does not "
    "cancel the turn: it ends end_turn, its answer kept",
    "close-drops-turn": "a session/close that arrives while the model is answering ends the "
    "turn without ever answering its session/prompt",
    "cancel-request-unanswered": "a $/cancel_request of the running session/prompt (v1) drops "
    "the request: it is never answered, neither with a result nor with -32800",
    "set-mode-during-turn-unanswered": "a session/set_mode that arrives while the model is "
    "answering a turn of its session is never answered (turns on --variant switches)",
    "set-mode-refused-during-turn": "a session/set_mode that arrives while the model is "
    "answering a turn of its session is refused with -32603 (turns on --variant switches)",
    "second-prompt-unanswered": "a session/prompt of a session that arrives while the model "
    "is answering a turn of that session is never answered (nor run)",
    "cancel-new-unanswered": "a session/new whose $/cancel_request is already in the pipe "
    "is never answered (neither a result nor -32800)",
    "cancel-new-leaves-session": "a session/new whose $/cancel_request is already in the "
    "pipe makes the session (listed), then answers -32800",
    "cancel-load-unanswered": "a session/load, session/resume or session/fork whose "
    "$/cancel_request is already in the pipe is never answered (neither a result nor -32800)",
    "cancel-fork-leaves-session": "a session/fork whose $/cancel_request is already in the "
    "pipe makes the copy (listed), then answers -32800",
    "cancel-load-keeps-prompt": "a session/load or session/resume whose $/cancel_request is "
    "already in the pipe applies the prompt it carries, then answers -32800",
    "fork-during-turn-unanswered": "a session/fork of a session that arrives while the model "
    "is answering a turn of that session is never answered (nor made)",
    "reattach-swaps-running-prompt": "a session/load or session/resume of another session "
    "that arrives while the model is answering a turn leaves the loaded session's prompt to "
    "the running session from its next turn on",
    "set-config-during-turn-unanswered": "a session/set_config_option that arrives while the "
    "model is answering a turn of its session is never answered (turns on --variant switches)",
    "delete-drops-turn": "a session/delete that arrives while the model is answering a turn "
    "of its session ends the turn without ever answering its session/prompt",
    "turn-fails-on-64k": "a client text over 65536 characters is accepted, and every turn of "
    "the session then fails with -32603",
    "cold-load-keeps-old": "after a restart, a load or resume that changes the prompt is "
    "accepted, and the stored prompt stays in use",
    "html-escapes-prompt": "the client text is HTML-escaped (&, <, >, quotes) on its way into "
    "the system message",
    "vendor-meta-also": "a vendor _meta.systemPrompt next to the standard systemPrompt is "
    "appended to it",
    "skip-unsupported-blocks": "non-text blocks (image, audio, resource, ...) in systemPrompt "
    "are accepted and skipped",
    "accept-draft-string": "a bare string systemPrompt (an earlier draft's shape) is accepted "
    "as append",
    "rejected-text-applied": "a load or resume refused for its systemPrompt has already "
    "added the prompt's text blocks to the session's prompt",
    "refused-reattach-unloads": "a load or resume unloads the session before it validates "
    "the request: refused, it leaves the session unknown to the next turn (-32002)",
    "untied-digest": "each session/new with a prompt sends the model a digest request, tied "
    "to no turn, that holds the client prompt of every session of the process",
    "omit-falls-back-when-talked": "a load or resume that omits the prompt keeps the stored "
    "one for a session without a conversation, and falls back to the defaults for one with",
    "camelcase-stop-reason": "session/prompt answers the stop reason endTurn (not in the "
    "schema) instead of end_turn",
    "escape-changed-prompt": "a prompt that a load or resume changes is HTML-escaped on the "
    "way in (the change path's template autoescapes it)",
    "delete-keeps-live": "session/delete removes the stored session but leaves it loaded: a "
    "later turn of it is still served, with its conversation (pi-acp 0.0.34)",
    "cold-load-new-id": "a session loaded or resumed in a new process before its first turn "
    "is stored again under a new id: session/list shows that id, not the session's (pi-acp "
    "0.0.34, which writes a session only with its first message)",
    "title-from-other-prompt": "a session's first turn titles it (session_info_update, and "
    "session/list shows the title) from the client prompt most recently set in the process, "
    "which may be another session's",
    "replay-prompt-as-user": "session/load (v2: resume replaying from the start) replays the "
    "session's client prompt as a user message before its conversation",
    "override-drops-tools": "a session with an override prompt offers the model its tools "
    "without list_directory",
    "override-drops-mcp-tools": "a session with an override prompt offers the model none of "
    "its MCP servers' tools",
    "mcp-tools-leak": "every session offers the model the tools of the MCP servers named "
    "last in the process, whichever session named them",
    "override-changes-config": "session/new with an override prompt starts the session on "
    "reference-model-mini, not the default model (implies --variant switches)",
    "capabilities-drift-after-restart": "a process that finds sessions stored by an earlier "
    "one leaves fork out of the capabilities it advertises (and still forks)",
    "error-quotes-other-prompt": "every error answer carries, in its data, the client prompt "
    "most recently set in the process (a debugging aid left in), which may be another "
    "session's",
}

#: The tools every turn request offers the model (Chat Completions function tools). The
#: agent never runs them: the fake model answers in text. They are there so that what a
#: prompt must not change (tool availability, SP-AGENT-OVERRIDE-SCOPE-DEF) can be seen.
TOOLS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {
        "name": name, "description": what,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}}
    for name, what in (("read_file", "Read a file of the working directory."),
                       ("list_directory", "List a directory of the working directory.")))

#: The models this agent offers as its ``model`` config option (``configOptions`` in new,
#: load, resume and fork answers; ``session/set_config_option``).
MODELS: tuple[str, ...] = ("reference-model", "reference-model-mini")

#: The session modes this agent offers (``modes`` in new, load, resume and fork answers;
#: ``session/set_mode``). ``plan`` adds an instruction of its own to the defaults, as real
#: agents' plan modes do: a mode may change the default instructions, never the client prompt.
MODES: tuple[dict[str, str], ...] = (
    {"id": "ask", "name": "Ask", "description": "Ask before every change"},
    {"id": "code", "name": "Code", "description": "Edit files in the working directory"},
    {"id": "plan", "name": "Plan", "description": "Describe a plan; change nothing"},
)
PLAN_INSTRUCTION = "Plan mode: describe the change as a numbered plan and do not edit files."

# Correct behaviours the RFD allows, which a harness must not call bugs (``--variant``).
VARIANTS: dict[str, str] = {
    "defer-then-apply": "a changed prompt on a live session is used from the second turn after "
    "the change on (SP-LIFECYCLE-DEFER-MAY)",
    "defer-until-restart": "a changed prompt on a live session is used only once the session is "
    "loaded or resumed in a new process (a change on such a cold load applies at once)",
    "switches": "sessions offer modes (session/set_mode) and a model option "
    "(session/set_config_option); implied by the switch bugs",
    "titles": "the client may retitle sessions (sessionCapabilities.title, session/set_title); "
    "implied by the title bug",
    "status": "the client may ask whether a session is in memory (sessionCapabilities.status, "
    "session/status, UNSTABLE); implied by the status bug",
    "directories": "new, load, resume and fork take additionalDirectories "
    "(sessionCapabilities.additionalDirectories); implied by the directory bug",
    "v1-only": "the agent speaks ACP v1 only: initialize answers protocolVersion 1 to any "
    "offer of 1 or more",
    "busy-refuses": "a load or resume that arrives while a turn of the session runs is refused "
    "(-32000, session busy) and changes nothing",
    "compacting": "the agent compacts a session's conversation into a summary: on the /compact "
    "command it advertises, before the turn after a reply reports 90 % of its context "
    "window used, and when a request gets the context-length error (then it retries once)",
    "forgets-on-restart": "sessions live as long as the agent process: a new process starts "
    "with none, so a load or resume after a restart is refused (-32002) and so is a turn of a "
    "session it does not know (as claude-agent-acp does)",
    "refuses-huge": "a systemPrompt of more than 4 MiB of text is refused (-32602, saying "
    "its size and the most the agent accepts) and changes nothing",
    "defer-until-compaction": "compacting, and a changed prompt on a load or resume is held "
    "back until the session's next compaction, even across a restart (SP-LIFECYCLE-DEFER-MAY)",
}

#: The error a busy session's load or resume gets under ``--variant busy-refuses`` (a server
#: error of JSON-RPC's implementation-defined range).
BUSY = -32000

#: The planted bugs that need ``--variant switches`` (they plant it themselves).
SWITCH_BUGS = frozenset({"mode-drops-prompt", "model-switch-drops-prompt",
                         "override-changes-config", "set-mode-during-turn-unanswered",
                         "set-mode-refused-during-turn", "set-config-during-turn-unanswered"})
#: The planted bugs of a request of a session that arrives while a turn of it runs, by the
#: request's method.
MID_TURN_BUGS = {
    "session/set_mode": frozenset({"set-mode-during-turn-unanswered",
                                   "set-mode-refused-during-turn"}),
    "session/prompt": frozenset({"second-prompt-unanswered"}),
    "session/fork": frozenset({"fork-during-turn-unanswered"}),
    "session/set_config_option": frozenset({"set-config-during-turn-unanswered"}),
}
#: The planted bugs that need ``--variant titles`` (they plant it themselves).
TITLE_BUGS = frozenset({"title-drops-prompt"})
#: The planted bugs that need ``--variant status`` (they plant it themselves).
STATUS_BUGS = frozenset({"status-drops-prompt"})
#: The planted bugs that need ``--variant directories`` (they plant it themselves).
DIRECTORY_BUGS = frozenset({"moved-cwd-drops-prompt"})
#: Longer titles are cut to this many characters (the schema lets an agent normalize).
MAX_TITLE = 256

#: The planted bugs of compaction (they plant ``--variant compacting`` themselves), and the
#: variants that hold a changed prompt back until the next compaction.
COMPACTION_BUGS = frozenset({"compaction-drops-prompt", "compaction-keeps-stale"})
HOLDING = frozenset({"defer-until-compaction", "compaction-keeps-stale"})
#: --variant compacting: the model's context window, and the share of it that a reply's
#: ``usage.prompt_tokens`` may report before the session is compacted (before its next turn).
CONTEXT_WINDOW = 128_000
COMPACT_AT = 0.9
#: The compaction command it advertises (``available_commands_update``) and takes as a turn.
COMPACT_COMMAND = "compact"
COMPACT_DESCRIPTION = "Summarise the conversation to free context"
#: The system text of its summary request (what a profile's ``[[side]]`` rule of kind
#: ``compaction`` recognises), and what the summary is kept under in the conversation.
SUMMARY_INSTRUCTIONS = (
    "acp-fuzz reference agent: summarise the conversation so far. Keep every request, "
    "decision and open question; the summary replaces the conversation."
)
SUMMARY_PREFIX = "Summary of the conversation so far:"
#: What a /compact turn answers.
COMPACTED = "Compacted the conversation into a summary."

# BUG(tiny-baseline): what an adapter on the Claude Agent SDK sends as its default system slot.
TINY_DEFAULTS = (
    f"x-anthropic-billing-header: cc_version={__version__}.ref; cc_entrypoint=reference-agent;\n"
    "You are a Claude agent, built on Anthropic's Claude Agent SDK."
)

GOOSE_METHOD = "_goose/unstable/session/system-prompt/set"
DIALECTS = ("standard", "claude-meta", "pi-meta", "goose")
SUPPORTED_MODES = ("append", "override")  # both advertised: sessionCapabilities.systemPrompt.mode
TRUNCATE_AT = 65536
#: The most characters of systemPrompt text ``--variant refuses-huge`` accepts, and past
#: which ``--bug huge-prompt-crash`` exits: 4 MiB, between the 1 MiB and 8 MiB that
#: acp-fuzz sends (acp_fuzz.core.fills.SIZES).
HUGE_AT = 4 * 1024 * 1024

# JSON-RPC / ACP error codes (protocol reference §6).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800  # the answer to a request cancelled by $/cancel_request
RESOURCE_NOT_FOUND = -32002
UNSUPPORTED_VERSION = -32022  # v2 only: no supported version at or below the offer

#: The protocol versions this agent speaks (a legacy dialect and --variant v1-only: 1 only).
PROTOCOL_VERSIONS = (1, 2)
#: Methods that v2 removed: under v2 they are unknown methods (-32601).
V1_ONLY_METHODS = frozenset({"session/load", "session/set_mode"})


class NoAnswer(Exception):
    """The current request is never answered (a planted hang)."""


class RpcError(Exception):
    """An error answer to the current request."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_params(why: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"Invalid params: {why}")


def session_not_found(session_id: str) -> RpcError:
    return RpcError(RESOURCE_NOT_FOUND, "Session not found", {"sessionId": session_id})


def _get_path(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a step is not a mapping."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def short(value: object) -> str:
    """A bounded repr for error messages: fuzzers send megabyte-sized strings."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------
# Parameter validation. Every function here only reads; callers validate EVERYTHING before they
# change any state (SP-AGENT-ERROR-NOSIDEEFFECT-MUST).
# ---------------------------------------------------------------------------------------------


def require_cwd(params: dict[str, Any]) -> str:
    """``cwd`` must be an absolute path (SES-CLIENT-CWD-ABS-MUST)."""
    cwd = params.get("cwd")
    if not isinstance(cwd, str):
        raise invalid_params("cwd must be a string")
    if not os.path.isabs(cwd):
        raise invalid_params("cwd must be an absolute path")
    return cwd


def check_mcp_servers(params: dict[str, Any], *, required: bool) -> None:
    """``mcpServers`` is required on new/load, optional on resume/fork (the stdio servers
    it names are connected once the request is valid: :mod:`.mcp`)."""
    servers = params.get("mcpServers")
    if servers is None and not required and "mcpServers" not in params:
        return
    if not isinstance(servers, list):
        raise invalid_params("mcpServers must be an array")
    if not all(isinstance(s, dict) for s in servers):
        raise invalid_params("mcpServers entries must be objects")


def require_session_id(params: dict[str, Any]) -> str:
    session_id = params.get("sessionId")
    if not isinstance(session_id, str):
        raise invalid_params("sessionId must be a string")
    return session_id


def render_prompt(params: dict[str, Any]) -> str:
    """The user text of a ``session/prompt``: its blocks joined by newlines.

    ``text`` and ``resource_link`` are accepted (PROMPT-AGENT-BASELINE-MUST); a link is rendered
    as its URI. ``image``, ``audio`` and ``resource`` are rejected because the agent advertises
    ``promptCapabilities`` all false.
    """
    blocks = params.get("prompt")
    if not isinstance(blocks, list):
        raise invalid_params("prompt must be an array of content blocks")
    parts: list[str] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise invalid_params(f"prompt[{i}] must be an object")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(block["uri"])
        else:
            raise invalid_params(f"prompt[{i}]: unsupported or malformed block type {short(kind)}")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# The model: one non-streaming Chat Completions request per turn.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A model reply and the input tokens its usage reported (``None``: it did not say)."""

    text: str
    prompt_tokens: int | None = None


class ContextTooLong(RpcError):
    """The model refused the request as longer than its context (``context_length_exceeded``).
    An agent that does not compact answers the prompt with it, like any failed request."""

    def __init__(self) -> None:
        super().__init__(INTERNAL_ERROR, "model request failed: HTTP 400 (the context is too "
                         "long for the model)")


class ModelUnavailable(RpcError):
    """A model request that failed in a way worth trying again: an HTTP 5xx or 429, a
    connection lost, an answer cut short or not JSON. ``retry_after``: the seconds its
    ``Retry-After`` asked for (0 when it did not)."""

    def __init__(self, why: str, retry_after: float = 0.0) -> None:
        super().__init__(INTERNAL_ERROR, f"model request failed: {why}")
        self.retry_after = retry_after


#: Retries of a model request that failed with :class:`ModelUnavailable`, and the longest
#: ``Retry-After`` the agent honours (a longer one is cut to it: the turn must go on).
MODEL_RETRIES = 2
MAX_RETRY_AFTER_S = 2.0


def chat_completion(base_url: str | None, api_key: str, messages: list[dict[str, str]],
                    model: str = MODEL, tools: Sequence[dict[str, Any]] = ()) -> str:
    """POST ``messages`` to ``<base_url>/chat/completions`` and return the assistant's text.

    Any failure (no base URL, connection error, non-200 status, malformed answer) raises
    :class:`RpcError` ``-32603``; the agent answers the prompt with it and keeps running.
    """
    return chat_request(base_url, api_key, messages, model, tools).text


def chat_request(base_url: str | None, api_key: str, messages: list[dict[str, str]],
                 model: str = MODEL, tools: Sequence[dict[str, Any]] = ()) -> Answer:
    """:func:`chat_completion`, with the reply's ``usage.prompt_tokens``; an HTTP 400 whose
    error ``code`` is ``context_length_exceeded`` raises :class:`ContextTooLong`."""
    if not base_url:
        raise RpcError(INTERNAL_ERROR, "model request failed: OPENAI_BASE_URL is not set")
    payload: dict[str, Any] = {"model": model, "messages": messages, "stream": False}
    if tools:
        payload["tools"] = list(tools)
    body = json.dumps(payload).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=MODEL_TIMEOUT_S) as response:
            answer = json.loads(response.read())
        content = answer["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e:  # non-2xx status
        if e.code == 400 and _error_code(e) == "context_length_exceeded":
            raise ContextTooLong() from e
        if e.code == 429 or e.code >= 500:
            raise ModelUnavailable(f"HTTP {e.code}", _retry_after(e)) from e
        raise RpcError(INTERNAL_ERROR, f"model request failed: HTTP {e.code}") from e
    except (OSError, ValueError, KeyError, IndexError, TypeError,
            http.client.HTTPException) as e:  # lost, cut short (IncompleteRead), not JSON
        raise ModelUnavailable(short(e)) from e
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return Answer(content if isinstance(content, str) else "",
                  tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None)


def _retry_after(e: urllib.error.HTTPError) -> float:
    """The seconds an error's ``Retry-After`` asks for (0 when absent or not a number)."""
    try:
        return max(0.0, float(e.headers.get("Retry-After", "0")))
    except ValueError:
        return 0.0


def _error_code(e: urllib.error.HTTPError) -> Any:
    """The ``error.code`` of an OpenAI-style error body, or ``None``."""
    try:
        body = json.loads(e.read(64 * 1024))
    except (OSError, ValueError):
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


# ---------------------------------------------------------------------------------------------
# The agent.
# ---------------------------------------------------------------------------------------------

#: The model call: (messages, model id) -> the assistant's text, or an :class:`Answer` with
#: the usage it reported.
Model = Callable[[list[dict[str, str]], str, Sequence[dict[str, Any]]], "str | Answer"]


class Agent:
    """Answers one JSON-RPC message at a time.

    ``send`` writes one outgoing message (a response or a ``session/update``); ``cancelled``
    tells whether a ``session/cancel`` for a session has already arrived (see :class:`LineReader`).
    """

    def __init__(
        self,
        store: Store,
        model: Model,
        send: Callable[[dict[str, Any]], None],
        cancelled: Callable[[str], bool] = lambda _session_id: False,
        reattaching: Callable[[str], bool] = lambda _session_id: False,
        closing: Callable[[str], bool] = lambda _session_id: False,
        prompted: Callable[[str], list[str]] = lambda _session_id: [],
        reattached: Callable[[str], list[str]] = lambda _session_id: [],
        request_cancelled: Callable[[Any], bool] = lambda _request_id: False,
        requested: Callable[[str, str], bool] = lambda _method, _session_id: False,
        bugs: Iterable[str] = (),
        log: Callable[[str], None] = lambda _line: None,
        dialect: str = "standard",
        variants: Iterable[str] = (),
    ) -> None:
        self.dialect = dialect
        self.store = store
        self.model = model
        self.send = send
        self.cancelled = cancelled
        # Whether a load or resume of a session is already waiting in the pipe (the agent is
        # single-threaded: one that arrived during a turn is read after it), and the
        # sessions that had one arrive while a turn of theirs ran.
        self.reattaching = reattaching
        # Whether a session/close of a session, or a $/cancel_request of a request, is waiting
        # in the pipe, and the request being answered (None: a notification, or none).
        self.closing = closing
        # The sessions other than one whose session/prompt is waiting in the pipe: their turns
        # started while this one's model was answering (the agent reads them after it).
        self.prompted = prompted
        # The same for the sessions whose load or resume is waiting in the pipe.
        self.reattached = reattached
        self.request_cancelled = request_cancelled
        # Whether a request of a method for a session is waiting in the pipe (only the planted
        # bugs of requests that arrive during a turn look), and the sessions whose next such
        # request arrived while a turn of theirs ran: method -> session ids.
        self.requested = requested
        self.mid_turn: dict[str, set[str]] = {}
        self.request_id: Any = None
        self.busy: set[str] = set()
        self.bugs = frozenset(bugs)  # the planted defects (--bug, repeatable)
        self._choose_variants(frozenset(variants), dialect)
        # --variant defer-*: session id -> (the prompt still sent, turns left or None = until
        # this process ends). In memory only: a new process applies what is stored.
        self.deferred: dict[str, tuple[SystemPrompt | None, int | None]] = {}
        self.log = log
        self.initialized = False
        # The ACP version this connection speaks, fixed by the initialize answer (1 until
        # then). v2 changes only wire shapes; the logic (and every planted bug) is shared.
        self.protocol = 1
        self.compaction_updates = False  # v1: the client advertised session.compaction
        # v2: what runs once the current request is answered (a prompt's turn), else None.
        self.after_reply: Callable[[], None] | None = None
        # v2: (session id, message id) pairs handed out by this process (see _message_id).
        self.message_ids: set[tuple[str, str]] = set()
        self.live: dict[str, Session] = {}  # sessions loaded in this process
        self.seen_here: set[str] = set()  # ids created, forked, loaded or resumed by this process
        self.last_client_prompt: SystemPrompt | None = None  # only read by BUG(leak)
        self.left_behind: dict[str, SystemPrompt] = {}  # only by BUG(delete-leaves-prompt)
        self.unstored: set[str] = set()  # only by BUG(unstored-before-turn)
        self.relisted: set[str] = set()  # only by BUG(cold-load-new-id)
        # Each loaded session's MCP tools, (server, tool), from its last new, load, resume or
        # fork (in memory: the request names the servers each time).
        self.mcp_tools: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.last_mcp_tools: list[tuple[str, dict[str, Any]]] = []  # only BUG(mcp-tools-leak)
        self.methods = self._method_table(dialect)

    def _choose_variants(self, variants: frozenset[str], dialect: str) -> None:
        """The correct variants this agent runs: those asked for, and those a planted bug
        needs (a switch bug needs modes to switch), with the features each turns on."""
        self.variants = variants  # correct variants (--variant)
        if self.bugs & SWITCH_BUGS:
            self.variants |= {"switches"}
        if self.bugs & TITLE_BUGS:
            self.variants |= {"titles"}
        if self.bugs & STATUS_BUGS:
            self.variants |= {"status"}
        if self.bugs & DIRECTORY_BUGS:
            self.variants |= {"directories"}
        if self.bugs & COMPACTION_BUGS or "defer-until-compaction" in self.variants:
            self.variants |= {"compacting"}
        # --variant compacting: it advertises /compact and compacts sessions (see _compact).
        self.compacting = "compacting" in self.variants
        # --variant defer-until-compaction (and BUG(compaction-keeps-stale)): a changed
        # prompt is held back until the next compaction (Session.held, stored).
        self.holding = bool((self.variants | self.bugs) & HOLDING)
        self.directories = "directories" in self.variants and dialect == "standard"
        # Client-set titles, offered only with --variant titles (so by default the agent
        # draws the harness's sequences exactly as before titles existed).
        self.titles = "titles" in self.variants and dialect == "standard"
        # session/status, offered only with --variant status (the same reason).
        self.status = "status" in self.variants and dialect == "standard"
        # Modes and a model option, offered only with --variant switches: by default the
        # agent draws the harness's sequences exactly as before they existed.
        self.switches = "switches" in self.variants

    def _method_table(self, dialect: str) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """The methods this agent answers: ACP's, and those its dialect and variants add."""
        methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "initialize": self.initialize,
            "session/new": self.session_new,
            "session/load": self.session_load,
            "session/resume": self.session_resume,
            "session/fork": self.session_fork,
            "session/close": self.session_close,
            "session/delete": self.session_delete,
            "session/list": self.session_list,
            "session/prompt": self.session_prompt,
        }
        if dialect == "goose":
            methods[GOOSE_METHOD] = self.goose_set_system_prompt
        if self.switches:
            methods["session/set_mode"] = self.session_set_mode
            methods["session/set_config_option"] = self.session_set_config_option
        if self.titles:
            methods["session/set_title"] = self.session_set_title
        if self.status:
            methods["session/status"] = self.session_status
        return methods

    # -- framing ---------------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        """Process one input line; bad input gets an error answer, never a crash."""
        text = line.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
        if not text:
            return  # blank lines (and a lone "\r") are ignored
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            self._reply(None, error=RpcError(PARSE_ERROR, "Parse error"))
            return
        if not isinstance(message, dict):
            # Arrays (batches), strings, numbers and null are not requests (FR-BATCH-DEF).
            self._reply(None, error=RpcError(INVALID_REQUEST, "Invalid request: not an object"))
            return
        self.handle_message(message)

    def handle_message(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        has_id = "id" in message
        request_id = message.get("id")
        if method is None and has_id and ("result" in message or "error" in message):
            return  # a response; this agent never sends requests, so it is stray: ignore it
        valid_id = isinstance(request_id, str | int | None) and not isinstance(request_id, bool)
        if has_id and not valid_id:
            self._reply(None, error=RpcError(INVALID_REQUEST, "Invalid request: bad id"))
            return
        if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
            if has_id:  # without an id there is nobody to answer (FR-NOTIF-NOREPLY-DEF)
                self._reply(request_id, error=RpcError(INVALID_REQUEST, "Invalid request"))
            return
        params = message.get("params", {})
        if not has_id:
            self.handle_notification(method, params)
            return
        self.log(f"<- {method} id={short(request_id)}")
        self.after_reply = None
        self.request_id = request_id
        try:
            result = self.dispatch(method, params)
        except NoAnswer:
            self.log(f"-> no answer to {method} id={short(request_id)}")
            return
        except RpcError as e:
            self.log(f"-> error {e.code} {e.message[:80]}")
            if "error-quotes-other-prompt" in self.bugs and self.last_client_prompt is not None:
                # BUG(error-quotes-other-prompt): the process's last prompt, whoever set it.
                data = e.data if isinstance(e.data, dict) else {}
                e.data = {**data, "lastPrompt": self.last_client_prompt.client_text()}
            self._reply(request_id, error=e)
            return
        except Exception as e:  # a bug in a handler must not kill the agent
            self.log(f"-> internal error {short(e)}")
            self._reply(request_id, error=RpcError(INTERNAL_ERROR, "Internal error"))
            return
        self._reply(request_id, result=result)
        after, self.after_reply = self.after_reply, None
        if after is not None:
            after()  # v2: a prompt's turn runs after its answer

    def dispatch(self, method: str, params: Any) -> dict[str, Any]:
        if not self.initialized and method != "initialize":
            raise RpcError(INVALID_REQUEST, "Invalid request: initialize first")
        handler = self.methods.get(method)
        if self.protocol >= 2 and method in V1_ONLY_METHODS:
            handler = None  # removed in v2: as unknown as any other method
        if handler is None:
            # Includes unknown "_"-prefixed extensions (EXT-METHOD-UNDERSCORE-SHOULD).
            raise RpcError(METHOD_NOT_FOUND, "Method not found", {"method": method})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise invalid_params("params must be an object")
        return handler(params)

    def handle_notification(self, method: str, params: Any) -> None:
        # session/cancel needs no handler: turns run to completion before the next line is read,
        # and a cancel that arrived during or before a turn is seen through self.cancelled.
        # Unknown notifications, "_"-prefixed ones included, are ignored.
        self.log(f"<- {method} (notification)")

    def _reply(
        self, request_id: Any, result: dict[str, Any] | None = None, error: RpcError | None = None
    ) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = error.to_json()
        else:
            message["result"] = result
        self.send(message)

    def _update(self, session_id: str, update: dict[str, Any]) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": session_id, "update": update},
            }
        )

    # -- systemPrompt ----------------------------------------------------------------------------

    def parse_legacy_prompt(self, params: dict[str, Any]) -> SystemPrompt | None:
        """The ``_meta.systemPrompt`` of the claude-meta and pi-meta dialects (on
        ``session/new`` only): a non-blank string replaces the defaults, ``{"append": text}``
        appends; anything else is invalid params."""
        meta = params.get("_meta")
        raw = meta.get("systemPrompt") if isinstance(meta, dict) else None
        if raw is None:
            return None
        if isinstance(raw, str):
            if not raw.strip():
                raise invalid_params("_meta.systemPrompt must not be blank")
            return SystemPrompt("override", (raw,))
        if isinstance(raw, dict) and set(raw) == {"append"} and isinstance(raw["append"], str):
            return SystemPrompt("append", (raw["append"],))
        raise invalid_params("_meta.systemPrompt must be a string or {\"append\": string}")

    def parse_system_prompt(self, params: dict[str, Any], *,
                            creating: bool = False) -> SystemPrompt | None:
        """Validate ``params.systemPrompt``; ``None`` when it is absent or null.

        Rejections (all ``-32602``): not an object; ``mode`` missing, not a string, or not one of
        append/override (SP-AGENT-UNKNOWN-MODE-MUST, "_"-prefixed vendor modes included);
        ``content`` not an array or empty (SP-AGENT-EMPTY-MAY: we choose to reject); a block that
        is not ``{"type": "text", "text": <string>}`` (SP-AGENT-UNSUPPORTED-BLOCK-MUST).
        ``_meta`` and unknown keys are ignored (SP-META-MUSTNOT).
        """
        if self.dialect != "standard":
            # Legacy dialects set a prompt on session/new only; later requests keep it.
            if creating and self.dialect in ("claude-meta", "pi-meta"):
                return self.parse_legacy_prompt(params)
            return None
        raw = params.get("systemPrompt")
        if raw is None:  # omitted and null are equivalent (SP-NEW-OMIT-DEFAULT-DEF)
            return None
        options = _get_path(params, "_meta", "claudeCode", "options", "systemPrompt")
        if "sdk-options-win" in self.bugs and isinstance(options, str):
            self.parse_standard_prompt(raw)  # BUG(sdk-options-win): _meta must change nothing
            return SystemPrompt("override", (options,))
        if "vendor-meta-wins" in self.bugs:
            try:
                vendor = self.parse_legacy_prompt(params)
            except RpcError:
                vendor = None
            if vendor is not None:
                self.parse_standard_prompt(raw)  # still validated, then silently replaced
                return vendor  # BUG(vendor-meta-wins): _meta must change nothing (SP-META-MUSTNOT)
        standard = self.parse_standard_prompt(raw)
        if "vendor-meta-also" in self.bugs:
            try:
                vendor = self.parse_legacy_prompt(params)
            except RpcError:
                vendor = None
            if vendor is not None:  # BUG(vendor-meta-also): the standard field replaces _meta
                return SystemPrompt(standard.mode, standard.texts + vendor.texts)
        return standard

    def parse_standard_prompt(self, raw: Any) -> SystemPrompt:
        """Validate a non-null ``systemPrompt`` value (see :meth:`parse_system_prompt`)."""
        if isinstance(raw, str) and "accept-draft-string" in self.bugs:
            return SystemPrompt("append", (raw,))  # BUG(accept-draft-string): not a SystemPrompt
        if not isinstance(raw, dict):
            raise invalid_params("systemPrompt must be an object or null")
        mode = raw.get("mode")
        if not isinstance(mode, str):
            raise invalid_params("systemPrompt.mode must be a string")
        if mode == "replace" and "replace-as-override" in self.bugs:
            mode = "override"  # BUG(replace-as-override): never guess what a mode means
        if mode not in SUPPORTED_MODES:
            if "accept-unknown-mode" in self.bugs:
                mode = "append"  # BUG(accept-unknown-mode): never guess what a mode means
            else:
                raise invalid_params(f"unsupported systemPrompt.mode {short(mode)}")
        if mode == "override" and "refuse-override" in self.bugs:
            # BUG(refuse-override): what is advertised must be accepted (SP-AGENT-OVERRIDE-MUST)
            raise invalid_params("systemPrompt.mode override is not supported")
        content = raw.get("content")
        if not isinstance(content, list):
            raise invalid_params("systemPrompt.content must be an array")
        if not content:
            if "hang-on-empty-content" in self.bugs:
                raise NoAnswer  # BUG(hang-on-empty-content): every request gets an answer
            raise invalid_params("systemPrompt.content must not be empty")
        texts: list[str] = []
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                raise invalid_params(f"systemPrompt.content[{i}] must be an object")
            kind = block.get("type")
            if kind == "image" and "crash-on-image" in self.bugs:
                self.log("BUG(crash-on-image): exiting")
                sys.exit(1)  # BUG(crash-on-image): an unsupported block must be an error answer
            if kind != "text" and "skip-unsupported-blocks" in self.bugs:
                continue  # BUG(skip-unsupported-blocks): a block it cannot apply is an error
            if kind != "text":
                raise invalid_params(
                    f"systemPrompt.content[{i}]: unsupported block type {short(kind)}"
                )
            if not isinstance(block.get("text"), str):
                raise invalid_params(f"systemPrompt.content[{i}].text must be a string")
            texts.append(block["text"])
        self._check_size(sum(map(len, texts)))
        if "drop-last-block" in self.bugs and len(texts) > 1:
            texts.pop()  # BUG(drop-last-block)
        return SystemPrompt(mode, tuple(texts))

    def _check_size(self, size: int) -> None:
        """``--variant refuses-huge`` refuses a prompt over :data:`HUGE_AT` characters (the
        RFD lets an agent answer an error instead of applying one); ``--bug
        huge-prompt-crash`` dies on it."""
        if size <= HUGE_AT:
            return
        if "huge-prompt-crash" in self.bugs:
            self.log("BUG(huge-prompt-crash): exiting")
            sys.exit(1)  # BUG(huge-prompt-crash): a prompt too big to apply is an error answer
        if "refuses-huge" in self.variants:
            raise invalid_params(f"systemPrompt is {size} characters of text; this agent "
                                 f"accepts at most {HUGE_AT}")

    def compose(self, session: Session, user_text: str) -> tuple[str, str]:
        """The system message and the user message for the next model request.

        append:   default instructions, a blank line, then the client text (SP-AGENT-APPEND-*).
        override: the client text alone (SP-AGENT-OVERRIDE-REPLACES-DEF).
        none:     the default instructions alone.
        """
        prompt = session.system_prompt
        if session.held:
            prompt = session.held_prompt  # until the next compaction (defer-until-compaction)
        elif session.session_id in self.deferred:
            prompt = self._deferred_prompt(session.session_id)
        if "leak" in self.bugs and self.last_client_prompt is not None:
            prompt = self.last_client_prompt  # BUG(leak): process-global state, not per session
        defaults = default_instructions(session.cwd) + project_instructions(session.cwd)
        if session.mode == "plan":
            defaults += f"\n{PLAN_INSTRUCTION}"
        if "tiny-baseline" in self.bugs:
            defaults = f"{TINY_DEFAULTS}\n\nWorking directory: {session.cwd}"
            if prompt is not None and prompt.mode == "override":
                # BUG(tiny-baseline): the SDK's header and identity stay under override.
                return f"{TINY_DEFAULTS}\n\n{prompt.client_text()}", user_text
        if prompt is None:
            return defaults, user_text
        client_text = prompt.client_text()
        if "truncate-64k" in self.bugs:
            client_text = client_text[:TRUNCATE_AT]  # BUG(truncate-64k)
        if "turn-fails-on-64k" in self.bugs and len(client_text) > TRUNCATE_AT:
            # BUG(turn-fails-on-64k): a prompt it cannot use must be refused when it is sent.
            raise RpcError(INTERNAL_ERROR, "Internal error: the system prompt is too long")
        if "html-escapes-prompt" in self.bugs:
            client_text = html.escape(client_text)  # BUG(html-escapes-prompt): autoescaped
        if "user-turn" in self.bugs:
            # BUG(user-turn): the "[System]" workaround of pre-RFD clients; the text has user-turn
            # precedence only (violates SP-AGENT-APPEND-PLACEMENT-SHOULD).
            return defaults, f"[System]\n{client_text}\n\n{user_text}"
        if prompt.mode == "override" and "override-keeps-default" not in self.bugs:
            return client_text, user_text
        if "append-drops-defaults" in self.bugs:
            return client_text, user_text  # BUG(append-drops-defaults): append adds to them
        return f"{defaults}\n\n{client_text}", user_text

    def _set_prompt(self, session: Session, prompt: SystemPrompt | None) -> None:
        """Apply the ``systemPrompt`` of a load or resume to a session (in memory only).

        A re-sent prompt replaces the stored one (SP-LIFECYCLE-CHANGE-SHOULD). An omitted or null
        one keeps the stored prompt (SP-LIFECYCLE-OMIT-MAY: this agent's choice is "keep").
        """
        if "lost-after-restart" in self.bugs and session.session_id not in self.seen_here:
            # BUG(lost-after-restart): state restored from disk is dropped, and so is the re-sent
            # prompt; the session silently runs on the default instructions.
            session.system_prompt = None
            return
        if ("lost-override-after-restart" in self.bugs and prompt is not None
                and prompt.mode == "override" and session.session_id not in self.seen_here):
            # BUG(lost-override-after-restart): accepted, then the built-in defaults are sent.
            session.system_prompt = None
            return
        if "cold-load-keeps-old" in self.bugs and session.session_id not in self.seen_here:
            return  # BUG(cold-load-keeps-old): accepted, and the stored prompt stays in use
        if prompt is None and session.history and "omit-falls-back-when-talked" in self.bugs:
            session.system_prompt = None  # BUG(omit-falls-back-when-talked): choose once
            return
        if prompt is None:
            return
        old = session.system_prompt
        if self.holding:
            if prompt != old and not session.held:
                # Held back until the next compaction, stored with the session: a new
                # process holds it too (the provider's prompt cache outlives this one).
                session.held, session.held_prompt = True, old
        elif session.session_id in self.live and prompt != old:
            self._defer(session.session_id, old)
        if "duplicate-on-resume" in self.bugs and old is not None:
            prompt = SystemPrompt(prompt.mode, old.texts + prompt.texts)  # BUG(duplicate-on-resume)
        if "escape-changed-prompt" in self.bugs and prompt != old:
            # BUG(escape-changed-prompt): the change path's template autoescapes the text.
            prompt = SystemPrompt(prompt.mode, tuple(html.escape(t) for t in prompt.texts))
        session.system_prompt = prompt
        self.last_client_prompt = prompt

    def _defer(self, session_id: str, old: SystemPrompt | None) -> None:
        """--variant defer-*: keep sending ``old`` after a change on a live session (the RFD
        allows deferring a change until the next rebuild, SP-LIFECYCLE-DEFER-MAY)."""
        if "defer-until-restart" in self.variants:
            self.deferred.setdefault(session_id, (old, None))
        elif "defer-then-apply" in self.variants:
            self.deferred[session_id] = (self.deferred.get(session_id, (old, 1))[0], 1)

    def _deferred_prompt(self, session_id: str) -> SystemPrompt | None:
        """The prompt a deferring variant still sends this turn; counts the turn down."""
        prompt, left = self.deferred[session_id]
        if left is not None:
            if left <= 1:
                del self.deferred[session_id]
            else:
                self.deferred[session_id] = (prompt, left - 1)
        return prompt

    def tools_of(self, session: Session) -> tuple[dict[str, Any], ...]:
        """The tools a turn of ``session`` offers the model: :data:`TOOLS` and its MCP
        servers' tools, whatever its prompt (override changes no tool and no MCP server,
        SP-AGENT-OVERRIDE-SCOPE-DEF)."""
        sp = session.system_prompt
        override = sp is not None and sp.mode == "override"
        own = self.mcp_tools.get(session.session_id, [])
        if "mcp-tools-leak" in self.bugs:
            own = self.last_mcp_tools  # BUG(mcp-tools-leak): one list for the process
        if "override-drops-mcp-tools" in self.bugs and override:
            own = []  # BUG(override-drops-mcp-tools)
        if "override-drops-tools" in self.bugs and override:
            # BUG(override-drops-tools): the override path builds its own, shorter list.
            return tuple(t for t in TOOLS if t["function"]["name"] != "list_directory")
        return TOOLS + mcp.function_tools(own)

    def _connect_mcp(self, session_id: str, params: dict[str, Any]) -> None:
        """Connect the session to the stdio MCP servers the (validated) request names: its
        tools from now on (:mod:`.mcp`)."""
        tools = mcp.connect(params.get("mcpServers"), self.log)
        self.mcp_tools[session_id] = tools
        if tools:
            self.last_mcp_tools = tools

    def options_of(self, session: Session) -> dict[str, Any]:
        """What new, load, resume and fork answer about a session besides its id: its modes
        and config options (``--variant switches``), else nothing. v2 has no modes."""
        if not self.switches:
            return {}
        if self.protocol >= 2:
            return {"configOptions": config_of(session, self.protocol)}
        return {"modes": modes_of(session), "configOptions": config_of(session)}

    def _find(self, session_id: str) -> Session:
        """A session loaded in this process, else the stored one; ``-32002`` if neither exists."""
        session = self.live.get(session_id) or self.store.load(session_id)
        if session is None:
            raise session_not_found(session_id)
        return session

    def _live(self, session_id: str) -> Session:
        """A session loaded in this process; ``-32002`` if it is unknown, or stored but not
        created, forked, loaded or resumed here (prompts and switches need it loaded)."""
        session = self.live.get(session_id)
        if session is None:
            raise session_not_found(session_id)
        return session

    def _reopen(self, session: Session, cwd: str, prompt: SystemPrompt | None,
                busy: bool = False) -> None:
        """What a load or resume that succeeds does to the session: it runs in ``cwd`` from
        now on (re-sent, like mcpServers; the latest value wins), with the request's prompt
        applied (:meth:`_set_prompt`). ``busy``: it arrived while a turn of the session ran
        (the turn has ended since: it is applied whole, after it)."""
        moved = cwd != session.cwd
        session.cwd = cwd
        self._set_prompt(session, prompt)
        if moved and "moved-cwd-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(moved-cwd-drops-prompt): started over there
        if busy and "busy-resume-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(busy-resume-drops-prompt): rebuilt mid-turn

    def _took_busy(self, session_id: str) -> bool:
        """Whether this load or resume arrived while a turn of the session ran. The mark is
        taken first, before anything can refuse the request: it belongs to this request,
        never to the next one (a busy reattach refused for its payload left it behind, and
        the next, idle, reattach was refused as busy)."""
        busy = session_id in self.busy
        self.busy.discard(session_id)
        return busy

    def _refuse_busy(self, session_id: str, busy: bool) -> None:
        """Under ``--variant busy-refuses`` a reattach that arrived while a turn ran is
        refused here, before it changes anything."""
        if busy and "busy-refuses" in self.variants:
            raise RpcError(BUSY, "Session is busy: a turn is running", {"sessionId": session_id})

    def _relist(self, session: Session, cold: bool) -> None:
        """BUG(cold-load-new-id): a session reopened in a new process before its first turn
        is restored as a new one: stored again under a new id, which session/list shows in
        place of its own (the client's id still serves its turns)."""
        if "cold-load-new-id" in self.bugs and cold and not session.history:
            self.store.create(session.cwd, session.system_prompt, [])
            self.relisted.add(session.session_id)

    def _activate(self, session: Session) -> None:
        self.live[session.session_id] = session
        self.seen_here.add(session.session_id)

    # -- methods ---------------------------------------------------------------------------------

    def supported_versions(self) -> tuple[int, ...]:
        """The protocol versions this agent speaks: v1 and v2, or v1 alone under a legacy
        dialect (they predate v2) and under ``--variant v1-only``."""
        if self.dialect != "standard" or "v1-only" in self.variants:
            return (1,)
        return PROTOCOL_VERSIONS

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        version = params.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool):
            raise invalid_params("protocolVersion must be an integer")
        supported = self.supported_versions()
        # Version negotiation (INIT-VERSION-NEGOTIATE-DEF): the highest supported version at
        # or below the offer; none at all is -32022.
        usable = [v for v in supported if v <= version]
        if not usable:
            raise RpcError(UNSUPPORTED_VERSION, "Unsupported protocol version",
                           {"requested": version, "supported": list(supported)})
        self.protocol = answer = max(usable)
        # v1: compaction_update only when the client advertised session.compaction (the v1
        # schema's CompactionUpdate); v2 gates it on no client capability.
        client = params.get("clientCapabilities")
        session_caps = client.get("session") if isinstance(client, dict) else None
        self.compaction_updates = isinstance(session_caps, dict) \
            and isinstance(session_caps.get("compaction"), dict)
        if "version-above-offer" in self.bugs and 2 in supported:
            # BUG(version-above-offer): answers a version the client did not offer.
            self.protocol, answer = 2, version + 1
        self.initialized = True
        if self.protocol >= 2:
            return self.initialize_v2(answer)
        caps: dict[str, Any] = {
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
        }
        if self.titles:
            caps["sessionCapabilities"]["title"] = {}
        if self.status:
            caps["sessionCapabilities"]["status"] = {}
        if self._drifting():
            del caps["sessionCapabilities"]["fork"]  # BUG(capabilities-drift-after-restart)
        if self.directories:
            caps["sessionCapabilities"]["additionalDirectories"] = {}
        name = AGENT_NAME
        if self.dialect != "standard":
            # A legacy dialect instead of the standard field (docs/rules.md).
            del caps["sessionCapabilities"]["systemPrompt"]
            if self.dialect == "pi-meta":
                caps["_meta"] = {"piAcp": {"systemPrompt": {
                    "replace": True, "append": True, "persisted": True}}}
            elif self.dialect == "claude-meta":
                caps["_meta"] = {"claudeCode": {}}
            else:
                name = f"{AGENT_NAME} (goose dialect)"
        return {
            "protocolVersion": 1,
            "agentCapabilities": caps,
            "authMethods": [],
            "agentInfo": {"name": name, "version": AGENT_VERSION},
        }

    def initialize_v2(self, answer: int) -> dict[str, Any]:
        """The v2 ``initialize`` answer (standard dialect only). ``capabilities.session``
        commits the agent to new, list, resume, close, prompt and cancel; the rest are object
        markers. No ``prompt`` capabilities: text and resource links are the v2 baseline."""
        session: dict[str, Any] = {
            "fork": {},
            "delete": {},
            "systemPrompt": {"mode": {"override": {}}},
        }
        if self.titles:
            session["title"] = {}
        if self.status:
            session["status"] = {}
        if self.directories:
            session["additionalDirectories"] = {}
        if self._drifting():
            del session["fork"]  # BUG(capabilities-drift-after-restart)
        return {
            "protocolVersion": answer,
            "info": {"name": AGENT_NAME, "version": AGENT_VERSION},
            "capabilities": {"session": session},
            "authMethods": [],
        }

    def _drifting(self) -> bool:
        """BUG(capabilities-drift-after-restart): what is advertised must not depend on
        what an earlier process left behind."""
        return "capabilities-drift-after-restart" in self.bugs and bool(self.store.all())

    def goose_set_system_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        """Goose's extension request: ``mode`` ``set`` replaces, ``append`` (the default)
        appends; the prompt is stored with the session."""
        session = self._find(require_session_id(params))
        mode = params.get("mode", "append")
        text = params.get("text")
        if mode not in ("set", "append") or not isinstance(text, str):
            raise invalid_params("mode must be set or append, and text a string")
        session.system_prompt = SystemPrompt("override" if mode == "set" else "append", (text,))
        self.last_client_prompt = session.system_prompt
        self.store.save(session)
        return {}

    def check_roots(self, params: dict[str, Any]) -> None:
        """``additionalDirectories`` (``--variant directories``): absent, null or a list of
        absolute paths, else ``-32602``. Roots widen what the session may touch; they never
        change its prompt. Without the variant the field is not advertised and is ignored."""
        roots = params.get("additionalDirectories")
        if not self.directories or roots is None:
            return
        if not isinstance(roots, list) or not all(
                isinstance(r, str) and os.path.isabs(r) for r in roots):
            raise invalid_params("additionalDirectories must be a list of absolute paths")

    def session_new(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = require_cwd(params)
        check_mcp_servers(params, required=self.protocol == 1)  # v2: only cwd is required
        self.check_roots(params)
        if self._cancel_waiting():
            self._cancelled_new(cwd)
        if "side-effect-before-validation" in self.bugs:
            # BUG(side-effect-before-validation): the session exists (and is listed) even when the
            # systemPrompt is then rejected.
            session = self.store.create(cwd, None, [])
            self._activate(session)
            session.system_prompt = self.parse_system_prompt(params, creating=True)
            self.store.save(session)
        else:
            # Validate first, create second: a rejected prompt leaves no session behind
            # (SP-AGENT-ERROR-NOSIDEEFFECT-MUST).
            prompt = self.parse_system_prompt(params, creating=True)
            if prompt is None and "delete-leaves-prompt" in self.bugs:
                prompt = self.left_behind.get(cwd)  # BUG(delete-leaves-prompt)
            session = self.store.create(cwd, prompt, [])
            if "override-changes-config" in self.bugs and prompt is not None \
                    and prompt.mode == "override":
                session.model = MODELS[1]  # BUG(override-changes-config)
                self.store.save(session)
            self._activate(session)
        self._connect_mcp(session.session_id, params)
        if session.system_prompt is not None:
            self.last_client_prompt = session.system_prompt
            if "untied-digest" in self.bugs:
                self._digest()
        self._advertise(session)
        return {"sessionId": session.session_id, **self.options_of(session)}

    def _digest(self) -> None:
        """BUG(untied-digest): one model request, tied to no turn, that holds every live
        session's client prompt (each session's prompt is its own state)."""
        texts = [s.system_prompt.client_text() for s in self.live.values()
                 if s.system_prompt is not None]
        with contextlib.suppress(RpcError):  # only a digest: the session is made either way
            self.model([{"role": "system", "content": "Summarise this workspace's sessions."},
                        {"role": "user", "content": "\n\n".join(texts)}], MODEL, ())

    def session_load(self, params: dict[str, Any]) -> dict[str, Any]:
        """v1 ``session/load``; in v2, ``session/resume`` with ``replayFrom`` ``start`` runs
        this same code (``mcpServers`` optional there)."""
        session_id = require_session_id(params)
        busy = self._took_busy(session_id)
        if "refused-reattach-unloads" in self.bugs and not self._cancel_waiting():
            # BUG(refused-reattach-unloads): validate first. (A cancelled one is answered
            # -32800 before anything: what it would leave is cancel-load-keeps-prompt's.)
            self.live.pop(session_id, None)
        cwd = require_cwd(params)
        check_mcp_servers(params, required=self.protocol == 1)
        self.check_roots(params)
        if self._cancel_waiting():
            self._cancelled_reattach(session_id, params)
        prompt = self._reattach_prompt(session_id, params)
        self._check_stored(session_id, prompt)
        session = self._find(session_id)
        self._refuse_busy(session_id, busy)
        if "history-lost-after-restart" in self.bugs and session_id not in self.seen_here:
            session.history = []  # BUG(history-lost-after-restart): the transcript is stored too
        if "load-erases-session" in self.bugs and session.history \
                and not session.minute_passed:
            # BUG(load-erases-session): a fresh chat record is written over the stored one
            # before the lookup, which then finds no conversation to load. Only within the
            # session's first "minute" (its first load): a later load finds the file.
            session.history = []
            session.minute_passed = True
            self.store.save(session)
            raise RpcError(INTERNAL_ERROR, "Internal error",
                           {"details": "No previous sessions found for this project."})
        # Everything is valid: from here on the request succeeds.
        cold = session_id not in self.seen_here
        self._reopen(session, cwd, prompt, busy)
        self._activate(session)
        self._connect_mcp(session_id, params)
        self.store.save(session)
        self._relist(session, cold)
        # SES-AGENT-LOAD-REPLAY-MUST: replay the whole conversation, THEN answer.
        if "replay-prompt-as-user" in self.bugs and session.system_prompt is not None:
            self._replay_prompt(session)  # BUG(replay-prompt-as-user)
        for i, entry in enumerate(session.history):
            user = entry["role"] == "user"
            content = {"type": "text", "text": entry["content"]}
            if self.protocol >= 2:
                # v2: whole messages, each with the id it had when it was live.
                self._update(session.session_id, {
                    "sessionUpdate": "user_message" if user else "agent_message",
                    "messageId": entry.get("id", f"m{i}"), "content": [content]})
                continue
            kind = "user_message_chunk" if user else "agent_message_chunk"
            self._update(session.session_id, {"sessionUpdate": kind, "content": content})
        self._state_snapshot(session)
        self._advertise(session)
        return self.options_of(session)

    def _replay_prompt(self, session: Session) -> None:
        """BUG(replay-prompt-as-user): the client prompt is not a message of the
        conversation, yet it is replayed as the user's."""
        assert session.system_prompt is not None
        content = {"type": "text", "text": session.system_prompt.client_text()}
        if self.protocol >= 2:
            self._update(session.session_id, {"sessionUpdate": "user_message",
                                              "messageId": "m-system", "content": [content]})
        else:
            self._update(session.session_id, {"sessionUpdate": "user_message_chunk",
                                              "content": content})

    def _reattach_prompt(self, session_id: str, params: dict[str, Any]) -> SystemPrompt | None:
        """The validated prompt of a load or resume (:meth:`parse_system_prompt`)."""
        try:
            return self.parse_system_prompt(params)
        except RpcError:
            session = self.live.get(session_id)
            raw = params.get("systemPrompt")
            content = raw.get("content") if isinstance(raw, dict) else None
            texts = tuple(b["text"] for b in content if isinstance(b, dict)
                          and isinstance(b.get("text"), str)) if isinstance(content, list) else ()
            if "rejected-text-applied" in self.bugs and session is not None and texts:
                # BUG(rejected-text-applied): a refused request must change nothing.
                old = session.system_prompt or SystemPrompt("append", ())
                session.system_prompt = SystemPrompt(old.mode, old.texts + texts)
            raise

    def _state_snapshot(self, session: Session) -> None:
        """v2: "Resume MUST send a current-state snapshot after any replay and before its
        response" (the schema's ``StateUpdate``). Turns run to completion here, so a session
        being resumed is always idle."""
        if self.protocol >= 2:
            self._update(session.session_id, {"sessionUpdate": "state_update", "state": "idle"})

    def session_resume(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.protocol >= 2:
            # v2: replayFrom omitted or null resumes without replay; {"type": "start"} replays
            # the whole conversation first, which is v1's session/load; any other cursor is
            # refused, never substituted.
            replay = params.get("replayFrom")
            if replay is not None:
                if not isinstance(replay, dict) or replay.get("type") != "start":
                    raise invalid_params(f"unsupported replayFrom {short(replay)}")
                return self.session_load(params)
        session_id = require_session_id(params)
        busy = self._took_busy(session_id)
        if "refused-reattach-unloads" in self.bugs and not self._cancel_waiting():
            # BUG(refused-reattach-unloads): validate first. (A cancelled one is answered
            # -32800 before anything: what it would leave is cancel-load-keeps-prompt's.)
            self.live.pop(session_id, None)
        cwd = require_cwd(params)
        check_mcp_servers(params, required=False)
        self.check_roots(params)
        if self._cancel_waiting():
            self._cancelled_reattach(session_id, params)
        prompt = self._reattach_prompt(session_id, params)
        self._check_stored(session_id, prompt)
        session = self._find(session_id)
        self._refuse_busy(session_id, busy)
        if "history-lost-after-restart" in self.bugs and session_id not in self.seen_here:
            session.history = []  # BUG(history-lost-after-restart): the transcript is stored too
        cold = session_id not in self.seen_here
        self._reopen(session, cwd, prompt, busy)
        self._activate(session)
        self._connect_mcp(session_id, params)
        self.store.save(session)
        self._relist(session, cold)
        self._state_snapshot(session)
        self._advertise(session)
        return self.options_of(session)  # SES-AGENT-RESUME-NOREPLAY-MUST: no history is sent

    def session_fork(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = require_session_id(params)
        if self._arrived_mid_turn("session/fork", session_id) \
                and "fork-during-turn-unanswered" in self.bugs:
            raise NoAnswer  # BUG(fork-during-turn-unanswered): every request is answered
        cwd = require_cwd(params)
        check_mcp_servers(params, required=False)
        self.check_roots(params)
        cancelled = self._cancel_waiting()
        if cancelled and "cancel-fork-leaves-session" not in self.bugs:
            self._cancelled_lifecycle()
        prompt = self.parse_system_prompt(params)
        source = self._find(session_id)
        # A fork re-sent with a prompt uses it; omitted or null inherits the source's prompt
        # (SP-LIFECYCLE-OMIT-MAY). The source session itself never changes.
        inherited = prompt if prompt is not None else source.system_prompt
        if "fork-drops-prompt" in self.bugs:
            inherited = None  # BUG(fork-drops-prompt)
        fork = self.store.create(cwd, inherited, [dict(m) for m in source.history])
        fork.mode, fork.model = source.mode, source.model
        if prompt is not None and prompt != source.system_prompt:
            self._defer(fork.session_id, source.system_prompt)
        if "fork-corrupts-source" in self.bugs and prompt is not None:
            source.system_prompt = prompt  # BUG(fork-corrupts-source)
            self.store.save(source)
        self._activate(fork)
        if cancelled:
            # BUG(cancel-fork-leaves-session): made (and listed), though the answer says not.
            raise RpcError(REQUEST_CANCELLED, "Request cancelled")
        self._connect_mcp(fork.session_id, params)
        if prompt is not None:
            self.last_client_prompt = prompt
        self._advertise(fork)
        return {"sessionId": fork.session_id, **self.options_of(fork)}

    def session_close(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = require_session_id(params)
        # Closing frees memory only; the session stays on disk, listable and loadable.
        live = self.live.pop(session_id, None)
        if live is None and self.store.load(session_id) is None:
            raise session_not_found(session_id)
        if "unstored-before-turn" in self.bugs and live is not None and not live.history:
            self.unstored.add(session_id)  # BUG(unstored-before-turn): it is stored at new
        return {}

    def session_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = require_session_id(params)
        session = self.live.get(session_id) or self.store.load(session_id)
        if session is None:
            return {}  # already gone: deleting is idempotent (SES-AGENT-DELETE-IDEMPOTENT-SHOULD)
        if "delete-leaves-prompt" in self.bugs and session.system_prompt is not None:
            # BUG(delete-leaves-prompt): the prompt is kept as the directory's default.
            self.left_behind[session.cwd] = session.system_prompt
        if "delete-keeps-live" not in self.bugs:
            self.live.pop(session_id, None)  # BUG(delete-keeps-live) skips this: still loaded
        self.store.delete(session_id)
        return {}

    def session_set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        """Switch a loaded session's mode. The client prompt belongs to the session, and
        survives the switch; the mode's own instruction (plan) joins the defaults."""
        session_id = require_session_id(params)
        if self._arrived_mid_turn("session/set_mode", session_id):
            if "set-mode-during-turn-unanswered" in self.bugs:
                raise NoAnswer  # BUG(set-mode-during-turn-unanswered): every request is answered
            if "set-mode-refused-during-turn" in self.bugs:
                # BUG(set-mode-refused-during-turn): it may come while a turn runs.
                raise RpcError(INTERNAL_ERROR, "cannot switch modes while a turn is running")
        mode = params.get("modeId")
        if mode not in {m["id"] for m in MODES}:
            raise invalid_params(f"unknown modeId {short(mode)}")
        session = self._live(session_id)
        session.mode = str(mode)
        if "mode-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(mode-drops-prompt): rebuilt from the preset
        self.store.save(session)
        self._update(session_id, {"sessionUpdate": "current_mode_update",
                                  "currentModeId": session.mode})
        return {}

    def session_set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        """Set a loaded session's ``model`` option. The client prompt survives the switch."""
        session_id = require_session_id(params)
        if self._arrived_mid_turn("session/set_config_option", session_id) \
                and "set-config-during-turn-unanswered" in self.bugs:
            raise NoAnswer  # BUG(set-config-during-turn-unanswered): every request is answered
        if params.get("configId") != "model":
            raise invalid_params(f"unknown configId {short(params.get('configId'))}")
        value = params.get("value")
        if self.protocol >= 2 and params.get("type", "id") != "id":
            raise invalid_params(f"the model option takes an id value, not {short(params['type'])}")
        if value not in MODELS:
            raise invalid_params(f"unknown model {short(value)}")
        session = self._live(session_id)
        session.model = str(value)
        if "model-switch-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(model-switch-drops-prompt): started over
        self.store.save(session)
        return {"configOptions": config_of(session, self.protocol)}

    def session_set_title(self, params: dict[str, Any]) -> dict[str, Any]:
        """Retitle a session, loaded here or only stored (``--variant titles``). The title is
        trimmed and cut to :data:`MAX_TITLE` characters; one empty after that is refused
        with ``-32602``. The client prompt is untouched."""
        session_id = require_session_id(params)
        title = params.get("title")
        if not isinstance(title, str):
            raise invalid_params("title must be a string")
        title = title.strip()[:MAX_TITLE]
        if not title:
            raise invalid_params("title is empty")
        session = self._find(session_id)
        session.title = title
        if "title-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(title-drops-prompt): rebuilt from the listing
        self.store.save(session)
        return {"title": title}

    def session_status(self, params: dict[str, Any]) -> dict[str, Any]:
        """Whether a session is loaded in this process (``open``) or only stored (``saved``);
        ``-32002`` for one that is neither (``--variant status``). The schema: "session/status
        MUST NOT have side effects"; this one has none."""
        session_id = require_session_id(params)
        session = self._find(session_id)
        live = session_id in self.live
        if "status-drops-prompt" in self.bugs:
            # BUG(status-drops-prompt): the session is reloaded from its listing entry.
            session.system_prompt = None
            self.store.save(session)
        return {"status": "open" if live else "saved"}

    def session_list(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise invalid_params("cwd must be a string")
        if params.get("cursor") is not None:
            # Every session fits in one page, so no cursor was ever issued.
            raise invalid_params("unknown cursor")
        # No generated title: instruction text must not leak through discovery
        # (SP-SEC-NOLEAK-ADVISORY). A title the client set is the client's own.
        return {
            "sessions": [
                {"sessionId": s.session_id, "cwd": s.cwd, "updatedAt": s.updated_at,
                 **({"title": s.title} if s.title is not None else {})}
                for s in self.store.all()
                if (cwd is None or s.cwd == cwd)
                and s.session_id not in self.relisted  # only BUG(cold-load-new-id) adds any
            ]
        }

    def _check_stored(self, session_id: str, prompt: SystemPrompt | None) -> None:
        """BUG(unstored-before-turn): a reattach of a session before its first turn."""
        live = self.live.get(session_id)
        changed = live is not None and not live.history and prompt != live.system_prompt
        if "unstored-before-turn" in self.bugs and prompt is not None and (
                session_id in self.unstored or changed):
            raise invalid_params("Changing systemPrompt requires a persisted session; create "
                                 "a new session instead")

    def session_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = require_session_id(params)
        user_text = render_prompt(params)
        session = self._live(session_id)
        if session_id in self.unstored:
            raise NoAnswer  # BUG(unstored-before-turn): the turn must be answered
        if self._arrived_mid_turn("session/prompt", session_id):
            raise NoAnswer  # BUG(second-prompt-unanswered): every prompt is answered
        if self.protocol == 1:
            reason = self._turn(session, user_text)
            if reason == "end_turn" and "camelcase-stop-reason" in self.bugs:
                reason = "endTurn"  # BUG(camelcase-stop-reason): the schema's enum is snake_case
            return {"stopReason": reason}
        # v2: the answer says the user message is inserted (its id); the turn runs after the
        # answer and is reported through session/update (see _turn_v2).
        message_id = self._message_id(session, 0)
        self.after_reply = lambda: self._turn_v2(session, user_text, message_id)
        return {"messageId": message_id}

    def _turn(self, session: Session, user_text: str, message_id: str | None = None) -> str:
        """Run one turn on a loaded session and return its stop reason (``end_turn`` or
        ``cancelled``). A failed model call raises :class:`RpcError` ``-32603`` and the
        history stays unchanged. ``message_id`` is the v2 id of the user message (``None``
        in v1); only the reply's wire shape depends on it."""
        session_id = session.session_id
        # CANCEL-AGENT-STOPREASON-MUST: a cancelled turn answers "cancelled", not an error.
        if self.cancelled(session_id):
            return self._cancelled()
        if self.compacting and user_text.strip() == f"/{COMPACT_COMMAND}":
            self._compact(session, "its /compact command")
            self._say(session, COMPACTED, message_id)
            return "end_turn"
        if self.compacting and session.compact_due:
            self._compact(session, "the context nearly full")  # before the turn
        asked_text = user_text
        messages, user_text = self._messages(session, asked_text)
        if self.reattaching(session_id):
            self.busy.add(session_id)
        # Raises RpcError -32603; the history stays unchanged.
        try:
            reply = self._ask_retrying(session, messages)
        except ContextTooLong:
            if not self.compacting:
                raise
            # Compact, then try the request once more (a second refusal fails the turn).
            self._compact(session, "the context-length error")
            messages, user_text = self._messages(session, asked_text)
            reply = self._ask(session, messages)
        if reply is None:
            return "end_turn"  # BUG(fault-ends-silently): a failed turn must say so
        if self.reattaching(session_id):  # it arrived while the model was answering
            self.busy.add(session_id)
        self._note_mid_turn(session_id)
        stopped = self._stopped_mid_turn(session_id, message_id is not None)
        if stopped is not None:
            return stopped
        if "shared-prompt-slot" in self.bugs:
            self._overwrite_slot(session)
        if "reattach-swaps-running-prompt" in self.bugs:
            self._reattach_slot(session)
        asked = {"role": "user", "content": user_text}
        answered = {"role": "assistant", "content": reply}
        reply_id = self._say(session, reply, message_id)
        if message_id is not None and reply_id is not None:
            asked["id"], answered["id"] = message_id, reply_id  # kept for a replay
        session.history.append(asked)
        session.history.append(answered)
        if "title-from-other-prompt" in self.bugs and len(session.history) == 2 \
                and self.last_client_prompt is not None:
            # BUG(title-from-other-prompt): titled from whatever prompt was set last.
            session.title = self.last_client_prompt.client_text().strip()[:MAX_TITLE]
            self._update(session_id, {"sessionUpdate": "session_info_update",
                                      "title": session.title})
        self.store.save(session)
        return "end_turn"

    def _overwrite_slot(self, session: Session) -> None:
        """BUG(shared-prompt-slot): each session keeps its own prompt. Here the process-wide
        slot holds the prompt of the turn that started last, and this turn stores it as its
        session's: a turn of another session that started while the model was answering (its
        session/prompt waiting in the pipe) leaves its prompt here."""
        for other in self.prompted(session.session_id):
            started = self.live.get(other)
            if started is not None and started.system_prompt is not None:
                session.system_prompt = started.system_prompt
                self.store.save(session)

    def _reattach_slot(self, session: Session) -> None:
        """BUG(reattach-swaps-running-prompt): each session keeps its own prompt. Here a
        load or resume of another session that arrived while this turn's model was answering
        puts that session's stored prompt in the process-wide slot, and this turn stores the
        slot's prompt as its session's when it ends."""
        for other in self.reattached(session.session_id):
            stored = self.live.get(other) or self.store.load(other)
            if stored is not None and stored.system_prompt is not None:
                session.system_prompt = stored.system_prompt
                self.store.save(session)

    def _cancelled_new(self, cwd: str) -> None:
        """A ``session/new`` whose ``$/cancel_request`` is already in the pipe: answered
        ``-32800`` before anything is made (the cancel then goes by as ignored)."""
        if "cancel-new-unanswered" in self.bugs:
            raise NoAnswer  # BUG(cancel-new-unanswered): a cancelled request is still answered
        if "cancel-new-leaves-session" in self.bugs:
            # BUG(cancel-new-leaves-session): made (and listed), though the answer says not.
            session = self.store.create(cwd, None, [])
            self._activate(session)
            self.store.save(session)
        raise RpcError(REQUEST_CANCELLED, "Request cancelled")

    def _cancel_waiting(self) -> bool:
        """Whether a ``$/cancel_request`` of the request being handled is already in the
        pipe (it was written right behind it)."""
        return self.request_id is not None and self.request_cancelled(self.request_id)

    def _cancelled_reattach(self, session_id: str, params: dict[str, Any]) -> None:
        """A ``session/load`` or ``session/resume`` whose ``$/cancel_request`` is already in
        the pipe (:meth:`_cancelled_lifecycle`)."""
        session = self.live.get(session_id)
        if "cancel-load-keeps-prompt" in self.bugs and session is not None:
            prompt = self.parse_system_prompt(params)  # a prompt it cannot apply: refused
            if prompt is not None:
                # BUG(cancel-load-keeps-prompt): answered -32800, and yet the prompt is in
                # force; a cancelled request must leave nothing behind.
                self._set_prompt(session, prompt)
                self.store.save(session)
        self._cancelled_lifecycle()

    def _cancelled_lifecycle(self) -> None:
        """A ``session/load``, ``session/resume`` or ``session/fork`` whose
        ``$/cancel_request`` is already in the pipe: answered ``-32800`` before anything is
        reattached or made (the cancel then goes by as ignored)."""
        if "cancel-load-unanswered" in self.bugs:
            raise NoAnswer  # BUG(cancel-load-unanswered): a cancelled request is still answered
        raise RpcError(REQUEST_CANCELLED, "Request cancelled")

    def _note_mid_turn(self, session_id: str) -> None:
        """For the planted bugs of a request that arrives while the model is answering: note
        the session whose ``session/set_mode``, next ``session/prompt`` or ``session/fork``
        is waiting in the pipe (the correct agent reads it after the turn and answers it as any
        other)."""
        for method, bugs in MID_TURN_BUGS.items():
            if self.bugs & bugs and self.requested(method, session_id):
                self.mid_turn.setdefault(method, set()).add(session_id)

    def _arrived_mid_turn(self, method: str, session_id: str) -> bool:
        """Whether this ``method`` request of ``session_id`` arrived during a turn (once)."""
        seen = self.mid_turn.get(method, set())
        if session_id not in seen:
            return False
        seen.discard(session_id)
        return True

    def _stopped_mid_turn(self, session_id: str, v2: bool) -> str | None:
        """The stop reason of a turn that what arrived while the model was answering stops
        (``None``: it goes on): a ``session/cancel``, a ``session/close`` of its session
        (which cancels ongoing work as if ``session/cancel`` had been sent), or (v1, where
        the prompt is still unanswered) a ``$/cancel_request`` of its ``session/prompt``,
        answered ``-32800``. The answer of a cancelled turn is not stored."""
        if self.cancelled(session_id) and "cancel-ignored-mid-turn" not in self.bugs:
            return self._cancelled()
        if "delete-drops-turn" in self.bugs and self.requested("session/delete", session_id):
            raise NoAnswer  # BUG(delete-drops-turn): the turn is answered, however it ends
        if self.closing(session_id):
            if "close-drops-turn" in self.bugs:
                raise NoAnswer  # BUG(close-drops-turn): a cancelled turn is still answered
            if "close-keeps-turn" not in self.bugs:  # BUG(close-keeps-turn) goes on
                return self._cancelled()
        if not v2 and self.request_id is not None and self.request_cancelled(self.request_id):
            if "cancel-request-unanswered" in self.bugs:
                raise NoAnswer  # BUG(cancel-request-unanswered): it must still be answered
            raise RpcError(REQUEST_CANCELLED, "Request cancelled")
        return None

    def _cancelled(self) -> str:
        """The stop reason of a cancelled turn."""
        if "cancel-errors" in self.bugs:
            # BUG(cancel-errors): the aborted turn's exception escapes as an error answer.
            raise RpcError(INTERNAL_ERROR, "turn aborted")
        return "cancelled"

    def _messages(self, session: Session, user_text: str
                  ) -> tuple[list[dict[str, str]], str]:
        """The model request of a turn (and the user text it sends): the system message,
        the conversation, the user message."""
        system, user_text = self.compose(session, user_text)
        return [
            {"role": "system", "content": system},
            # Only role and content reach the model (a v2 entry also keeps its message id).
            *({"role": m["role"], "content": m["content"]} for m in session.history),
            {"role": "user", "content": user_text},
        ], user_text

    def _say(self, session: Session, text: str, message_id: str | None) -> str | None:
        """Send the agent's reply of a turn: one ``agent_message_chunk`` (v1), or an
        ``agent_message`` with its own id (v2, when the user message has ``message_id``),
        which is returned."""
        if message_id is None:
            self._update(session.session_id, {"sessionUpdate": "agent_message_chunk",
                                              "content": {"type": "text", "text": text}})
            return None
        reply_id = self._message_id(session, 1)
        self._update(session.session_id, {"sessionUpdate": "agent_message",
                                          "messageId": reply_id,
                                          "content": [{"type": "text", "text": text}]})
        return reply_id

    def _ask(self, session: Session, messages: list[dict[str, str]]) -> str:
        """The model's reply text. Under ``--variant compacting`` a reply whose usage reports
        at least :data:`COMPACT_AT` of :data:`CONTEXT_WINDOW` marks the session for a
        compaction before its next turn."""
        answer = self.model(messages, session.model, self.tools_of(session))
        if not isinstance(answer, Answer):
            return answer
        if self.compacting and answer.prompt_tokens is not None \
                and answer.prompt_tokens >= COMPACT_AT * CONTEXT_WINDOW:
            session.compact_due = True
        return answer.text

    def _ask_retrying(self, session: Session, messages: list[dict[str, str]]) -> str | None:
        """:meth:`_ask`, tried again up to :data:`MODEL_RETRIES` times after a
        :class:`ModelUnavailable` (waiting what its ``Retry-After`` asks, at most
        :data:`MAX_RETRY_AFTER_S`), with the same messages: the session's prompt and all. The
        last failure raises. ``None`` only under ``--bug fault-ends-silently``."""
        for attempt in range(MODEL_RETRIES + 1):
            try:
                return self._ask(session, messages)
            except ModelUnavailable as e:
                if "fault-ends-silently" in self.bugs:
                    return None  # BUG(fault-ends-silently): neither retried nor reported
                if attempt == MODEL_RETRIES:
                    raise
                time.sleep(min(e.retry_after, MAX_RETRY_AFTER_S))  # the provider asked it
                if "retry-drops-prompt" in self.bugs:
                    # BUG(retry-drops-prompt): a retry must carry the request it retries.
                    messages = [m for m in messages if m["role"] != "system"]
        raise AssertionError("unreachable")

    def _compact(self, session: Session, why: str) -> None:
        """Compact a session (``--variant compacting``): one summary request to the model
        (:data:`SUMMARY_INSTRUCTIONS` as its system message, the conversation as its user
        message), then the conversation is the summary alone and the system prompt is
        rebuilt from the session's prompt: a change held back or deferred until now applies.
        v2, and v1 when the client advertised ``session.compaction``, report it as
        ``compaction_update`` ``in_progress``, then ``completed`` (or
        ``failed``: a failed summary request fails the turn, and nothing changes)."""
        session_id = session.session_id
        compaction = f"c{session.compactions + 1}"
        self.log(f"compacting {session_id} ({why})")
        if self.protocol >= 2 or self.compaction_updates:
            self._update(session_id, {"sessionUpdate": "compaction_update",
                                      "compactionId": compaction, "status": "in_progress"})
        transcript = "\n\n".join(f"{m['role']}: {m['content']}" for m in session.history)
        try:
            summary = self._ask(session, [
                {"role": "system", "content": SUMMARY_INSTRUCTIONS},
                {"role": "user", "content": transcript or "(no conversation yet)"}])
        except RpcError as e:
            if self.protocol >= 2 or self.compaction_updates:
                self._update(session_id, {"sessionUpdate": "compaction_update",
                                          "compactionId": compaction, "status": "failed",
                                          "error": e.message})
            raise
        session.compactions += 1
        session.history = [{"role": "user", "content": f"{SUMMARY_PREFIX}\n{summary}"}]
        session.compact_due = False
        self.deferred.pop(session_id, None)  # every deferring variant: this is the rebuild
        if session.held:
            if "compaction-keeps-stale" in self.bugs:
                session.system_prompt = session.held_prompt  # BUG(compaction-keeps-stale)
            session.held, session.held_prompt = False, None
        if "compaction-drops-prompt" in self.bugs:
            session.system_prompt = None  # BUG(compaction-drops-prompt): rebuilt from defaults
        self.store.save(session)
        if self.protocol >= 2 or self.compaction_updates:
            self._update(session_id, {"sessionUpdate": "compaction_update",
                                      "compactionId": compaction, "status": "completed"})

    def _advertise(self, session: Session) -> None:
        """``--variant compacting``: once the answer that opened ``session`` is sent, its
        commands (``/compact``), as ``available_commands_update``."""
        if not self.compacting:
            return
        command: dict[str, Any] = {"name": COMPACT_COMMAND, "description": COMPACT_DESCRIPTION}
        if self.protocol >= 2:
            command = {"type": "command", **command}
        update = {"sessionUpdate": "available_commands_update", "availableCommands": [command]}
        self.after_reply = lambda: self._update(session.session_id, update)

    def _turn_v2(self, session: Session, user_text: str, message_id: str) -> None:
        """A v2 turn, once its prompt is answered: ``running``, the echo of the user message,
        the turn itself (:meth:`_turn`: an ``agent_message``), then ``idle`` with the stop
        reason; a failed turn is ``idle`` with ``stopReason`` ``error`` and the error."""
        session_id = session.session_id
        self._update(session_id, {"sessionUpdate": "state_update", "state": "running"})
        self._update(session_id, {"sessionUpdate": "user_message", "messageId": message_id,
                                  "content": [{"type": "text", "text": user_text}]})
        idle: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle"}
        try:
            idle["stopReason"] = self._turn(session, user_text, message_id)
        except RpcError as e:
            self.log(f"-> turn error {e.code} {e.message[:80]}")
            idle.update(stopReason="error", error=e.to_json())
        except Exception as e:  # a bug in the turn must not kill the agent
            self.log(f"-> turn internal error {short(e)}")
            idle.update(stopReason="error",
                        error=RpcError(INTERNAL_ERROR, "Internal error").to_json())
        self._update(session_id, idle)

    def _message_id(self, session: Session, offset: int) -> str:
        """A v2 message id: ``m<n>``, n the message's position in the session's history (so
        a replay can name a message as it was named live, even in another process), with a
        ``.<k>`` suffix when this process already used that id for the session (a turn that
        failed or was cancelled left the history as it was). Deterministic, never random."""
        base = f"m{len(session.history) + offset}"
        message_id, k = base, 0
        while (session.session_id, message_id) in self.message_ids:
            k += 1
            message_id = f"{base}.{k}"
        self.message_ids.add((session.session_id, message_id))
        return message_id


# ---------------------------------------------------------------------------------------------
# stdio
# ---------------------------------------------------------------------------------------------


class LineReader:
    """Reads NDJSON lines from a file descriptor and can look at lines already waiting.

    The agent is single-threaded, so it cannot read a ``session/cancel`` while a turn runs.
    Instead, before and after the model call it asks :meth:`cancel_waiting` whether such a
    notification is already in the pipe. The line stays queued and is processed normally later
    (as a no-op). Peeking uses ``select``; where that does not work on pipes (Windows), cancels
    are simply not seen early.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to contain no newline
        self._eof = False

    def _fill(self) -> None:
        chunk = os.read(self._fd, 1 << 20)
        if chunk:
            self._buf += chunk
        else:
            self._eof = True

    def readline(self) -> bytes | None:
        """The next line without its newline; ``None`` at end of input."""
        while True:
            newline = self._buf.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buf[:newline])
                del self._buf[: newline + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buf)
            if self._eof:
                if not self._buf:
                    return None
                line = bytes(self._buf)  # a last line without a trailing newline
                self._buf.clear()
                self._scanned = 0
                return line
            self._fill()

    def cancel_waiting(self, session_id: str) -> bool:
        """Whether a ``session/cancel`` for ``session_id`` has arrived but is not processed yet."""
        return self._waiting(session_id, ("session/cancel",), request=False)

    def prompts_waiting(self, session_id: str) -> list[str]:
        """The sessions other than ``session_id`` whose ``session/prompt`` has arrived but is
        not processed yet, in arrival order."""
        return [params["sessionId"] for params in self._queued("session/prompt", request=True)
                if isinstance(params.get("sessionId"), str)
                and params["sessionId"] != session_id]

    def reattaches_waiting(self, session_id: str) -> list[str]:
        """The sessions other than ``session_id`` whose ``session/load`` or
        ``session/resume`` has arrived but is not processed yet, in arrival order."""
        return [params["sessionId"] for method in ("session/load", "session/resume")
                for params in self._queued(method, request=True)
                if isinstance(params.get("sessionId"), str)
                and params["sessionId"] != session_id]

    def request_waiting(self, method: str, session_id: str) -> bool:
        """Whether a ``method`` request for ``session_id`` has arrived but is not processed
        yet."""
        return self._waiting(session_id, (method,), request=True)

    def close_waiting(self, session_id: str) -> bool:
        """Whether a ``session/close`` of ``session_id`` has arrived but is not processed
        yet."""
        return self._waiting(session_id, ("session/close",), request=True)

    def cancel_request_waiting(self, request_id: Any) -> bool:
        """Whether a ``$/cancel_request`` of the request ``request_id`` has arrived but is
        not processed yet (the notification then goes by as one this agent ignores)."""
        return any(params.get("requestId") == request_id
                   for params in self._queued("$/cancel_request", request=False))

    def reattach_waiting(self, session_id: str) -> bool:
        """Whether a ``session/load`` or ``session/resume`` of ``session_id`` has arrived but
        is not processed yet."""
        return self._waiting(session_id, ("session/load", "session/resume"), request=True)

    def _waiting(self, session_id: str, methods: tuple[str, ...], *, request: bool) -> bool:
        return any(params.get("sessionId") == session_id
                   for method in methods for params in self._queued(method, request=request))

    def _queued(self, method: str, *, request: bool) -> Iterator[dict[str, Any]]:
        """The params of each ``method`` request (``request``) or notification already in the
        pipe and not processed yet, in arrival order; reads what the pipe holds first."""
        while not self._eof:
            try:
                ready, _, _ = select.select([self._fd], [], [], 0)
            except (OSError, ValueError):
                break
            if not ready:
                break
            self._fill()
        for line in bytes(self._buf).split(b"\n"):
            if method.encode() not in line:
                continue  # cheap pre-filter; only candidate lines are parsed
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(message, dict) and message.get("method") == method \
                    and ("id" in message) == request and isinstance(message.get("params"), dict):
                yield message["params"]


def _read_config(path: str, log: Callable[[str], None]) -> tuple[str | None, str]:
    """``(baseUrl, apiKey)`` from the ``--config`` file; ``(None, "")`` when it is missing or
    not such a file: every turn then fails, as a misconfigured agent's would."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        log(f"no model config: {path}: {type(e).__name__}")
        return None, ""
    url = data.get("baseUrl") if isinstance(data, dict) else None
    key = data.get("apiKey") if isinstance(data, dict) else None
    return (url if isinstance(url, str) else None), (key if isinstance(key, str) else "")


def _parser() -> argparse.ArgumentParser:
    """The command line: the bugs to plant, the variants, the dialect, the config file."""
    parser = argparse.ArgumentParser(
        prog="python -m acp_fuzz.reference_agent",
        description="A correct ACP agent for client systemPrompt, with optional planted bugs. "
        "Speaks NDJSON JSON-RPC on stdio; the model is $OPENAI_BASE_URL/chat/completions; "
        "sessions persist under $HOME/.acp-fuzz-reference-agent/.",
    )
    parser.add_argument(
        "--bug",
        choices=sorted(BUGS),
        action="append",
        default=[],
        help="plant a defect (repeat the option to plant several, each independent): "
        # argparse formats help with %: a bug's text may say "90 %".
        + "; ".join(f"{name}: {text}" for name, text in sorted(BUGS.items())).replace("%", "%%"),
    )
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        action="append",
        default=[],
        help="a correct behaviour the RFD allows, which is not a bug: "
        + "; ".join(f"{name}: {text}" for name, text in sorted(VARIANTS.items())
                    ).replace("%", "%%"),
    )
    parser.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="standard",
        help="how a client sets the system prompt: the standard systemPrompt field (default), "
        "or a legacy dialect (claude-meta, pi-meta: _meta.systemPrompt on session/new; goose: "
        "the _goose/unstable/session/system-prompt/set request)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read the model's base URL and key from this JSON file ({\"baseUrl\": ..., "
        "\"apiKey\": ...}; ~ is $HOME) and ignore $OPENAI_BASE_URL and $OPENAI_API_KEY, as "
        "agents that keep their endpoint in a config file do (docs/profiles.md)",
    )
    return parser


def _model(args: argparse.Namespace, base_url: str | None, api_key: str) -> Model:
    """The model the agent calls: a compacting agent reads the usage of its replies; the
    others, the text alone."""
    if {"compacting", "defer-until-compaction"} & set(args.variant) \
            or COMPACTION_BUGS & set(args.bug):
        return lambda messages, model, tools: chat_request(base_url, api_key, messages, model,
                                                           tools)
    return lambda messages, model, tools: chat_completion(base_url, api_key, messages,
                                                          model, tools)


def main(argv: list[str] | None = None) -> int:
    """Run the agent on stdin/stdout until stdin ends; returns the exit status."""
    args = _parser().parse_args(argv)

    quiet = os.environ.get("ACP_REF_QUIET") == "1"

    def log(line: str) -> None:
        # stderr only: stdout carries nothing but ACP messages (FR-AGENT-STDOUT-MUSTNOT).
        # Lines name methods and ids, never prompt text (SP-SEC-NOLEAK-ADVISORY).
        if not quiet:
            print(f"[{AGENT_NAME}] {line}", file=sys.stderr, flush=True)

    stdout = sys.stdout.buffer

    def send(message: dict[str, Any]) -> None:
        # ensure_ascii keeps every message on one line and survives lone surrogates ("\ud800").
        stdout.write(json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n")
        stdout.flush()

    base_url = os.environ.get("OPENAI_BASE_URL")
    api_key = os.environ.get("OPENAI_API_KEY", "")
    if args.config is not None:
        base_url, api_key = _read_config(os.path.expanduser(args.config), log)
    reader = LineReader(sys.stdin.fileno())
    store = Store(Path.home() / ".acp-fuzz-reference-agent")
    if "forgets-on-restart" in args.variant:
        # What an earlier process stored is gone; the counter stays, so no id is used twice.
        shutil.rmtree(store.sessions_dir, ignore_errors=True)
    agent = Agent(
        store=store,
        model=_model(args, base_url, api_key),
        send=send,
        cancelled=reader.cancel_waiting,
        reattaching=reader.reattach_waiting,
        closing=reader.close_waiting,
        prompted=reader.prompts_waiting,
        reattached=reader.reattaches_waiting,
        requested=reader.request_waiting,
        request_cancelled=reader.cancel_request_waiting,
        bugs=args.bug,
        log=log,
        dialect=args.dialect,
        variants=args.variant,
    )
    log(f"ready (bug={','.join(args.bug) or None})")
    try:
        while (line := reader.readline()) is not None:
            agent.handle_line(line)
    except BrokenPipeError:
        # The client went away: nothing is left to answer. Point stdout at /dev/null so the
        # interpreter's final flush does not raise a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    return 0
