"""Deterministic fake-model replies, byte for byte.

Each API gets the payload shapes that real agents accepted (``docs/real-agents.md`` §8).
Nothing here reads a clock or a random source: ids are derived from the request itself and
``created`` timestamps are a fixed constant, so the same request always gets the same bytes.

Structured-output requests (title generators, routers) get the smallest JSON value that is
valid for their schema (:func:`minimal_value`), because agents parse those replies.

A :class:`Pressure` makes one reply say that the context is (nearly) full, which is how the
fake model makes an agent compact by itself: ``usage`` reports ``tokens`` input tokens in
every usage field of the API (streamed and not), ``overflow`` answers with the API's own
context-length error (:func:`context_length_error`), shaped as the official SDKs read it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.slots import ModelApi

__all__ = [
    "CREATED",
    "Pressure",
    "Reply",
    "build_reply",
    "context_length_error",
    "extract_reply_text",
    "minimal_value",
    "structured_schema",
]

#: The fixed ``created`` / ``created_at`` timestamp of every reply (2025-01-01T00:00:00Z).
CREATED = 1735689600
DEFAULT_MODEL = "fake-model"
_MAX_DEPTH = 32
_MAX_NODES = 10_000
_MAX_ITEMS = 1_000


@dataclass(frozen=True)
class Reply:
    """An HTTP response the gateway sends: status, headers and the full body."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class Pressure:
    """What one reply says about the context: ``kind`` ``"usage"`` (a normal reply whose usage
    reports ``tokens`` input tokens) or ``"overflow"`` (the context-length error, saying the
    request had ``tokens`` tokens where ``window`` is the most the model takes)."""

    kind: str
    tokens: int
    window: int


#: The input tokens every reply reports without pressure.
INPUT_TOKENS = 10


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _json(status: int, obj: Any, text: str = "", **headers: str) -> Reply:
    return Reply(status, _dumps(obj).encode(), "application/json", headers, text)


# -- structured output -------------------------------------------------------------------------


def _resolve_ref(ref: str, root: Any) -> Any:
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node


def _bound(value: Any) -> int | float | None:
    # Python's json accepts Infinity and NaN; neither can bound a reply value.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    value: int | float = 1
    lo, xlo = _bound(schema.get("minimum")), _bound(schema.get("exclusiveMinimum"))
    hi, xhi = _bound(schema.get("maximum")), _bound(schema.get("exclusiveMaximum"))
    if lo is not None:
        value = lo
    if xlo is not None:
        value = xlo + 1 if integer else xlo + 0.5
    if hi is not None and value > hi:
        value = hi
    if xhi is not None and value >= xhi:
        value = xhi - 1 if integer else xhi - 0.5
    if integer:
        value = int(value) if float(value).is_integer() else int(value) + 1
    return value


def _string(schema: Mapping[str, Any]) -> str:
    text = "ok"
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if isinstance(lo, int) and lo > len(text):
        text = (text * min(lo, 1 << 20))[:lo]
    if isinstance(hi, int) and 0 <= hi < len(text):
        text = text[:hi]
    return text


def minimal_value(schema: Any, root: Any = None) -> Any:
    """The smallest JSON value valid for a JSON Schema (or a Gemini OpenAPI-style schema).

    First ``enum`` value or ``const``; objects get every ``required`` property; strings are
    ``"ok"`` (stretched or cut to ``minLength``/``maxLength``); integers and numbers their
    ``minimum`` or 1; booleans ``false``; arrays ``minItems`` minimal items; ``null`` for
    null. ``$ref`` to ``#/…`` is followed, ``anyOf``/``oneOf`` take their first branch and
    ``allOf`` branches are merged. Upper-case Gemini types (``OBJECT``) are understood.

    Work is bounded (depth, node count, array length), so a hostile schema, such as a
    recursive ``$ref`` or a huge ``minItems``, gets a quick, possibly invalid, answer.
    """
    return _minimal(schema, schema if root is None else root, 0, [_MAX_NODES])


def _minimal(schema: Any, root: Any, _depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if _depth > _MAX_DEPTH or budget[0] < 0 or not isinstance(schema, Mapping):
        return "ok" if schema is not False else None
    if isinstance(schema.get("$ref"), str):
        return _minimal(_resolve_ref(schema["$ref"], root), root, _depth + 1, budget)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return _minimal(branches[0], root, _depth + 1, budget)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for branch in schema["allOf"]:
            if isinstance(branch, Mapping):
                if isinstance(branch.get("$ref"), str):
                    branch = _resolve_ref(branch["$ref"], root)
                if not isinstance(branch, Mapping):
                    continue
                for k, v in branch.items():
                    if k == "properties" and isinstance(v, Mapping):
                        merged["properties"] = {**merged.get("properties", {}), **v}
                    elif k == "required" and isinstance(v, list):
                        merged["required"] = [*merged.get("required", []), *v]
                    else:
                        merged.setdefault(k, v)
        return _minimal(merged, root, _depth + 1, budget)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    kind = kind.lower() if isinstance(kind, str) else None
    if kind is None:
        kind = "object" if "properties" in schema or "required" in schema else (
            "array" if "items" in schema else "string")
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = schema.get("required")
        names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        return {n: _minimal(props.get(n, {}), root, _depth + 1, budget) for n in names}
    if kind == "array":
        count = schema.get("minItems")
        count = min(count, _MAX_ITEMS) if isinstance(count, int) and count > 0 else 0
        items = schema.get("items", {})
        prefix = schema.get("prefixItems")
        out = []
        for i in range(count):
            if isinstance(prefix, list) and i < len(prefix):
                out.append(_minimal(prefix[i], root, _depth + 1, budget))
            else:
                out.append(_minimal(items, root, _depth + 1, budget))
        return out
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _string(schema)


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def structured_schema(api: str, body: Any) -> Mapping[str, Any] | None:
    """The JSON schema a structured-output request asks for, or ``None`` for a free-text one.

    Signals: Anthropic ``output_config.format`` of type ``json_schema``; Responses
    ``text.format`` of type ``json_schema``; Chat ``response_format`` of type
    ``json_schema`` (``json_object`` gives ``{"type": "object"}``); Gemini
    ``generationConfig.responseMimeType == "application/json"`` with ``responseJsonSchema``
    or ``responseSchema`` (neither: ``{"type": "object"}``).
    """
    if not isinstance(body, Mapping):
        return None
    schema: Any = None
    if api in ("anthropic.messages", "anthropic.count_tokens"):
        fmt = _get(body, "output_config", "format")
        if _get(fmt, "type") == "json_schema":
            schema = _get(fmt, "schema")
    elif api == "openai.responses":
        fmt = _get(body, "text", "format")
        if _get(fmt, "type") == "json_schema":
            schema = _get(fmt, "schema")
    elif api == "openai.chat":
        fmt = body.get("response_format")
        if _get(fmt, "type") == "json_schema":
            schema = _get(fmt, "json_schema", "schema")
        elif _get(fmt, "type") == "json_object":
            schema = {"type": "object"}
    elif api == "gemini":
        config = body.get("generationConfig", body.get("generation_config"))
        mime = _get(config, "responseMimeType") or _get(config, "response_mime_type")
        if mime == "application/json":
            for key in ("responseJsonSchema", "response_json_schema", "responseSchema",
                        "response_schema"):
                if isinstance(_get(config, key), Mapping):
                    schema = _get(config, key)
                    break
            else:
                schema = {"type": "object"}
    else:
        return None
    if schema is None:
        return None
    return schema if isinstance(schema, Mapping) else {}


def reply_text_for(api: str, body: Any, default: str) -> str:
    """The text the fake model answers with: schema-minimal JSON, or ``default``."""
    schema = structured_schema(api, body)
    if schema is None:
        return default
    return _dumps(minimal_value(schema))


# -- payloads ----------------------------------------------------------------------------------


def _sse(events: list[tuple[str | None, Any]], sep: str = "\n\n") -> bytes:
    chunks = []
    for name, data in events:
        payload = data if isinstance(data, str) else _dumps(data)
        chunks.append((f"event: {name}\n" if name else "") + f"data: {payload}{sep}")
    return "".join(chunks).encode()


def _sse_reply(body: bytes, text: str, **headers: str) -> Reply:
    return Reply(200, body, "text/event-stream", {"cache-control": "no-cache", **headers}, text)


def _responses(model: str, ident: str, text: str, stream: bool,
               tokens: int = INPUT_TOKENS) -> Reply:
    msg = f"msg_{ident}"
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": msg, "type": "message", "status": "completed", "role": "assistant",
            "content": [part]}
    usage = {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": tokens + 1}
    base = {"id": f"resp_{ident}", "object": "response", "created_at": CREATED,
            "status": "in_progress", "model": model, "output": [], "usage": None, "error": None,
            "incomplete_details": None, "instructions": None, "tools": [],
            "parallel_tool_calls": True, "tool_choice": "auto"}
    done = {**base, "status": "completed", "output": [item], "usage": usage}
    if not stream:
        return _json(200, done, text)
    at = {"item_id": msg, "output_index": 0, "content_index": 0}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": base}),
        ("response.in_progress", {"response": base}),
        ("response.output_item.added", {"output_index": 0, "item": {
            **item, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
        ("response.output_text.delta", {**at, "delta": text}),
        ("response.output_text.done", {**at, "text": text}),
        ("response.content_part.done", {**at, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done}),
    ]
    events: list[tuple[str | None, Any]] = [
        (name, {"type": name, **data, "sequence_number": i})
        for i, (name, data) in enumerate(steps)
    ]
    return _sse_reply(_sse(events), text)


def _chat(model: str, ident: str, text: str, body: Mapping[str, Any], stream: bool,
          tokens: int = INPUT_TOKENS) -> Reply:
    usage = {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1}
    env = {"id": f"chatcmpl-{ident}", "created": CREATED, "model": model}
    if not stream:
        return _json(200, {**env, "object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"}], "usage": usage}, text)
    env["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**env, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": ""}, None)),
        (None, chunk({"content": text}, None)),
        (None, chunk({}, "stop")),
    ]
    if _get(body, "stream_options", "include_usage") is True:
        events.append((None, {**env, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return _sse_reply(_sse(events), text)


def _anthropic(model: str, ident: str, text: str, stream: bool,
               tokens: int = INPUT_TOKENS) -> Reply:
    usage = {"input_tokens": tokens, "output_tokens": 1, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    message: dict[str, Any] = {
        "id": f"msg_{ident}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    headers = {"request-id": f"req_{ident}"}
    if not stream:
        return _json(200, {**message, "content": [{"type": "text", "text": text}],
                           "stop_reason": "end_turn"}, text, **headers)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        # The cumulative usage: the Messages API repeats the input tokens here.
        ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"input_tokens": tokens, "output_tokens": 1}}),
        ("message_stop", {}),
    ]
    events: list[tuple[str | None, Any]] = [(n, {"type": n, **d}) for n, d in steps]
    return _sse_reply(_sse(events), text, **headers)


def _gemini(model: str, text: str, action: str, query: str,
            tokens: int = INPUT_TOKENS) -> Reply:
    if action == "countTokens":
        return _json(200, {"totalTokens": tokens})
    g = {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                         "finishReason": "STOP", "index": 0}],
         "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": 1,
                           "totalTokenCount": tokens + 1},
         "modelVersion": model}
    if action != "streamGenerateContent":
        return _json(200, g, text)
    if "alt=sse" in query.split("&"):
        return _sse_reply(_sse([(None, g)], sep="\r\n\r\n"), text)
    return _json(200, [g], text)


def _models(path: str) -> Reply:
    if "/v1beta/" in path + "/":
        return _json(200, {"models": [{
            "name": f"models/{DEFAULT_MODEL}", "displayName": "Fake Model", "version": "1",
            "inputTokenLimit": 128000, "outputTokenLimit": 4096,
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent",
                                           "countTokens"]}]})
    # One list that both the OpenAI and the Anthropic SDK can parse.
    return _json(200, {"object": "list", "data": [{
        "id": DEFAULT_MODEL, "object": "model", "type": "model", "created": CREATED,
        "created_at": "2025-01-01T00:00:00Z", "display_name": "Fake Model",
        "owned_by": "acp-fuzz"}], "has_more": False, "first_id": DEFAULT_MODEL,
        "last_id": DEFAULT_MODEL})


def not_found(message: str) -> Reply:
    """The JSON 404 for any path the gateway does not serve."""
    return _json(404, {"error": {"type": "not_found", "message": message}})


def _request_id(api: str, path: str, raw: bytes) -> str:
    return hashlib.sha256(b"%s\0%s\0%s" % (api.encode(), path.encode(), raw)).hexdigest()[:24]


def context_length_error(api: str, tokens: int, window: int, ident: str = "") -> Reply:
    """The HTTP 400 each API answers a request longer than the model's context with, as its
    official SDK reads it (``openai.BadRequestError`` with ``code`` ``context_length_exceeded``;
    ``anthropic.BadRequestError`` of type ``invalid_request_error``; Gemini's
    ``INVALID_ARGUMENT``). Its message says ``tokens`` > ``window``, in each API's words, which
    agents match to tell it from other 400s."""
    if api == "anthropic.messages":
        message = f"prompt is too long: {tokens} tokens > {window} maximum"
        return _json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                      "message": message},
                           "request_id": f"req_{ident}"}, **{"request-id": f"req_{ident}"})
    if api == "gemini":
        message = (f"The input token count ({tokens}) exceeds the maximum number of tokens "
                   f"allowed ({window}).")
        return _json(400, {"error": {"code": 400, "message": message,
                                     "status": "INVALID_ARGUMENT"}})
    message = (f"This model's maximum context length is {window} tokens. However, your "
               f"messages resulted in {tokens} tokens. Please reduce the length of the "
               f"messages.")
    param = "input" if api == "openai.responses" else "messages"
    return _json(400, {"error": {"message": message, "type": "invalid_request_error",
                                 "param": param, "code": "context_length_exceeded"}})


#: The APIs whose replies :class:`Pressure` changes (the generating endpoints): every model API.
PRESSED_APIS = frozenset(ModelApi)


def build_reply(api: str, method: str, path: str, body: Any, raw: bytes,
                default_text: str = "ok", pressure: Pressure | None = None) -> Reply:
    """The full fake reply for one request.

    ``path`` includes the query; ``body`` is the parsed JSON (or anything else) and ``raw``
    the request bytes, which seed the reply ids. The returned :class:`Reply` carries the text
    it answered with in ``text`` (empty for non-generating endpoints). ``pressure`` (for a
    generating endpoint, :data:`PRESSED_APIS`) makes the reply report a context near its
    limit, or the context-length error (see :class:`Pressure`).
    """
    bare, _, query = path.partition("?")
    ident = _request_id(api, path, raw)
    obj: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    model = obj.get("model")
    model = model if isinstance(model, str) and model else DEFAULT_MODEL
    stream = obj.get("stream") is True
    if api == "models":
        return _models(bare)
    if api == "anthropic.count_tokens":
        return _json(200, {"input_tokens": 10})
    if api == "unknown":
        return not_found(f"acp-fuzz fake model: no route for {method} {bare}")
    if pressure is not None and pressure.kind == "overflow":
        return context_length_error(api, pressure.tokens, pressure.window, ident)
    tokens = pressure.tokens if pressure is not None else INPUT_TOKENS
    text = reply_text_for(api, body, default_text)
    if api == "openai.responses":
        return _responses(model, ident, text, stream, tokens)
    if api == "openai.chat":
        return _chat(model, ident, text, obj, stream, tokens)
    if api == "anthropic.messages":
        return _anthropic(model, ident, text, stream, tokens)
    # gemini: the model and the action are in the path, not the body.
    tail = bare.rsplit("/models/", 1)[-1]
    gemini_model, _, action = tail.partition(":")
    return _gemini(gemini_model or DEFAULT_MODEL, text, action, query, tokens)


# -- reading replies (upstream mode) -----------------------------------------------------------


def _decompress(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    try:
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(data)
        if encoding == "deflate":
            return zlib.decompress(data)
    except (OSError, zlib.error, EOFError):
        return data
    return data


def _texts_of(api: str, obj: Any) -> list[str]:
    """Output text in one (streamed or whole) response object of ``api``."""
    out: list[str] = []
    if not isinstance(obj, Mapping):
        if isinstance(obj, list):
            for item in obj:
                out += _texts_of(api, item)
        return out
    if api == "openai.responses":
        if obj.get("type") == "response.output_text.delta" and isinstance(obj.get("delta"), str):
            out.append(obj["delta"])
        elif obj.get("object") == "response":
            for item in obj.get("output") or []:
                for part in _get(item, "content") or []:
                    if _get(part, "type") == "output_text" and isinstance(_get(part, "text"), str):
                        out.append(part["text"])
    elif api == "openai.chat":
        for choice in obj.get("choices") or []:
            for key in ("delta", "message"):
                content = _get(choice, key, "content")
                if isinstance(content, str):
                    out.append(content)
    elif api == "anthropic.messages":
        delta_text = _get(obj, "delta", "text")
        if obj.get("type") == "content_block_delta" and isinstance(delta_text, str):
            out.append(delta_text)
        elif obj.get("type") == "message":
            for block in obj.get("content") or []:
                if _get(block, "type") == "text" and isinstance(_get(block, "text"), str):
                    out.append(block["text"])
    elif api == "gemini":
        for cand in obj.get("candidates") or []:
            for part in _get(cand, "content", "parts") or []:
                if isinstance(_get(part, "text"), str) and not _get(part, "thought"):
                    out.append(part["text"])
    return out


def extract_reply_text(api: str, content_type: str, data: bytes,
                       content_encoding: str = "") -> str:
    """Best-effort output text of a real model's reply (used to record upstream replies).

    Understands SSE and JSON bodies of every API :func:`build_reply` speaks; anything it
    cannot read gives ``""``.
    """
    text = _decompress(data, content_encoding).decode("utf-8", errors="replace")
    if "event-stream" in content_type:
        out: list[str] = []
        for line in text.splitlines():
            if line.startswith("data:"):
                try:
                    out += _texts_of(api, json.loads(line[5:].strip()))
                except ValueError:
                    continue
        return "".join(out)
    try:
        return "".join(_texts_of(api, json.loads(text)))
    except ValueError:
        return ""
