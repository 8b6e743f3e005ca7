"""The lifecycle ops: one table of what each step op is (pure).

A step (:mod:`acp_fuzz.core.steps`) names an *op*: ``new``, ``prompt``, ``load`` ... Several
parts of acp-fuzz ask the same questions of an op: the strategies (what may be drawn where),
the lifecycle model (what it needs and what it does to the sessions), the runner (what it
sends), the minimizer (which keys it may drop), the covering examples, the oracles and the
reports (does it carry a ``systemPrompt``? does it reattach a session?). They all read the
answers from :data:`TABLE`, one :class:`OpSpec` per op, and from the families derived from it
(:data:`CARRIES_PROMPT`, :data:`REATTACHES` ...), never from a tuple of op names of their own.

A new op is a row here, its request in the runner (``Runner._do_<op>``, or none at all for a
plain request: :attr:`OpSpec.plain`) and its draw in the strategies; ``docs/extending.md``
walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "CARRIES_PROMPT",
    "CREATES",
    "ENDS",
    "KEYS",
    "MOVES",
    "NEEDS",
    "OPS",
    "QUERIES",
    "REATTACHES",
    "RESENDS",
    "SENDS_STEP",
    "SESSIONLESS",
    "TABLE",
    "TURNS",
    "Effect",
    "Need",
    "Op",
    "OpSpec",
    "gated",
    "spec_of",
]


class Op(StrEnum):
    """The step ops, as a step's ``op`` spells them."""

    NEW = "new"
    PROMPT = "prompt"
    LOAD = "load"
    RESUME = "resume"
    FORK = "fork"
    CLOSE = "close"
    DELETE = "delete"
    SET_MODE = "set_mode"
    SET_CONFIG_OPTION = "set_config_option"
    SET_TITLE = "set_title"
    STATUS = "status"
    LIST = "list"
    CANCEL = "cancel"
    RESTART = "restart"
    INVALID = "invalid"
    COMPACT = "compact"


#: What an op needs of the session it names (``session``): nothing, a session that exists
#: (a load, resume, delete, retitle or status query may name a closed one, or one a restart
#: unloaded: ``session/set_title`` works on any session ``session/list`` would show), or one
#: open in the current agent process (a turn, a cancel, a close, a fork's source, a mode or
#: option switch: each asks a correct agent for an error otherwise). A ``busy`` load or
#: resume (sent while a turn of the session runs) needs the session open, since it starts
#: that turn. A ``compact`` needs an open session with a conversation too
#: (:meth:`~acp_fuzz.core.lifecycle.Lifecycle.allows`): there is nothing to compact before a
#: turn, and the harness ties the agent's summary request to its session by the nonces of the
#: turns it summarises.
Need = Literal["nothing", "exists", "open"]


class Effect(StrEnum):
    """What an op that the agent accepted does to the sessions (:meth:`Lifecycle.apply
    <acp_fuzz.core.lifecycle.Lifecycle.apply>`)."""

    #: Nothing to the session's place in the lifecycle (a switch, a listing, a probe).
    NONE = "none"
    #: Makes the session ``session`` (``session/new``).
    CREATES = "creates"
    #: Makes the session ``new``, a copy of ``session`` (``session/fork``).
    COPIES = "copies"
    #: Opens ``session`` in the current process again (``session/load``, ``session/resume``).
    REATTACHES = "reattaches"
    #: Leaves ``session`` closed (``session/close``).
    CLOSES = "closes"
    #: Ends ``session`` for good (``session/delete``).
    DELETES = "deletes"
    #: A turn of ``session``: its conversation now holds one (``session/prompt``).
    TALKS = "talks"
    #: A compaction of ``session``'s conversation.
    COMPACTS = "compacts"
    #: A new agent process: every session exists, none is open.
    RESTARTS = "restarts"


# The step keys shared by the ops that carry a prompt, and by those that may move a session.
_PROMPT_KEYS = frozenset({"systemPrompt", "_meta", "extra", "mcp"})
_DIR_KEYS = frozenset({"cwd", "roots"})


@dataclass(frozen=True)
class OpSpec:
    """One op: what it needs, the keys its step may have, and what it does."""

    op: Op
    #: What it needs of the session it names (:data:`Need`).
    needs: Need
    #: The keys its step may have besides ``op`` (what the strategies draw, and what the
    #: minimizer's short forms use). Anything else in a cassette's step is refused.
    keys: frozenset[str]
    #: What it does to the sessions once accepted.
    effect: Effect = Effect.NONE
    #: The ACP method it sends, where it sends one request of its own ("" for the ops the
    #: runner builds otherwise: a restart, a compaction, an ``invalid`` probe's method).
    method: str = ""
    #: It carries a ``systemPrompt`` (and ``_meta``, ``extra``, ``mcp``): a payload the
    #: classifier judges (:func:`acp_fuzz.core.payloads.classify`).
    carries_prompt: bool = False
    #: It may move its session to another directory, or add roots (``cwd``, ``roots``).
    moves: bool = False
    #: It runs a turn of its session (a nonce goes to the model).
    turn: bool = False
    #: Its request is ``method`` with the session's id and nothing else: the runner sends it
    #: as it is, with no ``_do_<op>`` of its own.
    plain: bool = False
    #: The :class:`~acp_fuzz.core.payloads.Capabilities` flags of which one must be set for
    #: the op to be sent (empty: every agent takes it): what the agent advertised.
    gate: tuple[str, ...] = ()

    def offered(self, caps: object) -> bool:
        """Whether an agent with these capabilities takes this op."""
        return not self.gate or any(getattr(caps, flag, False) for flag in self.gate)


# In the order the covering examples send the ops (strategies.cover), which is the order
# of every family below.
TABLE: dict[Op, OpSpec] = {spec.op: spec for spec in (
    OpSpec(Op.NEW, "nothing", frozenset({"session", "cwd", "cancel_request"}) | _PROMPT_KEYS,
           Effect.CREATES, "session/new", carries_prompt=True),
    OpSpec(Op.PROMPT, "open",
           frozenset({"session", "fault", "during", "with", "pick", "option", "new"}),
           Effect.TALKS, "session/prompt", turn=True),
    # A turn and its cancel: whether the conversation holds the cancelled turn is the agent's.
    OpSpec(Op.CANCEL, "open", frozenset({"session"}), method="session/prompt", turn=True),
    OpSpec(Op.LIST, "nothing", frozenset(), method="session/list", gate=("list",)),
    OpSpec(Op.CLOSE, "open", frozenset({"session"}), Effect.CLOSES, "session/close",
           plain=True, gate=("close",)),
    OpSpec(Op.LOAD, "exists", frozenset({"session", "busy", "while", "cancel_request"})
           | _PROMPT_KEYS | _DIR_KEYS, Effect.REATTACHES, "session/load",
           carries_prompt=True, moves=True, gate=("load", "replay")),
    OpSpec(Op.RESUME, "exists", frozenset({"session", "busy", "while", "cancel_request"})
           | _PROMPT_KEYS | _DIR_KEYS, Effect.REATTACHES, "session/resume",
           carries_prompt=True, moves=True, gate=("resume",)),
    OpSpec(Op.FORK, "open", frozenset({"session", "new", "cancel_request"}) | _PROMPT_KEYS
           | _DIR_KEYS, Effect.COPIES, "session/fork", carries_prompt=True, moves=True,
           gate=("fork",)),
    OpSpec(Op.DELETE, "exists", frozenset({"session"}), Effect.DELETES, "session/delete",
           plain=True, gate=("delete",)),
    OpSpec(Op.SET_MODE, "open", frozenset({"session", "pick"}), method="session/set_mode",
           gate=("set_mode",)),
    OpSpec(Op.SET_CONFIG_OPTION, "open", frozenset({"session", "option", "pick"}),
           method="session/set_config_option", gate=("set_config_option",)),
    OpSpec(Op.SET_TITLE, "exists", frozenset({"session", "title"}),
           method="session/set_title", gate=("title",)),
    # UNSTABLE in the schema: "session/status MUST NOT have side effects" (any turn after it
    # shows one on the prompt). docs/extending.md shows how this row was added.
    OpSpec(Op.STATUS, "exists", frozenset({"session"}), method="session/status", plain=True,
           gate=("status",)),
    OpSpec(Op.RESTART, "nothing", frozenset(), Effect.RESTARTS),
    OpSpec(Op.INVALID, "nothing", frozenset({"method", "params", "why"})),
    OpSpec(Op.COMPACT, "open", frozenset({"session", "by"}), Effect.COMPACTS, turn=True,
           gate=("compact_command", "compact_usage", "compact_overflow")),
)}


def spec_of(op: object) -> OpSpec | None:
    """The row of ``op`` (a step's ``op`` value, which may come from a stranger's cassette),
    or ``None`` if it is none of acp-fuzz's."""
    try:
        return TABLE[Op(op)] if isinstance(op, str) else None
    except ValueError:
        return None


def _ops(keep: Callable[[OpSpec], bool]) -> tuple[str, ...]:
    return tuple(str(s.op) for s in TABLE.values() if keep(s))


#: Every op, in the table's order.
OPS: tuple[str, ...] = tuple(str(op) for op in TABLE)
#: What each op needs of its session.
NEEDS: dict[str, Need] = {str(op): s.needs for op, s in TABLE.items()}
#: The keys each op's step may have, besides ``op``.
KEYS: dict[str, frozenset[str]] = {str(op): s.keys for op, s in TABLE.items()}
#: The ops that carry a ``systemPrompt``: ``new``, ``load``, ``resume``, ``fork``.
CARRIES_PROMPT = _ops(lambda s: s.carries_prompt)
#: The ops that re-send a prompt to a session that exists: ``load``, ``resume``, ``fork`` (the
#: RFD: the prompt is "re-sent on session/load, session/resume and session/fork").
RESENDS = _ops(lambda s: s.carries_prompt and s.effect is not Effect.CREATES)
#: The ops that open an existing session in the current process: ``load``, ``resume``.
REATTACHES = _ops(lambda s: s.effect is Effect.REATTACHES)
#: The ops that make a session: ``new``, ``fork``.
CREATES = _ops(lambda s: s.effect in (Effect.CREATES, Effect.COPIES))
#: The ops that may run a session in a new directory or with more roots: ``load``,
#: ``resume``, ``fork``.
MOVES = _ops(lambda s: s.moves)
#: The ops that end a session: ``close``, ``delete``.
ENDS = _ops(lambda s: s.effect in (Effect.CLOSES, Effect.DELETES))
#: The ops that name no session: ``list``, ``restart``, ``invalid``.
SESSIONLESS = _ops(lambda s: "session" not in s.keys)
#: The ops that run a turn: ``prompt``, ``cancel`` (a turn and its cancel), ``compact``.
TURNS = _ops(lambda s: s.turn)
#: The plain ops that change nothing (a query such as ``session/status``): the lifecycle
#: machine draws them as it draws a switch, a turn after each, and the covering examples send
#: each once, so that a row is all a new one needs.
QUERIES = _ops(lambda s: s.plain and s.effect is Effect.NONE)
#: The ops whose request is built from what the step itself carries (a prompt, a probed
#: method): what ``show --full`` previews.
SENDS_STEP = (*CARRIES_PROMPT, str(Op.INVALID))


# The gate flags whose op sends another method than its row's: under v2 there is no
# session/load, and a load is a ``session/resume`` that replays from the start.
_SENT_AS = {"replay": "session/resume"}


def gated(flags: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The methods that the capability ``flags`` make available, each with the flags that
    do, in the order of ``flags``: ``session/resume`` is made available by ``resume`` and, under
    v2, by ``replay``."""
    out: dict[str, list[str]] = {}
    for spec in TABLE.values():
        for flag in spec.gate:
            if flag in flags and spec.method:
                out.setdefault(_SENT_AS.get(flag, spec.method), []).append(flag)
    return {m: tuple(sorted(fs, key=list(flags).index)) for m, fs in out.items()}
