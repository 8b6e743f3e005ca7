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
``ACP_FUZZ_PLUGINS``, or an ``acp_fuzz`` entry point: :mod:`acp_fuzz.engine.campaign.plugins`), the
check takes part in everything the built-in oracles do: an example fails on its finding
(MUST; SHOULD too, the way ``--strict`` and the severities say), Hypothesis and the minimizer
shrink toward it, the confirmation runs re-judge it, its finding is written into the
cassette, ``replay --offline`` re-judges it, and ``acp-fuzz matrix`` counts its judged cases
under its rule. ``docs/extending.md`` walks through one.

A check of a *client* is written the same way, with ``direction="client"`` (the default is
``"agent"``): it sees what a client sent to the stand-in agent of ``acp-fuzz client``, in
order, with a :class:`acp_fuzz.core.client_oracles.ClientContext` (the event's connection, the
stand-in's ``initialize`` answer and the capabilities it advertised there, the sessions'
prompts so far, and the same :meth:`~BaseContext.judge` and :meth:`~BaseContext.report`)::

    @check("myorg.prompt-on-new", severity="SHOULD",
           rule="ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD",
           summary="where the agent advertises systemPrompt, each session/new carries one",
           direction="client")
    def prompt_on_new(ctx, event):
        msg = event.data.get("msg") if event.kind == "acp" else None
        if event.data.get("dir") != "send" or not isinstance(msg, dict) \
                or msg.get("method") != "session/new":
            return
        if ctx.capabilities(event).system_prompt:
            ctx.judge()
            if (msg.get("params") or {}).get("systemPrompt") is None:
                ctx.report("session/new carries no systemPrompt")

Its row goes into :data:`acp_fuzz.core.findings.CLIENT_CATALOG` (``oracle_info`` looks an id
up in either catalog), and it takes part in what the built-in client oracles do: shrinking,
confirmation, the client cassette, ``replay --client``, ``--exclude-oracle`` and the client
matrix. An agent campaign runs only the agent checks (:func:`checks`), ``acp-fuzz client``
only the client checks, so one plugin may hold both.

The built-in oracles are checks of the same :data:`REGISTRY` (:mod:`acp_fuzz.core.builtin`,
declared with :func:`builtin`, which takes :func:`check`'s arguments, before any user's; the
client's are one built-in client check, :mod:`acp_fuzz.core.client_oracles`). The catalogs
are the rows these declarations add, the built-ins' and the users': no table is written
beside them. An agent's
judge an event before the session tracker applies it, with a :class:`Judge`; a user's check
sees it after, with the state the event left (on the client side too: after the built-in
client oracles).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from acp_fuzz.core.baseline import Baseline
from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.findings import (
    CATALOGS,
    SEVERITIES,
    Finding,
    OracleInfo,
    is_known,
    oracle_info,
)
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.sessions import Change, Tracker

__all__ = ["DIRECTIONS", "REGISTRY", "BaseContext", "Check", "CheckContext", "Judge", "Ledger",
           "builtin", "check", "checks", "run_user_check", "unregister"]

_T = TypeVar("_T")
#: A check function, whatever its context's class (a typed user function keeps its type).
_F = TypeVar("_F", bound=Callable[..., None])

#: Who a check judges: ``"agent"`` (``acp-fuzz target``, ``replay``, ``matrix``, the pytest
#: plugin) or ``"client"`` (``acp-fuzz client``, ``replay --client``).
DIRECTIONS = ("agent", "client")


@dataclass
class Ledger:
    """The findings of one history so far, and what was judged: one per history, shared by
    every check."""

    #: The findings by key (oracle, session, step): the first one reported under a key stands.
    findings: dict[tuple[str, str | None, int], Finding] = field(default_factory=dict)
    #: (oracle, rule) -> how many times the history gave that oracle something to judge under
    #: that rule, whatever the verdict: what ``acp-fuzz matrix`` calls tested.
    judged: dict[tuple[str, str], int] = field(default_factory=dict)

    def judge(self, oracle: str, rule: str | None = None) -> None:
        """Count one opportunity for ``oracle`` to fail (under ``rule``, by default its
        catalog rule). Called where the oracle compares what happened with what is owed, so
        a rule with opportunities and no finding is one the agent was seen to follow."""
        key = (oracle, rule or oracle_info(oracle).rule)
        self.judged[key] = self.judged.get(key, 0) + 1

    def add(self, oracle: str, message: str, *, step: int, severity: str | None = None,
            rule: str | None = None, session: str | None = None,
            **evidence: Any) -> tuple[str, str | None, int]:
        info = oracle_info(oracle)
        f = Finding(oracle=oracle, severity=severity or info.severity, rule=rule or info.rule,
                    message=message, step=step, session=session, evidence=evidence)
        self.findings.setdefault(f.key(), f)
        return f.key()


class BaseContext:
    """How a check speaks, on either side: :meth:`judge` and :meth:`report`. One per
    (check, history); :class:`CheckContext` (an agent's) and
    :class:`acp_fuzz.core.client_oracles.ClientContext` (a client's) add what each sees."""

    def __init__(self, oracle: str, ledger: Ledger) -> None:
        self.oracle = oracle
        self._ledger = ledger

    def _index(self) -> int:
        """The index of the step being run (-1 before the first): a finding's step."""
        raise NotImplementedError

    @property
    def index(self) -> int:
        """The index of the step being run (-1 before the first), on either side: the step a
        finding reported now is at. (An agent check's :attr:`CheckContext.step` is the step
        itself; a client check's ``step`` is this index, kept for the checks written so.)"""
        return self._index()

    def judge(self, rule: str | None = None, *, oracle: str | None = None) -> None:
        """Count one case this check judged (found or not): what ``acp-fuzz matrix`` counts
        as tested, under ``rule`` (by default the oracle's own). ``oracle``: which of the
        check's oracles (``@check(..., also=...)``) judged it; by default its first."""
        self._ledger.judge(self._own(oracle), rule)

    def report(self, message: str, *, session: str | None = None,
               severity: str | None = None, rule: str | None = None,
               oracle: str | None = None, **evidence: Any) -> None:
        """Report a finding of this check at the current step, with its evidence (plain
        data: it is written into the cassette). One finding per (oracle, session, step).
        ``oracle``: which of the check's oracles found it (``@check(..., also=...)``); by
        default its first."""
        own = self._own(oracle)
        if severity is not None and severity not in SEVERITIES:
            raise ValueError(f"check {own}: severity {severity!r} is not one of "
                             f"{', '.join(SEVERITIES)}")
        self._ledger.add(own, message, step=self._index(), severity=severity,
                         rule=rule, session=session, **evidence)

    def _own(self, oracle: str | None) -> str:
        """``oracle`` if it is one of this check's own ids (its first by default): a check
        speaks only for the oracles it registered."""
        if oracle is None or oracle == self.oracle:
            return self.oracle
        mine = REGISTRY.get(self.oracle)
        if mine is None or REGISTRY.get(oracle) is not mine:
            raise ValueError(f"check {self.oracle}: {oracle!r} is not one of its oracles "
                             f"(name it in @check(..., also=...))")
        return oracle


class CheckContext(BaseContext):
    """What an agent check sees of the run so far, and how it speaks. One per
    (check, history)."""

    def __init__(self, oracle: str, tracker: Tracker, ledger: Ledger) -> None:
        super().__init__(oracle, ledger)
        self._tracker = tracker

    def _index(self) -> int:
        return self._tracker.index

    @property
    def step(self) -> Mapping[str, Any]:
        """The step being run: ``{"index", "name", "args", ...}`` (``{}`` before the first)."""
        return self._tracker.step

    @property
    def protocol(self) -> int:
        """The ACP version the agent answered (1 or 2)."""
        return self._tracker.protocol

    @property
    def capabilities(self) -> Mapping[str, Any]:
        """What the agent advertised in ``initialize``."""
        return self._tracker.caps

    def exchange(self, event: Event) -> ModelExchange:
        """A ``model`` event as the gateway saw it: API, slots (``texts("system")``, ...),
        the session and turn it is tied to, whether it is a side request."""
        return ModelExchange.from_wire(event.data)

    def client_blocks(self, session: str) -> frozenset[str]:
        """Every text block the client sent for ``session`` (a logical handle) so far, in any
        request, accepted or not."""
        return frozenset(self._tracker.all_blocks.get(session, ()))


class Judge(CheckContext):
    """The context of a built-in check (:mod:`acp_fuzz.core.builtin`): what a user's check
    sees, and the session tracker itself, read-only. One built-in function may judge several
    oracles in one pass, so it names the oracle of each case (:meth:`judge_as`,
    :meth:`report_as`).

    ``change`` is what the event being judged does to the state (:meth:`Tracker.plan`'s
    record); the built-ins run before the tracker applies it, so ``tracker`` is the state
    the event met."""

    def __init__(self, oracle: str, tracker: Tracker, ledger: Ledger, *, baseline: Baseline,
                 strict: bool) -> None:
        super().__init__(oracle, tracker, ledger)
        self.tracker = tracker
        self.baseline = baseline
        self.strict = strict
        self.change: Change = None
        self._memo: dict[type, Any] = {}

    def judge_as(self, oracle: str, rule: str | None = None) -> None:
        """Count one case of ``oracle`` judged (see :meth:`Ledger.judge`)."""
        self._ledger.judge(oracle, rule)

    def report_as(self, oracle: str, message: str, *, step: int | None = None,
                  severity: str | None = None, rule: str | None = None,
                  session: str | None = None, **evidence: Any) -> tuple[str, str | None, int]:
        """Report a finding of ``oracle`` (at the current step unless ``step`` says another);
        returns its key, for :meth:`withdraw`."""
        return self._ledger.add(oracle, message, step=self.tracker.index if step is None
                                else step, severity=severity, rule=rule, session=session,
                                **evidence)

    def withdraw(self, key: tuple[str, str | None, int]) -> None:
        """Take back a finding reported earlier (a deferral that turned out to be applied)."""
        self._ledger.findings.pop(key, None)

    def found(self, oracle: str) -> bool:
        """Whether ``oracle`` has a finding at the current step."""
        return any(f.oracle == oracle and f.step == self.tracker.index
                   for f in self._ledger.findings.values())

    def memo(self, kind: type[_T]) -> _T:
        """The check's own memory of this history: one ``kind()`` per context, made on first
        use (what it judged before, never the sessions' state)."""
        if kind not in self._memo:
            self._memo[kind] = kind()
        return cast(_T, self._memo[kind])


@dataclass(frozen=True)
class Check:
    """A registered check: its catalog row and its function. A built-in check may report
    several oracles (``oracles``, all of them in :data:`REGISTRY`, mapped to this check);
    ``info`` is then the first one's row. ``direction`` says which side it judges (one of
    :data:`DIRECTIONS`): its context is a :class:`CheckContext` (a :class:`Judge` for a
    built-in) for an agent's, a ``ClientContext`` for a client's."""

    info: OracleInfo
    run: Callable[[Any, Event], None]
    oracles: tuple[str, ...] = ()
    builtin: bool = False
    direction: str = "agent"


#: The registered checks of both sides, by oracle id, in registration order: the built-in
#: ones (:mod:`acp_fuzz.core.builtin`, :mod:`acp_fuzz.core.client_oracles`, each under every
#: id it reports), and the users'.
REGISTRY: dict[str, Check] = {}


def checks(direction: str = "agent") -> list[Check]:
    """Every registered check of ``direction`` once, in registration order."""
    return [c for c in {id(c): c for c in REGISTRY.values()}.values()
            if c.direction == direction]


def check(oracle: str, *, severity: str, rule: str, summary: str,
          direction: str = "agent",
          also: Sequence[tuple[str, str, str, str]] = ()) -> Callable[[_F], _F]:
    """Register the decorated function as the check ``oracle`` (a stable id such as
    ``myorg.prompt-in-user-turn``; give it a prefix of your own), with its default
    ``severity`` (MUST, SHOULD or info), the ``rule`` id it rests on (from
    ``docs/rules.md``, or one of your own) and a one-line ``summary``. ``direction`` is
    the side it judges: ``"agent"`` (called as ``fn(CheckContext, event)`` on an agent's
    history, its row in :data:`~acp_fuzz.core.findings.CATALOG`) or ``"client"`` (called as
    ``fn(ClientContext, event)`` on what a client sent to the stand-in agent, its row in
    :data:`~acp_fuzz.core.findings.CLIENT_CATALOG`). Registering the same function again is
    a no-op (a module imported twice); another check under a taken id, of either side, is a
    ``ValueError``, as is a built-in oracle's id.

    ``also``: more oracles the same function judges, each ``(id, severity, rule, summary)``,
    as a built-in check may judge several in one pass; it names one with ``ctx.report(...,
    oracle=ID)`` and ``ctx.judge(oracle=ID)``. Each is a catalog row of its own.

    The built-in checks are declared the same way (:func:`builtin`): the catalogs are the
    rows these declarations add, never a table written beside them."""
    return _registrar(_rows(oracle, severity, rule, summary, direction, also), direction,
                      builtin=False)


def builtin(oracle: str, *, severity: str, rule: str, summary: str,
            direction: str = "agent",
            also: Sequence[tuple[str, str, str, str]] = ()) -> Callable[[_F], _F]:
    """Register the decorated function as a built-in check: declared as :func:`check`
    declares a user's (its catalog rows too), but an agent's is called as ``fn(judge,
    event)`` with a :class:`Judge`, *before* the session tracker applies the event, and it is
    never unregistered. A client's is called with the ``ClientContext`` a user's client
    check gets."""
    return _registrar(_rows(oracle, severity, rule, summary, direction, also), direction,
                      builtin=True)


def _rows(oracle: str, severity: str, rule: str, summary: str, direction: str,
          also: Sequence[tuple[str, str, str, str]]) -> list[OracleInfo]:
    """The catalog rows a declaration names, checked: one line of why one is refused."""
    if any(isinstance(row, str) or len(row) != 4 for row in also):
        raise ValueError(f"check {oracle!r}: each of 'also' is (id, severity, rule, summary)")
    rows = [OracleInfo(oracle, severity, rule, summary),
            *(OracleInfo(*row) for row in also)]
    for row in rows:
        _check_row(row, direction)
    ids = [row.id for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"check {oracle!r}: an oracle id is named twice")
    return rows


def _registrar(rows: list[OracleInfo], direction: str, *,
               builtin: bool) -> Callable[[_F], _F]:
    ids = tuple(row.id for row in rows)

    def register(fn: _F) -> _F:
        known = REGISTRY.get(ids[0])
        if known is not None and _same_function(known.run, fn):
            return fn
        taken = [i for i in ids if i in REGISTRY or is_known(i)]
        if taken:
            raise ValueError(f"check {taken[0]!r}: that oracle id is taken")
        for row in rows:
            CATALOGS[direction].add(row)
        _register(Check(rows[0], fn, ids, builtin=builtin, direction=direction))
        return fn

    return register


def _check_row(row: OracleInfo, direction: str) -> None:
    """A catalog row, as ``@check`` takes it: one line of why it is refused."""
    oracle, severity, rule, summary = row.id, row.severity, row.rule, row.summary
    if direction not in DIRECTIONS:
        raise ValueError(f"check {oracle!r}: direction must be one of "
                         f"{', '.join(DIRECTIONS)}, not {direction!r}")
    if severity not in SEVERITIES:
        raise ValueError(f"check {oracle!r}: severity must be one of {', '.join(SEVERITIES)}, "
                         f"not {severity!r}")
    if not oracle or not isinstance(oracle, str) or any(c.isspace() for c in oracle):
        raise ValueError(f"check id {oracle!r} must be a non-empty word (e.g. myorg.my-check)")
    if not rule or not summary:
        raise ValueError(f"check {oracle!r} needs a rule and a summary")


def run_user_check(chk: Check, ctx: BaseContext, event: Event) -> None:
    """Run a user's check on one event; what it raises is a :class:`HarnessError` that says
    whose check failed, in one line (the built-ins' own errors are bugs, left as they are)."""
    try:
        chk.run(ctx, event)
    except Exception as e:
        raise HarnessError(f"check {chk.info.id} failed on event {event.seq} "
                           f"({event.kind}): {type(e).__name__}: {e}") from e


def _register(chk: Check) -> None:
    for oracle in chk.oracles:
        REGISTRY[oracle] = chk


def unregister(oracle: str) -> None:
    """Remove a registered check and its catalog row (tests use it). A built-in check stays."""
    known = REGISTRY.get(oracle)
    if known is not None and not known.builtin:
        for each in known.oracles:  # every oracle of the check (``also``)
            REGISTRY.pop(each, None)
            CATALOGS[known.direction].discard(each)


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    return a is b or (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None), getattr(b, "__qualname__", None))
