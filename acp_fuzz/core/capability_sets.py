"""Capability sets: what the stand-in agent of ``acp-fuzz client`` advertises (pure).

``acp-fuzz client`` tests an ACP *client* by playing the agent it talks to. Each example draws
one :class:`CapabilitySet` (Hypothesis shrinks it: every flag towards "not advertised", the
version towards 1), and the stand-in answers ``initialize`` with exactly that set
(:meth:`CapabilitySet.initialize_result`). The client oracles then read what was advertised
from the recorded ``initialize`` answer, never from the drawn set, so a cassette is judged by
what crossed the wire.

The flags (docs/rules.md):

``protocol``
    The newest ACP version the stand-in speaks, 1 or 2. It answers the client's offer when it
    speaks it, else its own newest one below it (INIT-VERSION-NEGOTIATE-DEF).
``system_prompt`` / ``override``
    ``sessionCapabilities.systemPrompt`` (``{}``), and ``mode.override`` inside it (override
    is only ever drawn with ``system_prompt``). v2 places it at ``capabilities.session``.
``load``, ``resume``, ``fork``, ``close``, ``list``
    ``loadSession`` and the ``sessionCapabilities`` markers of the same names. In v2 a
    ``session`` object commits the agent to resume, close and list, and there is no
    ``session/load``: there only ``fork`` (and the prompt flags) change what is advertised.
``shape``
    How the prompt capability says what it does not offer (issue #33 §3): ``""`` leaves it
    out; ``"null"`` sends ``systemPrompt: null`` (no ``systemPrompt``); ``"mode-null"`` sends
    ``{"mode": null}`` and ``"override-null"`` ``{"mode": {"override": null}}`` (append only).
    The schema reads each as its omitted form (CAP-OMITTED-UNSUPPORTED-DEF); a client that
    reads a ``null`` as advertised breaks the gate rules. Shrinks to ``""``.
``changes``
    From the client's second connection on, the stand-in advertises another prompt
    capability (:meth:`CapabilitySet.for_connection`): override dropped, or the whole
    ``systemPrompt``, or (where none was advertised) both added. A client that keeps what
    its first connection advertised breaks the gate rules on the next.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["FLAGS", "SHAPES", "STAND_IN_NAME", "CapabilitySet"]

#: The boolean flags, in the order they are drawn and printed.
FLAGS = ("system_prompt", "override", "load", "resume", "fork", "close", "list")
#: How the stand-in names itself in ``initialize``.
STAND_IN_NAME = "acp-fuzz-stand-in"

#: The spellings of a prompt capability's "not offered" (see ``shape``), smallest first.
SHAPES = ("", "null", "mode-null", "override-null")

#: The wire name of each flag, for messages ("v1: systemPrompt, loadSession").
_WIRE_NAMES = {"system_prompt": "systemPrompt", "override": "systemPrompt.mode.override",
               "load": "loadSession", "resume": "resume", "fork": "fork", "close": "close",
               "list": "list"}
_SHAPE_WIRE = {"null": "systemPrompt: null", "mode-null": "systemPrompt.mode: null",
               "override-null": "systemPrompt.mode.override: null"}
#: Flags that v2 does not let an agent leave out (or that v2 does not have).
_V2_FIXED = frozenset({"load", "resume", "close", "list"})


@dataclass(frozen=True)
class CapabilitySet:
    """One set of agent capabilities. Every field defaults to the smallest value."""

    protocol: int = 1
    system_prompt: bool = False
    override: bool = False
    load: bool = False
    resume: bool = False
    fork: bool = False
    close: bool = False
    list: bool = False
    shape: str = ""
    changes: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in (1, 2):
            raise ValueError(f"protocol must be 1 or 2, not {self.protocol!r}")
        if self.override and not self.system_prompt:
            raise ValueError("override is advertised only inside systemPrompt")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {self.shape!r}")
        if (self.shape == "null" and self.system_prompt) or (
                self.shape in ("mode-null", "override-null")
                and (not self.system_prompt or self.override)):
            raise ValueError(f"shape {self.shape!r} spells a capability the set advertises")

    def for_connection(self, n: int) -> CapabilitySet:
        """What connection ``n`` (0 for the first) is advertised: the set itself, or under
        ``changes``, from the second connection on, its prompt capability changed: override
        dropped, else ``systemPrompt`` dropped, else both added (the spelling plain)."""
        if not self.changes or n == 0:
            return self
        if self.override:
            sp, override = True, False
        elif self.system_prompt:
            sp, override = False, False
        else:
            sp, override = True, True
        return replace(self, system_prompt=sp, override=override, shape="", changes=False)

    def smaller(self) -> tuple[CapabilitySet, ...]:
        """The sets one step smaller than this one (one thing fewer advertised, the version
        down to 1, the plain spelling, no change between connections): what the client
        campaign's shrinker tries for a covering set's failure. Sets the rules forbid (a
        null spelling of a capability advertised) are left out."""
        out: builtins.list[CapabilitySet] = []
        steps: tuple[tuple[str, Any], ...] = (("changes", False), ("shape", ""), ("protocol", 1),
                                              *((f, False) for f in reversed(FLAGS)))
        for name, value in steps:
            if getattr(self, name) == value:
                continue
            try:
                out.append(replace(self, **{name: value}))
            except ValueError:
                continue  # e.g. systemPrompt dropped while override or a null form needs it
        return tuple(out)

    @classmethod
    def covering(cls) -> tuple[CapabilitySet, ...]:
        """The sets every client campaign runs first, whatever the seed: nothing advertised
        (the smallest, Hypothesis's own first draw), then everything advertised and kept
        across connections, in v1 and in v2, so that a client is judged at least once with
        override offered and on re-sending at load, resume and fork (a random draw keeps the
        prompt capability on every connection of a reattaching scenario only now and then)."""
        return (cls(), cls(1, True, True, True, True, True, True, True),
                cls(2, True, True, fork=True))

    # -- what is advertised ------------------------------------------------------------------

    def version_for(self, offer: Any) -> int:
        """The version answered to an ``initialize`` offer: the offer when the stand-in
        speaks it, else its newest below it; 1 for an offer that is not an integer >= 1
        (the answer then lets the client see what it gets)."""
        if not isinstance(offer, int) or isinstance(offer, bool) or offer < 1:
            return 1
        return min(offer, self.protocol)

    def advertised(self, version: int | None = None) -> tuple[str, ...]:
        """The flags that change what is advertised, at ``version`` (default: the newest the
        set speaks): the wire names, in :data:`FLAGS` order."""
        v = self.protocol if version is None else version
        return tuple(_WIRE_NAMES[f] for f in FLAGS
                     if getattr(self, f) and not (v >= 2 and f in _V2_FIXED))

    def size(self) -> int:
        """How many capabilities are advertised (the version above 1 counts as one): what
        shrinking makes small."""
        return sum(bool(getattr(self, f)) for f in FLAGS) + (self.protocol - 1) \
            + bool(self.shape) + self.changes

    def describe(self) -> str:
        """``"v1: systemPrompt, loadSession"``, or ``"v1: nothing advertised"``."""
        names = self.advertised()
        out = f"v{self.protocol}: " + (", ".join(names) if names else "nothing advertised")
        if self.shape:
            out += f" ({_SHAPE_WIRE[self.shape]})"
        return out + (" (then changed)" if self.changes else "")

    def initialize_result(self, offer: Any, *, version: str = "0") -> dict[str, Any]:
        """The stand-in's ``initialize`` answer to an offer of ``offer``."""
        v = self.version_for(offer)
        sp: dict[str, Any] | None = None
        if self.system_prompt:
            nulls: dict[str, dict[str, Any]] = {"mode-null": {"mode": None},
                                                "override-null": {"mode": {"override": None}}}
            sp = {"mode": {"override": {}}} if self.override else nulls.get(self.shape, {})
        info = {"name": STAND_IN_NAME, "version": version}
        if v >= 2:
            session: dict[str, Any] = {}
            if self.fork:
                session["fork"] = {}
            if sp is not None or self.shape == "null":
                session["systemPrompt"] = sp
            return {"protocolVersion": 2, "info": info, "capabilities": {"session": session},
                    "authMethods": []}
        sess: dict[str, Any] = {name: {} for name in ("resume", "fork", "close", "list")
                                if getattr(self, name)}
        if sp is not None or self.shape == "null":
            sess["systemPrompt"] = sp
        return {"protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": self.load,
                    "promptCapabilities": {"image": False, "audio": False,
                                           "embeddedContext": False},
                    "sessionCapabilities": sess},
                "authMethods": [], "agentInfo": info}

    # -- plain data --------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, obj: Any) -> CapabilitySet:
        """The set of a :meth:`to_wire` map; ``ValueError`` (one line) when it is not one.
        Unknown keys are ignored (a cassette from a newer acp-fuzz)."""
        if not isinstance(obj, Mapping):
            raise ValueError("a capability set must be a map")
        protocol = obj.get("protocol", 1)
        if protocol not in (1, 2) or isinstance(protocol, bool):
            raise ValueError(f"capability set: protocol must be 1 or 2, not {protocol!r}")
        flags: dict[str, bool] = {}
        for name in (*FLAGS, "changes"):
            value = obj.get(name, False)
            if not isinstance(value, bool):
                raise ValueError(f"capability set: {name} must be true or false")
            flags[name] = value
        shape = obj.get("shape", "")
        if shape not in SHAPES:
            raise ValueError(f"capability set: shape must be one of {', '.join(map(repr, SHAPES))}")
        try:
            return cls(protocol=protocol, shape=shape, **flags)
        except ValueError as e:
            raise ValueError(f"capability set: {e}") from None
