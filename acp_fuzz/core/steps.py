"""Lifecycle steps: the client side of a run, as data (pure).

A step is a small msgpack-friendly mapping such as ``{"op": "new", "session": "A",
"systemPrompt": {...}}``. Sessions are *logical handles* (``A``, ``B``, ...) that the runner maps
to the agent's own session ids, so the same steps drive any agent, and a recorded run can be
re-driven against a new build of the agent (replay).

The ``systemPrompt`` key follows the wire: absent means the field is omitted from the request,
``None`` means an explicit ``null``. A load, new, resume or fork may carry ``extra`` (a
field of an old draft beside the prompt) and ``_meta`` (a vendor carrier of a legacy
prompt), recorded in the step so that the oracles know what was sent.

**A step is never sent as written.** Steps come from cassettes, and cassettes come from
strangers: :func:`validate_step` accepts only what the strategies can draw (every key, every
value shape, one of the three vendor ``_meta`` carriers with string texts, the two old draft
fields, an ``invalid`` request only to the methods acp-fuzz probes), and
:func:`lifecycle_request` builds each request from it the same way for a live run and for a
replay. A cassette therefore cannot choose an ``mcpServers`` command, a vendor option, a
directory or a method. ``acp-fuzz show --full`` and ``report`` print what
:func:`lifecycle_request` will send.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.dialects import DIALECTS, encode_meta
from acp_fuzz.core.fills import MAX_EXPANDED, marks_in, prompt_length
from acp_fuzz.core.ops import (
    CARRIES_PROMPT,
    KEYS,
    MOVES,
    OPS,
    REATTACHES,
    SENDS_STEP,
    SESSIONLESS,
    spec_of,
)

if TYPE_CHECKING:
    from acp_fuzz.core.history import Event

__all__ = [
    "CANCELLING",
    "COMPACT_BY",
    "COMPACT_COMMAND",
    "DURING",
    "ENDING",
    "FAULTS",
    "INVALID_METHODS",
    "OPS",
    "SWITCHING",
    "advertises_compact",
    "describe",
    "elsewhere",
    "invalid_params",
    "lifecycle_request",
    "mcp_tool_for",
    "nonce_for",
    "preview",
    "prompt_params",
    "prompt_text",
    "steps_of",
    "validate_step",
    "will_send",
]

#: The most ``additionalDirectories`` a load, resume or fork step asks for.
MAX_ROOTS = 4


#: How a ``compact`` step makes the agent compact session ``H``: ``command`` sends the
#: compaction command the agent advertised (``/compact``) as a turn; ``usage`` has the fake
#: model report a context near its limit in the usage of H's next model request, and then
#: sends an ordinary turn; ``overflow`` has the fake model answer H's next model request
#: with its API's context-length error, once, and then sends an ordinary turn.
COMPACT_BY = ("command", "usage", "overflow")
#: The failures a ``prompt`` step's ``fault`` has the fake model answer that turn's first
#: model request with, in the API the agent speaks (``acp_fuzz.engine.gateway.faults``):
#: ``server-error`` (HTTP 500), ``rate-limited`` (429, ``Retry-After: 0``), ``overloaded``
#: (Anthropic's 529 ``overloaded_error``, a 503 elsewhere), ``connection-closed`` (the
#: connection closed before any answer), ``stream-cut`` (the answer cut after its first
#: event or half its body), ``not-json`` (a 200 whose body is an HTML page) and
#: ``slow-first-byte`` (the normal answer, after a delay). Once: a retry gets the normal
#: answer.
FAULTS = ("server-error", "rate-limited", "overloaded", "connection-closed", "stream-cut",
          "not-json", "slow-first-byte")
#: (A ``prompt`` step's ``with``, a handle, is another session whose turn is sent while this
#: turn's first model request is held: two turns in flight at once, then both awaited, and a
#: ``together`` verdict says how each ended.)
#: What a ``prompt`` step's ``during`` sends while the turn's first model request is held
#: open by the fake model (the model is thinking, deterministically): ``cancel`` a
#: ``session/cancel`` of the session, ``close`` a ``session/close`` of it, ``cancel-request``
#: a ``$/cancel_request`` of the turn's own ``session/prompt`` (these three are
#: :data:`CANCELLING`: each asks the agent to stop the turn), ``set-mode`` a
#: ``session/set_mode`` of the session to another of the modes it offered (choice ``pick``
#: among them, as a ``set_mode`` step; nothing is sent where it offered none), ``prompt`` a
#: second ``session/prompt`` of the session (its next turn, with its own nonce), ``fork`` a
#: ``session/fork`` of the session (no ``systemPrompt``: the fork inherits its source's)
#: whose copy is the handle ``new``, ``set-config`` a ``session/set_config_option`` of the
#: session (option ``option``, value ``pick``, as a ``set_config_option`` step; nothing is
#: sent where it offered none), ``delete`` a ``session/delete`` of it (the session is gone
#: once the agent accepts it). The hold is then released and the turn (and the request sent
#: during it) awaited; a ``during`` verdict says what came of each.
DURING = ("cancel", "close", "cancel-request", "set-mode", "prompt", "fork", "set-config",
          "delete")
#: The ``during`` requests that ask the agent to stop the turn.
CANCELLING = ("cancel", "close", "cancel-request")
#: The ``during`` requests that end the session once accepted (the step's answer is theirs).
ENDING = ("close", "delete")
#: The ``during`` requests that may switch the session's mode or model mid-turn.
SWITCHING = ("set-mode", "set-config")
#: The name of the compaction command a ``compact`` step sends (``/compact``) when the agent
#: advertises it (claude-agent-acp, codex-acp and the reference agent name it so).
COMPACT_COMMAND = "compact"


def advertises_compact(update: Any) -> bool:
    """Whether ``update`` lists the compaction command (named ``compact``, with or without its
    ``/``) in its ``availableCommands``: a ``session/update``'s ``available_commands_update``,
    or (v2) the result of ``session/new`` or ``session/resume``, which carries
    ``availableCommands`` itself (codex-acp advertises its commands only there)."""
    if not isinstance(update, Mapping) \
            or update.get("sessionUpdate", "available_commands_update") \
            != "available_commands_update":
        return False
    commands = update.get("availableCommands")
    return isinstance(commands, list) and any(
        isinstance(c, Mapping) and isinstance(c.get("name"), str)
        and c["name"].lstrip("/") == COMPACT_COMMAND for c in commands)

#: The logical session handles (``acp_fuzz.core.lifecycle.HANDLES``): one capital letter, and the
#: two sessions of the campaign's calibration. The runner names directories after them, so
#: nothing else may pass (no ``..``, no ``/``).
_HANDLES = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ") | {"baseline-1", "baseline-2"}
#: The methods an ``invalid`` step probes, each with a session id that cannot exist.
INVALID_METHODS = ("session/prompt", "session/load", "session/resume")
#: The old drafts' fields an ``extra`` may carry (strategies: ``_draw_prompt``), with the
#: values they may take. They must not rescue an invalid prompt.
EXTRA_FIELDS: dict[str, tuple[str, ...] | None] = {
    "systemPromptMode": ("append",), "sessionInstructions": None}  # None: any short string
#: The largest ``pick`` or ``option`` (the runner takes it modulo what the agent offers).
MAX_CHOICE = 1_000
#: The longest title, old-draft text or ``why`` label a step may carry.
MAX_LABEL = 1_000
#: How deep a ``systemPrompt`` value may nest (the strategies' deepest is 4).
MAX_PROMPT_DEPTH = 8
#: Keys a ``_meta`` inside a ``systemPrompt`` may have (the strategies' decorations), each
#: with a string value.
_PROMPT_META_KEYS = frozenset({"systemPrompt", "acpfuzz.dev/note", "text"})


def mcp_tool_for(session: str) -> str:
    """The name of the tool acp-fuzz's MCP server offers to session ``session`` (a handle)
    when a step names it: ``acpfuzz_mcp_`` and 10 hex digits of the handle, a canary that no
    other session's request may hold. The same in every run (a replay sends the same name);
    no nonce (the gateway ties requests by nonce)."""
    return "acpfuzz_mcp_" + hashlib.sha256(f"mcp:{session}".encode()).hexdigest()[:10]


def nonce_for(session: str, turn: int, salt: str = "") -> str:
    """The nonce the harness puts into turn ``turn`` of ``session``.

    It is derived from the logical handle, the turn number and the run's ``salt`` (random per
    run, see :class:`acp_fuzz.engine.campaign.runner.Run`), so the gateway can tie each model
    request to its turn, and another process cannot compute the nonce of a turn to forge a request
    for it. Comparisons across runs replace it with ``<nonce>`` (``replay.normalize_transcript``).
    """
    digest = hashlib.sha256(f"{salt}:{session}:{turn}".encode()).hexdigest()[:12]
    return f"acpfuzz-{digest}"


def prompt_text(session: str, turn: int, salt: str = "") -> str:
    """The text of the harness's ``session/prompt`` for this turn, nonce included."""
    nonce = nonce_for(session, turn, salt)
    return f"Reply with ok. This is turn {turn} of session {session}. [{nonce}]"


def invalid_params(method: str) -> dict[str, Any]:
    """The params of an ``invalid`` step's request: built here, never read from a cassette.
    The session id cannot exist, and the directory does not."""
    if method not in INVALID_METHODS:
        raise ValueError(f"step 'invalid': method {method!r} is not one acp-fuzz probes "
                         f"(one of {', '.join(INVALID_METHODS)})")
    if method == "session/prompt":
        return {"sessionId": "acp-fuzz-no-such-session",
                "prompt": [{"type": "text", "text": "hello"}]}
    return {"sessionId": "acp-fuzz-no-such-session", "cwd": "/nonexistent", "mcpServers": []}


def validate_step(step: Any) -> dict[str, Any]:
    """Check that ``step`` is a step the strategies could have drawn, and return it as a
    plain dict.

    Steps come from cassettes, which may come from strangers: anything else (an unknown key,
    a handle that is not a letter, a method acp-fuzz does not probe, params other than the
    ones it builds, a ``_meta`` or ``extra`` outside the known shapes) raises ``ValueError``
    with a one-line reason, before anything is sent."""
    if not isinstance(step, Mapping):
        raise ValueError(f"a step must be a map, got {type(step).__name__}")
    op = step.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"unknown step op {_short(op)}")
    unknown = sorted(map(_short, set(step) - KEYS[op] - {"op"}))
    if unknown:
        raise ValueError(f"step {op!r}: unknown key(s) {', '.join(unknown)}")
    needs_session = op not in SESSIONLESS
    if needs_session:
        _check_handle(op, "session", step.get("session"))
    if op == "fork":
        _check_handle(op, "new", step.get("new"))
    if op == "invalid":
        method = step.get("method")
        if not isinstance(method, str):
            raise ValueError("step 'invalid' needs a string 'method'")
        built = invalid_params(method)
        if "params" in step and step["params"] != built:
            raise ValueError(f"step 'invalid': params other than the ones acp-fuzz builds "
                             f"for {method}")
        _check_label(op, "why", step.get("why", ""))
    for key in ("pick", "option"):
        value = step.get(key, 0)
        if (op in ("set_mode", "set_config_option") or key in step) and (
                not isinstance(value, int) or isinstance(value, bool)
                or not 0 <= value <= MAX_CHOICE):
            raise ValueError(f"step {op!r}: {key!r} must be an integer from 0 to {MAX_CHOICE}")
    if not isinstance(step.get("cancel_request", False), bool):
        raise ValueError(f"step {op!r}: 'cancel_request' must be true or false")
    if step.get("cancel_request") and step.get("busy"):
        raise ValueError(f"step {op!r}: 'cancel_request' comes without 'busy'")
    if op == "new" and step.get("cwd", "distinct") not in ("distinct", "shared"):
        raise ValueError("step 'new': 'cwd' must be 'distinct' or 'shared'")
    if op in MOVES:
        if step.get("cwd", "same") not in ("same", "moved"):
            raise ValueError(f"step {op!r}: 'cwd' must be 'same' or 'moved'")
        roots = step.get("roots", 0)
        if not isinstance(roots, int) or isinstance(roots, bool) or not 0 <= roots <= MAX_ROOTS:
            raise ValueError(f"step {op!r}: 'roots' must be an integer from 0 to {MAX_ROOTS}")
    if not isinstance(step.get("mcp", False), bool):
        raise ValueError(f"step {op!r}: 'mcp' must be true or false")
    if op in REATTACHES and not isinstance(step.get("busy", False), bool):
        raise ValueError(f"step {op!r}: 'busy' must be true or false")
    if "while" in step and (step["while"] not in _HANDLES or step["while"] == step.get("session")
                            or step.get("busy") or step.get("cancel_request")):
        raise ValueError(f"step {op!r}: 'while' names another session's handle, whose turn "
                         f"runs meanwhile (and comes without 'busy' or 'cancel_request'), "
                         f"got {_short(step['while'])}")
    if op == "set_title":
        _check_label(op, "title", step.get("title", ""))
    if op == "compact" and step.get("by") not in COMPACT_BY:
        raise ValueError(f"step 'compact': 'by' must be one of {', '.join(COMPACT_BY)}, "
                         f"got {_short(step.get('by'))}")
    if op == "prompt":
        _check_turn(step)
    if "systemPrompt" in step:
        _check_prompt(op, step["systemPrompt"], 0)
    if "_meta" in step:
        _check_vendor_meta(op, step["_meta"])
    if "extra" in step:
        _check_extra(op, step["extra"])
    # A mark stands for megabytes (acp_fuzz.core.fills): a stranger's step must not make the
    # runner build more than one near-limit request of them.
    filled = sum(marks_in(json.dumps(step, ensure_ascii=False, default=repr)))
    if filled > MAX_EXPANDED:
        raise ValueError(f"step {op!r}: its fill marks stand for {filled} characters, more "
                         f"than the {MAX_EXPANDED} one request may carry")
    return dict(step)


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:40] + "..."


def _check_handle(op: str, key: str, value: object) -> None:
    if not isinstance(value, str) or value not in _HANDLES:
        raise ValueError(f"step {op!r}: {key!r} must be a session handle (one letter A-Z), "
                         f"got {_short(value)}")


def _check_label(op: str, key: str, value: object) -> None:
    if not isinstance(value, str) or len(value) > MAX_LABEL:
        raise ValueError(f"step {op!r}: {key!r} must be a string of at most {MAX_LABEL} "
                         f"characters")


def _check_prompt(op: str, value: object, depth: int) -> None:
    """A ``systemPrompt`` value: valid or not (invalid payloads are the point), but plain
    JSON of bounded depth, whose every ``_meta`` is a decoration the strategies draw (a few
    known keys with string texts), never a vendor's options."""
    if depth > MAX_PROMPT_DEPTH:
        raise ValueError(f"step {op!r}: 'systemPrompt' nests deeper than {MAX_PROMPT_DEPTH}")
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"step {op!r}: 'systemPrompt' holds a number JSON cannot carry")
        return
    if isinstance(value, list):
        for item in value:
            _check_prompt(op, item, depth + 1)
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"step {op!r}: 'systemPrompt' holds a {type(value).__name__}, "
                         f"not JSON")
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"step {op!r}: 'systemPrompt' has a key that is not a string")
        if key == "_meta":
            if not isinstance(item, Mapping) or not item or any(
                    k not in _PROMPT_META_KEYS or not isinstance(v, str)
                    for k, v in item.items()):
                raise ValueError(f"step {op!r}: a '_meta' in 'systemPrompt' other than the "
                                 f"decorations acp-fuzz draws")
            continue
        _check_prompt(op, item, depth + 1)


def _check_vendor_meta(op: str, meta: object) -> None:
    """A step's ``_meta``: exactly one of the vendor carriers of a legacy prompt
    (``strategies.payloads.VENDOR_CARRIERS``), with a string text and nothing else."""
    if op not in CARRIES_PROMPT:
        raise ValueError(f"step {op!r} cannot carry '_meta'")
    ok = False
    if isinstance(meta, Mapping) and len(meta) == 1:
        if "systemPrompt" in meta:
            sp = meta["systemPrompt"]
            ok = isinstance(sp, str) or (isinstance(sp, Mapping) and list(sp) == ["append"]
                                         and isinstance(sp["append"], str))
        elif "claudeCode" in meta:
            cc = meta["claudeCode"]
            opts = cc.get("options") if isinstance(cc, Mapping) and list(cc) == ["options"] \
                else None
            ok = isinstance(opts, Mapping) and list(opts) == ["systemPrompt"] \
                and isinstance(opts["systemPrompt"], str)
    if not ok:
        raise ValueError(f"step {op!r}: '_meta' is not one of the vendor prompt carriers "
                         f"acp-fuzz sends (_meta.systemPrompt, _meta.systemPrompt.append, "
                         f"_meta.claudeCode.options.systemPrompt, each a string)")


def _check_extra(op: str, extra: object) -> None:
    """A step's ``extra``: only the old drafts' fields (:data:`EXTRA_FIELDS`)."""
    if not isinstance(extra, Mapping):
        raise ValueError(f"step {op!r}: 'extra' must be a map of request params")
    for key, value in extra.items():
        if key not in EXTRA_FIELDS:
            raise ValueError(f"step {op!r}: 'extra' may carry only the old draft fields "
                             f"{', '.join(EXTRA_FIELDS)}, not {_short(key)}")
        allowed = EXTRA_FIELDS[key]
        if not isinstance(value, str) or len(value) > MAX_LABEL or (
                allowed is not None and value not in allowed):
            raise ValueError(f"step {op!r}: 'extra.{key}' has a value acp-fuzz never sends")


def prompt_params(step: Mapping[str, Any], dialect: str = "standard") -> dict[str, Any]:
    """The request params that carry a (validated) step's prompt, in ``dialect``: the
    standard field with the step's old-draft ``extra`` fields and vendor ``_meta`` beside
    it, or a legacy dialect's ``_meta`` (goose sends its prompt after the session exists)."""
    extra = dict(step.get("extra") or {}) if dialect == "standard" else {}
    if "systemPrompt" not in step:
        return extra
    sp = step["systemPrompt"]
    if dialect == "standard":
        meta = {"_meta": step["_meta"]} if isinstance(step.get("_meta"), Mapping) else {}
        return {**extra, "systemPrompt": sp, **meta}
    if dialect in ("claude-meta", "pi-meta") and sp is not None:
        return {"_meta": {"systemPrompt": encode_meta(sp)}}
    return {}


def lifecycle_request(step: Mapping[str, Any], *, protocol: int = 1,
                      dialect: str = "standard", session_id: str = "", cwd: str = "",
                      roots: Sequence[str] = (), mcp_servers: Sequence[Mapping[str, Any]] = (),
                      ) -> tuple[str, dict[str, Any]]:
    """The method and params that a (validated) ``new``, ``load``, ``resume``, ``fork`` or
    ``invalid`` step sends, given what the runner chose: the agent's ``session_id`` of the
    step's session, its ``cwd``, the ``roots`` directories, and the ``mcpServers`` of a step
    that says ``"mcp": true`` (the runner builds acp-fuzz's own server's command line: a step
    says only whether to name it, so a cassette never chooses a command). Else
    ``mcpServers: []``.

    Under ACP v2 a load goes out as a resume that replays from the start (SP-V2-NOLOAD-DEF).
    """
    op = step["op"]
    if op == "invalid":
        return step["method"], invalid_params(step["method"])
    sp = prompt_params(step, dialect)
    # v2 names the transport of every server ("type": "stdio"); v1's stdio entry has none.
    servers = [{**s, **({"type": "stdio"} if protocol >= 2 else {})} for s in mcp_servers] \
        if step.get("mcp") else []
    if op == "new":
        return "session/new", {"cwd": cwd, "mcpServers": servers, **sp}
    dirs = {"additionalDirectories": list(roots)} if roots else {}
    base = {"sessionId": session_id, "cwd": cwd, "mcpServers": servers, **dirs}
    if op == "fork":
        return "session/fork", {**base, **sp}
    if op == "load" and protocol >= 2:
        return "session/resume", {**base, "replayFrom": {"type": "start"}, **sp}
    if op in REATTACHES:
        return f"session/{op}", {**base, **sp}
    raise ValueError(f"step {op!r} is not a lifecycle request")


def preview(step: Mapping[str, Any], protocol: int = 1, dialect: str = "standard"
            ) -> tuple[str, dict[str, Any]] | None:
    """What a recorded step will send on replay, with the runner's choices as placeholders
    (``<id of A>``, ``<cwd of A>``): ``show --full`` and ``report`` print it. ``None`` for
    the steps whose request carries nothing of the cassette's (a turn, a close...)."""
    op = step.get("op")
    if op not in SENDS_STEP:
        return None
    handle = str(step.get("new" if op == "fork" else "session", ""))
    moved = step.get("cwd") == "moved"
    cwd = f"<new cwd of {handle}>" if moved else (
        "<shared cwd>" if step.get("cwd") == "shared" else f"<cwd of {handle}>")
    roots = [f"<root {i + 1}>" for i in range(int(step.get("roots", 0) or 0))]
    servers = [{"name": "acp-fuzz", "command": "<this python>", "env": [],
                "args": ["-m", "acp_fuzz.mcp_server", "--tool", mcp_tool_for(handle)]}]
    return lifecycle_request(step, protocol=protocol, dialect=dialect,
                             session_id=f"<id of {step.get('session', '')}>", cwd=cwd,
                             roots=roots, mcp_servers=servers)


def will_send(step: Any, protocol: int = 1, dialect: str = "standard",
              shorten: Callable[[Any], Any] | None = None) -> str | None:
    """One line for ``show --full`` and ``report``: the exact request a recorded step sends on
    replay (``sends METHOD {params}``, the runner's choices as placeholders), or why replay
    refuses it. ``None`` for a step whose request carries nothing of the cassette's.
    ``shorten`` maps the params before they are shown (the report clips long strings)."""
    try:
        valid = validate_step(step)
    except ValueError as e:
        return f"refused on replay: {e}"
    request = preview(valid, protocol, dialect if dialect in DIALECTS else "standard")
    if request is None:
        return None
    params = shorten(request[1]) if shorten is not None else request[1]
    line = f"sends {request[0]} {json.dumps(params, ensure_ascii=False)}"
    sizes = marks_in(json.dumps(request[1], ensure_ascii=False))
    if sizes:
        line += (" (each \u27eaacp-fuzz fill N\u27eb is sent as its filler, N characters: "
                 + ", ".join(f"{n:,}" for n in sizes) + "; docs/cassette-format.md)")
    return line


def _check_turn(step: Mapping[str, Any]) -> None:
    """A ``prompt`` step's own keys: a ``fault``, a ``during`` (with its ``pick`` or its
    fork's ``new``) or a ``with``, one at most."""
    if "fault" in step and step["fault"] not in FAULTS:
        raise ValueError(f"step 'prompt': 'fault' must be one of {', '.join(FAULTS)}, "
                         f"got {_short(step['fault'])}")
    if "during" in step and (step["during"] not in DURING or "fault" in step):
        raise ValueError(f"step 'prompt': 'during' must be one of {', '.join(DURING)} (and "
                         f"comes without a 'fault'), got {_short(step['during'])}")
    if "pick" in step and step.get("during") not in ("set-mode", "set-config"):
        raise ValueError("step 'prompt': 'pick' comes only with 'during': 'set-mode' or "
                         "'set-config'")
    if "option" in step and step.get("during") != "set-config":
        raise ValueError("step 'prompt': 'option' comes only with 'during': 'set-config'")
    if step.get("during") == "fork":
        _check_handle("prompt", "new", step.get("new"))
        if step["new"] == step.get("session"):
            raise ValueError("step 'prompt': a fork during the turn names another handle "
                             "('new') than its session")
    elif "new" in step:
        raise ValueError("step 'prompt': 'new' comes only with 'during': 'fork'")
    if "with" in step and (step["with"] not in _HANDLES or step["with"] == step.get("session")
                           or "fault" in step or "during" in step):
        raise ValueError(f"step 'prompt': 'with' names another session's handle (and comes "
                         f"without a 'fault' or a 'during'), got {_short(step['with'])}")


def describe(step: Mapping[str, Any], protocol: int = 1) -> str:
    """One human line for a step (used by ``show``, reports and progress), as the
    ``protocol`` version sends it (v2 sends a load as a resume that replays from the start)."""
    step = {"session": "?", "new": "?", **step}  # a hand-edited cassette's step may lack them
    op = step.get("op")
    if op == "load" and protocol >= 2:
        return f"session/resume {step['session']} (replayFrom start){_sp_dirs(step)}"
    sp = _sp_dirs(step)
    if op == "new":
        return f"session/new {step['session']}{sp}"
    if op == "fork":
        return f"session/fork {step['session']} -> {step['new']}{sp}"
    if op in REATTACHES:
        return f"session/{op} {step['session']}{sp}"
    if op == "prompt" and "fault" in step:
        return (f"session/prompt {step['session']} (its first model request fails once: "
                f"{step['fault']})")
    if op == "prompt" and "with" in step:
        return (f"session/prompt {step['session']} and session/prompt {step['with']} at once "
                f"(the second sent while the first's model request is held)")
    if op == "prompt" and "during" in step:
        sent = {"cancel": f"session/cancel {step['session']}",
                "close": f"session/close {step['session']}",
                "cancel-request": "$/cancel_request of the prompt",
                "set-mode": f"session/set_mode {step['session']} (another of its modes, "
                            f"choice {step.get('pick', 0)})",
                "prompt": f"a second session/prompt {step['session']}",
                "fork": f"session/fork {step['session']} -> {step['new']}",
                "set-config": f"session/set_config_option {step['session']} (option "
                              f"{step.get('option', 0)}, choice {step.get('pick', 0)})",
                "delete": f"session/delete {step['session']}",
                }.get(step["during"], "?")
        return f"session/prompt {step['session']} (and {sent} while its model request is held)"
    if op == "prompt":
        return f"session/prompt {step['session']}"
    if op == "set_mode":
        return (f"session/set_mode {step['session']} (another of its modes, "
                f"choice {step.get('pick', 0)})")
    if op == "set_config_option":
        return (f"session/set_config_option {step['session']} (option {step.get('option', 0)}, "
                f"another of its values, choice {step.get('pick', 0)})")
    if op == "set_title":
        return f"session/set_title {step['session']} ({len(str(step.get('title', '')))} chars)"
    if op == "cancel":
        return f"session/prompt {step['session']} + session/cancel"
    if op == "list":
        return "session/list"
    if op == "compact":
        how = {"command": "its compaction command, as a turn",
               "usage": "a turn whose model reply reports a context near its limit",
               "overflow": "a turn whose model request gets the context-length error once"}
        by = str(step.get("by"))
        return f"compact {step['session']} ({how.get(by, by)})"
    if op == "restart":
        return "restart the agent process"
    if op == "invalid":
        return f"{step.get('method')} (invalid request: unknown session id)"
    spec = spec_of(op)
    if spec is not None and spec.plain:  # a close, a delete, a query: its method, its session
        return f"{spec.method} {step['session']}"
    return str(op)


def elsewhere(step: Mapping[str, Any]) -> bool:
    """Whether a load, resume or fork step runs its session in a new directory or with
    additional roots (``"cwd": "moved"``, ``"roots"``)."""
    return step.get("op") in MOVES and (
        step.get("cwd") == "moved" or bool(step.get("roots")))


def _dirs_label(step: Mapping[str, Any]) -> str:
    if step.get("op") not in MOVES:
        return ""
    out = " in a new directory" if step.get("cwd") == "moved" else ""
    roots = step.get("roots", 0)
    out += f" with {roots} additional root(s)" if roots else ""
    if step.get("while"):
        out += f" while a turn of {step['while']} runs (its model request held)"
    return out + (" while a turn of it runs" if step.get("busy") else "")


def _sp_dirs(step: Mapping[str, Any]) -> str:
    return _sp_label(step) + _dirs_label(step) + (
        " (names acp-fuzz's MCP server)" if step.get("mcp") else "") + (
        " (and its $/cancel_request right behind it)" if step.get("cancel_request") else "")


def _sp_label(step: Mapping[str, Any]) -> str:
    extra = step.get("extra")
    if isinstance(extra, Mapping) and extra:
        return _sp_label({k: v for k, v in step.items() if k != "extra"})[:-1] \
            + f"; also {', '.join(sorted(map(str, extra)))})"
    if "systemPrompt" not in step:
        return " (systemPrompt omitted)"
    sp = step["systemPrompt"]
    if sp is None:
        return " (systemPrompt null)"
    if isinstance(sp, Mapping):
        mode = sp.get("mode")
        content = sp.get("content")
        n = len(content) if isinstance(content, list) else "?"
        size = prompt_length(sp)
        huge = f", {size:,} characters" if size >= 1024 * 1024 else ""
        return f" (systemPrompt {mode!r}, {n} block(s){huge})"
    return f" (systemPrompt {type(sp).__name__})"


def steps_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The steps a recorded history ran, in order (what a cassette replays)."""
    return [dict(e.data["args"]) for e in events if e.kind == "step"]
