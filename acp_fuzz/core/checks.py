"""Checks that users add: an oracle of your own, judged exactly like a built-in one (pure).

A check is a function of a :class:`CheckContext` and one history event (in order, as the
oracles see them). It counts each case it judges with :meth:`CheckContext.judge` and reports
a failure with :meth:`CheckContext.report`. Register it with :func:`check`, which also adds
its row to :data:`acp_fuzz.core.findings.CATALOG` (its id, default severity, rule and
summary)::

    from acp_fuzz import check

    @check("myorg.prompt-in-user-turn", severity="SHOULD",
           rule="SP-AGENT-APPEND-PLACEMENT-SHOULD",
           summary="a client prompt's text reaches the model in a user turn")
    def prompt_in_user_turn(ctx, event):
        if event.kind != "model":
            return
        x = ctx.exchange(event)
        if x.session is None or x.side:
            return
        ctx.judge()
        for text in x.texts("user"):
            for block in ctx.client_blocks(x.session):
                if block in text:
                    ctx.report(f"session {x.session}: its prompt is in a user turn",
                               session=x.session, model_event=event.seq)

Once the module that defines it is imported (``acp-fuzz target --plugin myorg_checks``,
``ACP_FUZZ_PLUGINS``, or an ``acp_fuzz`` entry point: :mod:`acp_fuzz.engine.plugins`), the
check takes part in everything the built-in oracles do: an example fails on its finding
(MUST; SHOULD too, the way ``--strict`` and the severities say), Hypothesis and the minimizer
shrink toward it, the confirmation runs re-judge it, its finding is written into the
cassette, ``replay --offline`` re-judges it, and ``acp-fuzz matrix`` counts its judged cases
under its rule. ``docs/extending.md`` walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.findings import CATALOG, SEVERITIES, OracleInfo
from acp_fuzz.core.history import Event, ModelExchange

if TYPE_CHECKING:
    from acp_fuzz.core.oracles import _State

__all__ = ["REGISTRY", "Check", "CheckContext", "check", "unregister"]


class CheckContext:
    """What a check sees of the run so far, and how it speaks. One per (check, history)."""

    def __init__(self, oracle: str, state: _State) -> None:
        self.oracle = oracle
        self._st = state

    @property
    def step(self) -> Mapping[str, Any]:
        """The step being run: ``{"index", "name", "args", ...}`` (``{}`` before the first)."""
        return self._st.step

    @property
    def protocol(self) -> int:
        """The ACP version the agent answered (1 or 2)."""
        return self._st.protocol

    @property
    def capabilities(self) -> Mapping[str, Any]:
        """What the agent advertised in ``initialize``."""
        return self._st.caps

    def exchange(self, event: Event) -> ModelExchange:
        """A ``model`` event as the gateway saw it: API, slots (``texts("system")``, ...),
        the session and turn it is tied to, whether it is a side request."""
        return ModelExchange.from_wire(event.data)

    def client_blocks(self, session: str) -> frozenset[str]:
        """Every text block the client sent for ``session`` (a logical handle) so far, in any
        request, accepted or not."""
        return frozenset(self._st.all_blocks.get(session, ()))

    def judge(self, rule: str | None = None) -> None:
        """Count one case this check judged (found or not): what ``acp-fuzz matrix`` counts
        as tested, under ``rule`` (by default the check's own)."""
        self._st.judge(self.oracle, rule)

    def report(self, message: str, *, session: str | None = None,
               severity: str | None = None, rule: str | None = None,
               **evidence: Any) -> None:
        """Report a finding of this check at the current step, with its evidence (plain
        data: it is written into the cassette). One finding per (check, session, step)."""
        if severity is not None and severity not in SEVERITIES:
            raise ValueError(f"check {self.oracle}: severity {severity!r} is not one of "
                             f"{', '.join(SEVERITIES)}")
        self._st.add(self.oracle, message, severity=severity, rule=rule, session=session,
                     **evidence)


@dataclass(frozen=True)
class Check:
    """A registered check: its catalog row and its function."""

    info: OracleInfo
    run: Callable[[CheckContext, Event], None]


#: The registered checks, by oracle id, in registration order.
REGISTRY: dict[str, Check] = {}


def check(oracle: str, *, severity: str, rule: str, summary: str
          ) -> Callable[[Callable[[CheckContext, Event], None]],
                        Callable[[CheckContext, Event], None]]:
    """Register the decorated function as the check ``oracle`` (a stable id such as
    ``myorg.prompt-in-user-turn``; give it a prefix of your own), with its default
    ``severity`` (MUST, SHOULD or info), the ``rule`` id it rests on (from
    ``docs/acp-reference.md``, or one of your own) and a one-line ``summary``. Registering
    the same function again is a no-op (a module imported twice); another check under a
    taken id is a ``ValueError``, as is a built-in oracle's id."""
    if severity not in SEVERITIES:
        raise ValueError(f"check {oracle!r}: severity must be one of {', '.join(SEVERITIES)}, "
                         f"not {severity!r}")
    if not oracle or not isinstance(oracle, str) or any(c.isspace() for c in oracle):
        raise ValueError(f"check id {oracle!r} must be a non-empty word (e.g. myorg.my-check)")
    if not rule or not summary:
        raise ValueError(f"check {oracle!r} needs a rule and a summary")

    def register(fn: Callable[[CheckContext, Event], None]
                 ) -> Callable[[CheckContext, Event], None]:
        known = REGISTRY.get(oracle)
        if known is not None and _same_function(known.run, fn):
            return fn
        if known is not None or oracle in CATALOG:
            raise ValueError(f"check {oracle!r}: that oracle id is taken")
        info = OracleInfo(oracle, severity, rule, summary)
        CATALOG[oracle] = info
        REGISTRY[oracle] = Check(info, fn)
        return fn

    return register


def unregister(oracle: str) -> None:
    """Remove a registered check and its catalog row (tests use it)."""
    if REGISTRY.pop(oracle, None) is not None:
        CATALOG.pop(oracle, None)


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    return a is b or (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None), getattr(b, "__qualname__", None))
