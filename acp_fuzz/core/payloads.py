"""Classify a ``systemPrompt`` payload at send time (pure).

acp-fuzz never trusts the strategy that generated a payload to say whether it is valid: the
classification is recomputed from the payload itself, the schema's shape and the capabilities
the agent advertised (docs/rules.md). The result says what the agent must, should or
may do with it, and which rule says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OMIT",
    "Capabilities",
    "Classification",
    "Omit",
    "blocks_of",
    "classify",
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
    #: ``sessionCapabilities.additionalDirectories``: new, load, resume and fork may carry
    #: ``additionalDirectories`` (extra workspace roots).
    additional_directories: bool = False
    #: The agent offers session modes (``session/new`` answered ``modes`` with at least two):
    #: not in ``initialize``, so the campaign learns it at calibration.
    set_mode: bool = False
    #: The agent offers a ``select`` config option with at least two values (a model, a
    #: reasoning effort): learned at calibration like ``set_mode``.
    set_config_option: bool = False
    #: v2: ``session/resume`` takes ``replayFrom`` (``{"type": "start"}`` replays the whole
    #: conversation, the v2 form of ``session/load``).
    replay: bool = False
    #: The agent advertised a ``compact`` command (``available_commands_update``): a
    #: ``compact`` step may send it as a turn. Learned at calibration, like ``set_mode``.
    compact_command: bool = False
    #: The fake model can make the agent compact by reporting a context near its limit in a
    #: reply's usage, or by the API's context-length error: the profile says so
    #: (``[compaction] by``), since nothing in ACP does.
    compact_usage: bool = False
    compact_overflow: bool = False

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
                   delete=marker("delete"), title=marker("title"),
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
    reason = _defect(payload, caps)
    if reason is None:
        return Classification("valid")
    severity, rule = INVALID_REASONS[reason]
    return Classification("invalid", reason, severity, rule)


def _defect(payload: Any, caps: Capabilities) -> str | None:
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
        return "mode-unknown"
    if mode == "override" and not caps.override:
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
        if block.get("type") != "text":
            return "block-not-text"
        if "text" not in block:
            return "text-missing"
        if not isinstance(block["text"], str):
            return "text-not-string"
    return None


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
