"""The oracles: pure functions from a recorded history to findings.

:func:`evaluate` walks the history once, in order. Two parts do the work:

- the session tracker (:class:`acp_fuzz.core.sessions.Tracker`) keeps the harness's *own*
  model of every logical session: which system prompts a correct agent may be using right
  now, its conversation, its place in the lifecycle. It reports nothing;
- the checks (:data:`acp_fuzz.core.checks.REGISTRY`, keyed by catalog id) judge each event
  and report findings. The built-in ones (:mod:`acp_fuzz.core.builtin`) register themselves
  as a user's check does (``@check``, loaded with ``--plugin``), so a user's check takes part
  in shrinking, confirmation, cassettes, ``replay --offline`` and the matrix's judged counts
  exactly like a built-in.

Each event goes: the tracker plans what it changes (a typed record, nothing changed yet),
the built-in checks judge it against the state it met and that record, the tracker applies
the change, and the users' checks see it last, with the state as the event left it.

The same function runs live after each step and offline on a cassette, so a live run and
``acp-fuzz replay --offline`` agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from acp_fuzz.core import builtin as _builtin  # noqa: F401  (the built-in checks register)
from acp_fuzz.core.baseline import (
    MIN_BASELINE_CHARS,
    MIN_BASELINE_LINES,
    Baseline,
    is_instruction,
    learn_baseline,
)
from acp_fuzz.core.builtin.turns import IGNORED_AFTER
from acp_fuzz.core.checks import CheckContext, Judge, Ledger, checks, run_user_check
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import Event
from acp_fuzz.core.sessions import MIN_SIGNIFICANT, Tracker, vendor_texts

__all__ = ["IGNORED_AFTER", "MIN_BASELINE_CHARS", "MIN_BASELINE_LINES", "MIN_SIGNIFICANT",
           "Baseline", "Evaluator", "evaluate", "is_instruction", "learn_baseline",
           "vendor_texts"]


def evaluate(events: Iterable[Event], *, baseline: Baseline | None = None,
             strict: bool = False) -> list[Finding]:
    """Run every oracle over ``events`` (in ``seq`` order) and return the findings.

    ``strict`` turns a change that was accepted but never applied (a deferral, which the RFD
    allows) into a SHOULD finding instead of info.
    """
    judge = Evaluator(baseline=baseline, strict=strict)
    judge.feed(events)
    return judge.findings()


class Evaluator:
    """:func:`evaluate`, incrementally: feed the events as they come, read the findings any
    time. The oracles are one pass over the history in order, so feeding a history in pieces
    gives exactly the findings of evaluating it whole, at a cost linear in its length (the
    campaign judges after every step)."""

    def __init__(self, *, baseline: Baseline | None = None, strict: bool = False) -> None:
        self._baseline = baseline or Baseline()
        self._strict = strict
        self._tracker = Tracker()
        self._ledger = Ledger()
        self._seen = 0
        self._contexts: dict[str, CheckContext] = {}

    def feed(self, events: Iterable[Event]) -> None:
        """Judge events not seen yet: ``events`` is the new tail, or the whole history so far
        (events with a ``seq`` already judged are skipped; in a history, without reading
        them: a campaign feeds the whole history after every step)."""
        # The agent's checks (a client's judge a client: client_oracles.judge_client); what
        # is registered cannot change within one call.
        registered = checks("agent")
        if isinstance(events, Sequence):
            events = _unseen(events, self._seen)
        for ev in events:
            if ev.seq < self._seen:
                continue
            self._seen = ev.seq + 1
            change = self._tracker.plan(ev)
            # The built-in checks judge the event against the state it met; the users'
            # checks see it after the tracker applied it (as the state it left).
            for chk in registered:
                if chk.builtin:
                    ctx = self._context(chk.info.id, builtin=True)
                    assert isinstance(ctx, Judge)
                    ctx.change = change
                    chk.run(ctx, ev)
            self._tracker.apply(ev, change)
            for chk in registered:
                if not chk.builtin:
                    run_user_check(chk, self._context(chk.info.id, builtin=False), ev)

    def _context(self, oracle: str, *, builtin: bool) -> CheckContext:
        ctx = self._contexts.get(oracle)
        if ctx is None:
            ctx = self._contexts[oracle] = (
                Judge(oracle, self._tracker, self._ledger, baseline=self._baseline,
                      strict=self._strict) if builtin
                else CheckContext(oracle, self._tracker, self._ledger))
        return ctx

    def findings(self) -> list[Finding]:
        return sorted(self._ledger.findings.values(),
                      key=lambda f: (f.step, f.oracle, f.session or ""))

    def judged(self) -> dict[tuple[str, str], int]:
        """How many times each (oracle, rule) had something to judge so far, found or not:
        the evidence that a rule was *tested*, beside :meth:`findings` that say it failed."""
        return dict(self._ledger.judged)


def _unseen(events: Sequence[Event], seen: int) -> Sequence[Event]:
    """The events of ``events`` from ``seq`` ``seen`` on, found by position where the
    ``seq`` numbers run on without a gap (a history, or a slice of one); anything else is
    returned whole, for :meth:`Evaluator.feed` to skip what it has judged one by one."""
    if not events or events[0].seq >= seen:
        return events
    i = seen - events[0].seq
    if i >= len(events):
        return events[len(events):] if events[-1].seq == seen - 1 else events
    if events[i].seq == seen and events[i - 1].seq == seen - 1:
        return events[i:]
    return events
