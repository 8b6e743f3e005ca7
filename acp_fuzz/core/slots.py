"""Split a model request into slotted text segments, and tell which API a request speaks.

Everything here is pure: no I/O, no state. :func:`split_request` never raises, whatever
the body looks like; it skips what is not text.

Slots (see :data:`acp_fuzz.core.history.SLOTS`):

* ``system``: the API's system-level fields, *and* any message whose role is ``system`` or
  ``developer`` (claude-agent-acp puts a ``role:"system"`` entry inside ``messages``).
* ``user``: every text of the newest user turn (the last message with role ``user``),
  including tool-result text.
* ``history``: every other message or item of the conversation.
* ``other``: text anywhere else in the body (tool descriptions, metadata).

Locators look like ``system[2].text``, ``messages[0].content[1].text``,
``input[0].content[0].text`` or ``systemInstruction.parts[0].text``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from acp_fuzz.core.history import Segment

__all__ = [
    "APIS",
    "MODEL_APIS",
    "ModelApi",
    "detect_api",
    "split_request",
    "user_turn_is_tool_result",
]

class ModelApi(StrEnum):
    """The model APIs whose requests are model turns: the fake model answers, fails and holds
    each, a profile names one as its agent's (``api``), and the gateway ties and counts their
    requests. A ``str``, so that the plain names of a profile or a cassette compare equal."""

    OPENAI_RESPONSES = "openai.responses"
    ANTHROPIC_MESSAGES = "anthropic.messages"
    OPENAI_CHAT = "openai.chat"
    GEMINI = "gemini"


#: The model APIs, in the order a profile's documentation lists them.
MODEL_APIS: tuple[str, ...] = tuple(api.value for api in ModelApi)

#: Every value :func:`detect_api` can return.
APIS = (
    "openai.chat",
    "openai.responses",
    "anthropic.messages",
    "anthropic.count_tokens",
    "gemini",
    "models",
    "unknown",
)

_GEMINI_PATH = re.compile(r"/models/[^/:]+:(generateContent|streamGenerateContent|countTokens)$")

# Keys whose string values are identifiers, encodings or binary payloads, never prose. Walking
# into them would flood the segments with ids and base64 without adding anything to search.
_NOT_TEXT_KEYS = frozenset({
    "type", "role", "id", "call_id", "tool_use_id", "tool_call_id", "name", "status",
    "signature", "data", "media_type", "mime_type", "mimeType", "encrypted_content",
    "cache_control", "model", "image_url", "file_id", "file_url", "url", "inlineData",
    "inline_data", "fileData", "file_data", "thoughtSignature", "detail", "format",
})
# Keys of a conversation item, besides its content, that hold conversation text.
_ITEM_TEXT_KEYS = frozenset({"arguments", "output", "summary", "input", "action", "tool_calls",
                             "function_call", "refusal"})
# Top-level keys of each API that hold the conversation or system text; everything else is
# walked as ``other``.
_CONVERSATION_KEYS: Mapping[str, frozenset[str]] = {
    "anthropic.messages": frozenset({"system", "messages"}),
    "anthropic.count_tokens": frozenset({"system", "messages"}),
    "openai.chat": frozenset({"messages"}),
    "openai.responses": frozenset({"instructions", "input"}),
    "gemini": frozenset({"systemInstruction", "system_instruction", "contents"}),
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def detect_api(method: str, path: str) -> str:
    """Name the model API a request is for, from its HTTP method and path (query allowed).

    Returns one of :data:`APIS`: ``openai.chat`` (``POST …/chat/completions``),
    ``openai.responses`` (``POST …/responses``), ``anthropic.count_tokens``
    (``POST …/messages/count_tokens``), ``anthropic.messages`` (``POST …/messages``),
    ``gemini`` (``POST …/models/<m>:generateContent``, ``:streamGenerateContent`` or
    ``:countTokens``), ``models`` (``GET …/models``), else ``unknown``.
    """
    method = method.upper()
    bare = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    if method == "GET":
        return "models" if bare.endswith("/models") else "unknown"
    if method != "POST":
        return "unknown"
    if bare.endswith("/chat/completions"):
        return "openai.chat"
    if bare.endswith("/responses"):
        return "openai.responses"
    if bare.endswith("/messages/count_tokens"):
        return "anthropic.count_tokens"
    if bare.endswith("/messages"):
        return "anthropic.messages"
    if _GEMINI_PATH.search(bare):
        return "gemini"
    return "unknown"


def _key_path(base: str, key: str) -> str:
    step = key if _IDENT.match(key) else '["' + key.replace('"', '\\"') + '"]'
    if not base:
        return step
    return f"{base}.{step}" if _IDENT.match(key) else base + step


def _texts(obj: Any, path: str, *, skip_empty: bool = False) -> Iterator[tuple[str, str]]:
    """Every string leaf under ``obj`` with its locator, skipping identifier-like keys."""
    if isinstance(obj, str):
        if obj or not skip_empty:
            yield path, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if isinstance(key, str) and key not in _NOT_TEXT_KEYS:
                yield from _texts(value, _key_path(path, key), skip_empty=skip_empty)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _texts(value, f"{path}[{i}]", skip_empty=skip_empty)


def _segments(slot: str, obj: Any, path: str) -> list[Segment]:
    return [Segment(slot, p, t) for p, t in _texts(obj, path)]


def _last_index(items: list[Any], roles: tuple[str, ...]) -> int:
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if isinstance(item, Mapping) and item.get("role") in roles:
            return i
    return -1


def _conversation(items: Any, key: str, content_key: str, user_roles: tuple[str, ...],
                  system_roles: tuple[str, ...], *, string_is_user: bool = False,
                  ) -> list[Segment]:
    if isinstance(items, str) and string_is_user:
        # The Responses API accepts a bare string as the whole input: it is the user turn.
        return [Segment("user", key, items)]
    if not isinstance(items, list):
        return []
    last_user = _last_index(items, user_roles)
    out: list[Segment] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        role = item.get("role")
        if role in system_roles:
            slot = "system"
        elif i == last_user:
            slot = "user"
        else:
            slot = "history"
        base = f"{key}[{i}]"
        if content_key in item:
            out += _segments(slot, item[content_key], f"{base}.{content_key}")
        # Conversation text outside the content field (Responses function_call arguments and
        # outputs, reasoning summaries, chat tool_calls) stays in the item's slot; anything
        # else on an item (codex's additional_tools list, per-message config) is ``other``.
        for sub, value in item.items():
            if sub != content_key and isinstance(sub, str) and sub not in _NOT_TEXT_KEYS:
                sub_slot = slot if sub in _ITEM_TEXT_KEYS else "other"
                out += [Segment(sub_slot, p, t) for p, t in
                        _texts(value, _key_path(base, sub), skip_empty=sub_slot == "other")]
    return out


def _system_field(value: Any, path: str) -> list[Segment]:
    if isinstance(value, str):
        return [Segment("system", path, value)]
    return _segments("system", value, path) if isinstance(value, list | Mapping) else []


def _other(body: Mapping[str, Any], api: str) -> list[Segment]:
    handled = _CONVERSATION_KEYS.get(api, frozenset())
    out: list[Segment] = []
    for key, value in body.items():
        if isinstance(key, str) and key not in handled and key not in _NOT_TEXT_KEYS:
            out += [Segment("other", p, t) for p, t in _texts(value, _key_path("", key),
                                                                   skip_empty=True)]
    return out


def split_request(api: str, body: Any) -> list[Segment]:
    """Split every text of a model request body into slotted :class:`Segment` objects.

    ``api`` is what :func:`detect_api` returned. Segments come in body order: system and
    conversation fields first, then ``other``. Bodies of the wrong shape give fewer segments,
    never an exception.
    """
    if not isinstance(body, Mapping):
        return []
    out: list[Segment] = []
    if api in ("anthropic.messages", "anthropic.count_tokens"):
        out += _system_field(body.get("system"), "system")
        out += _conversation(body.get("messages"), "messages", "content", ("user",),
                             ("system",))
    elif api == "openai.chat":
        out += _conversation(body.get("messages"), "messages", "content", ("user",),
                             ("system", "developer"))
    elif api == "openai.responses":
        out += _system_field(body.get("instructions"), "instructions")
        out += _conversation(body.get("input"), "input", "content", ("user",),
                             ("system", "developer"), string_is_user=True)
    elif api == "gemini":
        for key in ("systemInstruction", "system_instruction"):
            if key in body:
                out += _system_field(body[key], key)
        out += _conversation(body.get("contents"), "contents", "parts", ("user",), ())
    out += _other(body, api)
    return out


def user_turn_is_tool_result(api: str, body: Any) -> bool:
    """True when the newest user message holds only tool results and no user prose.

    Anthropic and Gemini send tool results inside a ``user`` message, so in an agent's tool
    loop the newest user turn is not the prompt: the gateway then looks for the prompt's
    nonce in the history instead.
    """
    if not isinstance(body, Mapping):
        return False
    key, content_key, kinds = {
        "anthropic.messages": ("messages", "content", ("tool_result",)),
        "gemini": ("contents", "parts", ()),
    }.get(api, ("", "", ()))
    items = body.get(key) if key else None
    if not isinstance(items, list):
        return False
    last = _last_index(items, ("user",))
    if last < 0:
        return False
    parts = items[last].get(content_key)
    if not isinstance(parts, list) or not parts:
        return False
    for part in parts:
        if not isinstance(part, Mapping):
            return False
        if api == "gemini":
            if "functionResponse" not in part and "function_response" not in part:
                return False
        elif part.get("type") not in kinds:
            return False
    return True
