"""Classify a ``systemPrompt`` payload at send time (pure).

acp-fuzz never trusts the strategy that generated a payload to say whether it is valid: the
classification is recomputed from the payload itself, the schema's shape and the capabilities
the agent advertised (docs/rules.md). The result says what the agent must, should or
may do with it, and which rule says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "DEFECTS",
    "DEFECT_BLOCKS",
    "INVALID_REASONS",
    "MODE_SPELLINGS",
    "OMIT",
    "VENDOR_MODE",
    "Capabilities",
    "Classification",
    "Defect",
    "Omit",
    "blocks_of",
    "classify",
    "defect_kind",
]


class Omit:
    """Marker: the ``systemPrompt`` key is left out of the request entirely."""

    _instance: Omit | None = None

    def __new__(cls) -> Omit:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OMIT"

    def __reduce__(self) -> str:
        return "OMIT"


OMIT = Omit()


#: The field metadata of a :class:`Capabilities` flag that ``initialize`` does not advertise.
_LEARNED = {"learned": True}


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an agent advertised in ``initialize`` that acp-fuzz cares about, read from the
    v1 placement (``agentCapabilities``) or, when the agent answered protocol version 2, the
    v2 one (``capabilities.session``)."""

    system_prompt: bool = False
    override: bool = False
    load: bool = False
    resume: bool = False
    fork: bool = False
    close: bool = False
    list: bool = False
    delete: bool = False
    #: ``sessionCapabilities.title``: the client may retitle a session (``session/set_title``).
    title: bool = False
    #: ``sessionCapabilities.status`` (UNSTABLE): the client may ask whether the agent has a
    #: session in memory (``session/status``), which must change nothing.
    status: bool = False
    #: ``sessionCapabilities.additionalDirectories``: new, load, resume and fork may carry
    #: ``additionalDirectories`` (extra workspace roots).
    additional_directories: bool = False
    #: The agent offers session modes (``session/new`` answered ``modes`` with at least two):
    #: not in ``initialize``, so the campaign learns it at calibration.
    set_mode: bool = field(default=False, metadata=_LEARNED)
    #: The agent offers a ``select`` config option with at least two values (a model, a
    #: reasoning effort): learned at calibration like ``set_mode``.
    set_config_option: bool = field(default=False, metadata=_LEARNED)
    #: v2: ``session/resume`` takes ``replayFrom`` (``{"type": "start"}`` replays the whole
    #: conversation, the v2 form of ``session/load``).
    replay: bool = False
    #: The agent advertised a ``compact`` command (``available_commands_update``): a
    #: ``compact`` step may send it as a turn. Learned at calibration, like ``set_mode``.
    compact_command: bool = field(default=False, metadata=_LEARNED)
    #: The fake model can make the agent compact by reporting a context near its limit in a
    #: reply's usage, or by the API's context-length error: the profile says so
    #: (``[compaction] by``), since nothing in ACP does.
    compact_usage: bool = field(default=False, metadata=_LEARNED)
    compact_overflow: bool = field(default=False, metadata=_LEARNED)

    @classmethod
    def advertised_flags(cls) -> tuple[str, ...]:
        """The flags an agent advertises in ``initialize``, in field order: the others are
        learned at calibration or from the profile, so that an agent never promised them
        (``capability.refused`` judges only these)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("learned"))

    def compactions(self) -> tuple[str, ...]:
        """The ways a ``compact`` step may make this agent compact (``steps.COMPACT_BY``)."""
        return tuple(by for by, ok in (("command", self.compact_command),
                                       ("usage", self.compact_usage),
                                       ("overflow", self.compact_overflow)) if ok)

    @classmethod
    def from_initialize(cls, result: Any) -> Capabilities:
        """Read the capabilities from an ``initialize`` result; anything malformed reads as
        unsupported (CAP-OMITTED-UNSUPPORTED-DEF)."""
        if not isinstance(result, Mapping):
            return cls()
        if result.get("protocolVersion") == 2:
            return cls._from_v2(result)
        caps = result.get("agentCapabilities")
        if not isinstance(caps, Mapping):
            return cls()
        sess = caps.get("sessionCapabilities")
        sess = sess if isinstance(sess, Mapping) else {}

        def marker(obj: Any, key: str) -> bool:
            # Object markers: omitted or null = unsupported, an object = supported.
            return isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping)

        sp = sess.get("systemPrompt")
        mode = sp.get("mode") if isinstance(sp, Mapping) else None
        return cls(
            system_prompt=isinstance(sp, Mapping),
            override=isinstance(sp, Mapping) and marker(mode, "override"),
            load=caps.get("loadSession") is True,
            resume=marker(sess, "resume"),
            fork=marker(sess, "fork"),
            close=marker(sess, "close"),
            list=marker(sess, "list"),
            delete=marker(sess, "delete"),
            title=marker(sess, "title"),
            status=marker(sess, "status"),
            additional_directories=marker(sess, "additionalDirectories"),
        )

    @classmethod
    def _from_v2(cls, result: Mapping[str, Any]) -> Capabilities:
        # v2 (docs/rules.md): a ``session`` object commits the agent to new, list,
        # resume (with replayFrom), close, prompt and cancel; the rest are object markers.
        # There is no session/load in v2 (SP-V2-NOLOAD-DEF).
        caps = result.get("capabilities")
        sess = caps.get("session") if isinstance(caps, Mapping) else None
        if not isinstance(sess, Mapping):
            return cls()
        sp = sess.get("systemPrompt")
        mode = sp.get("mode") if isinstance(sp, Mapping) else None

        def marker(key: str) -> bool:
            return isinstance(sess.get(key), Mapping)

        return cls(system_prompt=isinstance(sp, Mapping),
                   override=isinstance(mode, Mapping) and isinstance(mode.get("override"),
                                                                     Mapping),
                   resume=True, close=True, list=True, replay=True, fork=marker("fork"),
                   delete=marker("delete"), title=marker("title"), status=marker("status"),
                   additional_directories=marker("additionalDirectories"))

    def to_wire(self) -> dict[str, bool]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class Classification:
    """What a payload is, at send time.

    ``kind``: ``omitted`` (key absent), ``null``, ``valid``, ``invalid`` or ``probe`` (a
    payload sent to an agent that does not advertise the capability: a deliberate breach of
    SP-CLIENT-GATE-MUSTNOT, scored only for robustness). ``reason`` names the defect of an
    invalid payload; ``severity`` is what a *success* answer to it is worth (MUST, SHOULD or
    info) and ``rule`` the rule id that says so.
    """

    kind: str
    reason: str = ""
    severity: str = ""
    rule: str = ""

    @property
    def sends_prompt(self) -> bool:
        return self.kind in ("valid", "invalid", "probe")


# reason -> (severity of accepting it, rule id)
INVALID_REASONS: dict[str, tuple[str, str]] = {
    "mode-unknown": ("MUST", "SP-AGENT-UNKNOWN-MODE-MUST"),
    "mode-missing": ("MUST", "SP-AGENT-UNKNOWN-MODE-MUST"),
    "mode-not-string": ("MUST", "SP-AGENT-UNKNOWN-MODE-MUST"),
    "override-not-advertised": ("MUST", "SP-AGENT-UNKNOWN-MODE-MUST"),
    "block-not-text": ("MUST", "SP-AGENT-UNSUPPORTED-BLOCK-MUST"),
    "block-not-object": ("MUST", "SP-AGENT-UNSUPPORTED-BLOCK-MUST"),
    "text-missing": ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"),
    "text-not-string": ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"),
    "content-missing": ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"),
    "content-not-array": ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST"),
    # The RFD lets the agent accept or reject an empty array.
    "content-empty": ("info", "SP-AGENT-EMPTY-MAY"),
    # Earlier drafts (docs/rules.md): invalid now; an advertising agent *should*
    # reject. Not MUST: these are not prompts the agent "cannot apply", they are not prompts
    # at all, and one read as absent changes nothing. So the rule is a SHOULD of acp-fuzz's
    # own (findings.HARNESS_RULES), not a MUST of the spec with a SHOULD beside it.
    "draft-string": ("SHOULD", "ACPFUZZ-SCHEMA-SHAPE-SHOULD"),
    "draft-array": ("SHOULD", "ACPFUZZ-SCHEMA-SHAPE-SHOULD"),
    "not-object": ("SHOULD", "ACPFUZZ-SCHEMA-SHAPE-SHOULD"),
}


@dataclass(frozen=True, slots=True)
class Defect:
    """One way a ``systemPrompt`` payload is invalid: ``kind`` (what the strategies draw and
    a covering example names), ``family`` (the part of the payload that is broken: the
    strategies draw a family first, so that a rare one is not drowned out) and ``reason``
    (what :func:`classify` calls it, the key of :data:`INVALID_REASONS`: several kinds share
    one, as every unknown mode does)."""

    kind: str
    family: str
    reason: str


#: Every defect, the one table the strategies sample, the covering examples name and the
#: classifier reads. The order is the strategies' (changing it changes what each seed draws).
DEFECTS: tuple[Defect, ...] = (
    Defect("mode-unknown", "mode", "mode-unknown"),
    Defect("mode-vendor", "mode", "mode-unknown"),
    Defect("mode-missing", "mode", "mode-missing"),
    Defect("mode-not-string", "mode", "mode-not-string"),
    Defect("mode-spelling", "mode", "mode-unknown"),
    Defect("override-not-advertised", "mode", "override-not-advertised"),
    Defect("content-missing", "content", "content-missing"),
    Defect("content-not-array", "content", "content-not-array"),
    Defect("content-empty", "content", "content-empty"),
    Defect("block-image", "block", "block-not-text"),
    Defect("block-audio", "block", "block-not-text"),
    Defect("block-resource-link", "block", "block-not-text"),
    Defect("block-resource", "block", "block-not-text"),
    Defect("block-unknown", "block", "block-not-text"),
    Defect("block-not-object", "block", "block-not-object"),
    Defect("text-missing", "text", "text-missing"),
    Defect("text-not-string", "text", "text-not-string"),
    Defect("draft-string", "draft", "draft-string"),
    Defect("draft-array", "draft", "draft-array"),
    Defect("not-object", "draft", "not-object"),
)
_BY_KIND = {d.kind: d for d in DEFECTS}
#: The mode of the ``mode-vendor`` kind (an unknown mode in a vendor's namespace).
VENDOR_MODE = "_acpfuzz_vendor"
#: Mode spellings that are not ``append`` or ``override``, some of them near misses: the
#: ``mode-spelling`` kind's.
MODE_SPELLINGS = ("replace", "set", "Append", "", "append ")
#: The block each ``block-*`` kind puts after a valid text block.
DEFECT_BLOCKS: dict[str, Any] = {
    "block-image": {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
    "block-audio": {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
    "block-resource-link": {"type": "resource_link", "uri": "file:///etc/hosts",
                            "name": "hosts"},
    "block-resource": {"type": "resource", "resource": {
        "uri": "file:///x.md", "text": "x", "mimeType": "text/markdown"}},
    "block-unknown": {"type": "hologram", "text": "x"},
}
_BLOCK_KINDS = {block["type"]: kind for kind, block in DEFECT_BLOCKS.items()}


def defect_kind(payload: Any, *, override: bool) -> str | None:
    """The :data:`DEFECTS` kind ``payload`` is (read from the payload alone), or None for a
    valid one; ``override``: whether the agent advertises override mode. A defect no kind
    draws is named by its nearest (any other unknown mode is ``mode-unknown``, any other
    block type ``block-unknown``)."""
    if isinstance(payload, str):
        return "draft-string"
    if isinstance(payload, list):
        return "draft-array"
    if not isinstance(payload, Mapping):
        return "not-object"
    if "mode" not in payload:
        return "mode-missing"
    mode = payload["mode"]
    if not isinstance(mode, str):
        return "mode-not-string"
    if mode not in ("append", "override"):
        return "mode-vendor" if mode == VENDOR_MODE \
            else "mode-spelling" if mode in MODE_SPELLINGS else "mode-unknown"
    if mode == "override" and not override:
        return "override-not-advertised"
    if "content" not in payload:
        return "content-missing"
    content = payload["content"]
    if not isinstance(content, list):
        return "content-not-array"
    if not content:
        return "content-empty"
    for block in content:
        if not isinstance(block, Mapping):
            return "block-not-object"
        kind = block.get("type")
        if kind != "text":
            return _BLOCK_KINDS.get(kind, "block-unknown") if isinstance(kind, str) \
                else "block-unknown"
        if "text" not in block:
            return "text-missing"
        if not isinstance(block["text"], str):
            return "text-not-string"
    return None


def classify(payload: Any, caps: Capabilities, *, extra_params: Mapping[str, Any] | None = None,
             ) -> Classification:
    """Classify ``payload`` (the value of ``params.systemPrompt``, or :data:`OMIT`).

    ``extra_params`` are the request's other params: a sibling ``systemPromptMode`` (the July
    draft) makes an otherwise valid payload a draft-array case only when the payload is an
    array; as a lone unknown field it is ignored like any unknown field.
    """
    if payload is OMIT:
        return Classification("omitted")
    if payload is None:
        return Classification("null")
    if not caps.system_prompt:
        return Classification("probe", "not-advertised", "info", "SP-CLIENT-GATE-MUSTNOT")
    kind = defect_kind(payload, override=caps.override)
    if kind is None:
        return Classification("valid")
    reason = _BY_KIND[kind].reason
    severity, rule = INVALID_REASONS[reason]
    return Classification("invalid", reason, severity, rule)


def blocks_of(payload: Any) -> tuple[str, ...]:
    """The text of every well-formed text block of a payload (empty for anything else)."""
    if not isinstance(payload, Mapping):
        return ()
    content = payload.get("content")
    if not isinstance(content, list):
        return ()
    return tuple(b["text"] for b in content
                 if isinstance(b, Mapping) and b.get("type") == "text"
                 and isinstance(b.get("text"), str))
