"""The session lifecycle, as the client sees it: one model for every layer (pure).

Which logical sessions exist, which are open in the agent process that runs now, and which a
restart or a ``session/close`` left closed, are facts that four parts of acp-fuzz need: the
strategies (what a step may name), the minimizer (whether a trial still makes sense), the
runner (whether a step can be sent at all) and the oracles (what a correct agent owes). They
all read them from :class:`Lifecycle`, which reads what each op needs and does from the one
table of ops (:data:`acp_fuzz.core.ops.TABLE`): a new op whose effect is one of
:class:`~acp_fuzz.core.ops.Effect`'s needs nothing here.

A session *exists* from the ``session/new`` or ``session/fork`` that made it until a
``session/delete`` of it. It is *open* when it exists, was made or last loaded or resumed in
the current agent process, and no ``session/close`` came since. A restart leaves every session
existing but none open: the next process must be asked to load or resume them. A deleted
session is *gone*: no step may name it, but a turn, which a correct agent refuses (the
session is deleted), to see that it does (``session.deleted-usable``).

Sessions are named by logical handles, ``A``, ``B``, ... (:func:`handle_name`), which the
runner maps to the agent's own session ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.ops import NEEDS, Effect, spec_of
from acp_fuzz.core.steps import ENDING

__all__ = ["HANDLES", "NEEDS", "Lifecycle", "SessionState", "allowed", "handle_name", "lived"]

#: The letters of the logical session handles, in the order they are handed out.
HANDLES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"



def handle_name(index: int) -> str:
    """The ``index``-th logical handle: ``A`` for 0, ``B`` for 1, ... (wrapping after ``Z``)."""
    return HANDLES[index % len(HANDLES)]


@dataclass
class SessionState:
    """One logical session's place in the lifecycle."""

    #: The agent process (0 for the first, one more per restart) that last made, loaded or
    #: resumed it.
    generation: int
    #: A ``session/close`` succeeded, and no load or resume came since.
    closed: bool = False
    #: The handle of the session it was forked from, if it was forked.
    source: str | None = None
    #: Its conversation holds a turn of the harness's: a prompt completed since it was made
    #: (a fork takes its source's) or last compacted by command (whose summary holds no turn
    #: of the harness's; a compaction forced by the fake model happens around a turn, which
    #: the conversation then holds).
    talked: bool = False


@dataclass
class Lifecycle:
    """The lifecycle state of a run's logical sessions.

    Feed it every step with :meth:`apply`, saying whether the agent accepted the step (the
    runner and the oracles know; the strategies and the minimizer assume what a correct agent
    does). Ask :meth:`allows` whether a step makes sense before it is drawn or tried."""

    sessions: dict[str, SessionState] = field(default_factory=dict)
    #: The current agent process: 0, then one more per restart.
    generation: int = 0
    #: The handles of the sessions a ``session/delete`` removed (until a new session takes
    #: the handle again).
    gone: set[str] = field(default_factory=set)

    @property
    def restarts(self) -> int:
        return self.generation

    def exists(self, h: Any) -> bool:
        """Whether session ``h`` was made and not deleted."""
        return isinstance(h, str) and h in self.sessions

    def deleted(self, h: Any) -> bool:
        """Whether session ``h`` was deleted (and no session took its handle since)."""
        return isinstance(h, str) and h in self.gone

    def is_open(self, h: Any) -> bool:
        """Whether session ``h`` is open in the current agent process."""
        s = self.sessions.get(h) if isinstance(h, str) else None
        return s is not None and s.generation == self.generation and not s.closed

    def closed(self, h: Any) -> bool:
        """Whether session ``h`` exists and a ``session/close`` of it succeeded, with no load
        or resume since."""
        s = self.sessions.get(h) if isinstance(h, str) else None
        return s is not None and s.closed

    def cold(self, h: Any) -> bool:
        """Whether session ``h`` was last opened by an earlier agent process (a load or resume
        of it now is a cold one: the agent must rebuild it from what it stored)."""
        s = self.sessions.get(h) if isinstance(h, str) else None
        return s is not None and s.generation != self.generation

    def talked(self, h: Any) -> bool:
        """Whether session ``h`` exists and its conversation holds a turn (see
        :attr:`SessionState.talked`): what a ``compact`` step needs."""
        s = self.sessions.get(h) if isinstance(h, str) else None
        return s is not None and s.talked

    def existing(self) -> list[str]:
        """The handles of the sessions that exist, sorted."""
        return sorted(self.sessions)

    def open(self) -> list[str]:
        """The handles of the sessions open in the current process, sorted."""
        return sorted(h for h in self.sessions if self.is_open(h))

    def allows(self, step: Mapping[str, Any]) -> bool:
        """Whether ``step`` names a session in the state its op needs (:data:`NEEDS`), and a
        new session or a fork's copy takes a handle that is free."""
        op = step.get("op")
        spec = spec_of(op)
        if spec is None:
            return False
        need = spec.needs
        h = step.get("session")
        if op == "prompt" and self.deleted(h):
            # A plain turn of a deleted session: sent to see it refused.
            return not (step.get("fault") or step.get("busy") or step.get("during")
                        or step.get("with"))
        if need == "exists" and not self.exists(h):
            return False
        if need == "open" and not self.is_open(h):
            return False
        if step.get("with") is not None and not self.is_open(step.get("with")):
            return False  # the other turn needs its session open too
        if step.get("busy") and not self.is_open(h):
            return False  # a load or resume sent while a turn of the session runs
        if step.get("while") is not None and not self.is_open(step.get("while")):
            return False  # the turn it is sent during needs its session open
        if op == "compact" and not self.talked(h):
            return False  # nothing to compact, and nothing ties the summary to the session
        if op == "new":
            return not self.exists(h)
        # A fork (its own step, or sent during a turn) takes a handle that is free.
        return not (op in ("fork", "prompt") and self.exists(step.get("new")))

    def apply(self, step: Mapping[str, Any], *, accepted: bool = True) -> None:
        """The state after ``step``. ``accepted``: whether the agent answered it with a
        success (a rejected new, fork, load, resume, close or delete changes nothing). A
        restart always counts: the old process is gone whatever the new one does."""
        spec = spec_of(step.get("op"))
        h = step.get("session")
        if spec is not None and spec.effect is Effect.RESTARTS:
            self.generation += 1
            return
        if spec is None or not accepted or not isinstance(h, str):
            return
        effect = spec.effect
        if effect is Effect.CREATES:
            self.sessions[h] = SessionState(self.generation)
            self.gone.discard(h)
        elif effect is Effect.COPIES:
            self._copy(h, step.get("new"))
        elif effect is Effect.TALKS and self.exists(h):
            self._talk(h, step)
        elif effect is Effect.COMPACTS and self.exists(h):
            self.sessions[h].talked = step.get("by") != "command"
        elif effect is Effect.REATTACHES and self.exists(h):
            self.sessions[h].generation = self.generation
            self.sessions[h].closed = False
            if self.exists(step.get("while")):
                self.sessions[step["while"]].talked = True
        elif effect is Effect.CLOSES and self.exists(h):
            self.sessions[h].closed = True
        elif effect is Effect.DELETES and self.sessions.pop(h, None) is not None:
            self.gone.add(h)

    def _copy(self, h: str, new: Any) -> None:
        """``new`` is made, a fork of ``h``, which holds what ``h`` held."""
        if isinstance(new, str) and self.exists(h):
            self.sessions[new] = SessionState(self.generation, source=h,
                                              talked=self.sessions[h].talked)
            self.gone.discard(new)

    def _talk(self, h: str, step: Mapping[str, Any]) -> None:
        """A turn of ``h`` ran, with whatever was sent during it or beside it."""
        if step.get("during") == "fork":
            # A fork sent during the turn (the runner leaves ``new`` out where the agent
            # refused it): whether it holds the running turn is the agent's choice.
            self._copy(h, step.get("new"))
        self.sessions[h].talked = True
        # A close sent during the turn (the runner leaves ``during`` out where the agent
        # refused it, or it was never sent): the step's answer is the close's.
        self.sessions[h].closed = self.sessions[h].closed or step.get("during") == "close"
        if self.exists(step.get("with")):
            self.sessions[step["with"]].talked = True
        if step.get("during") == "delete":  # accepted: the step's answer is the delete's
            del self.sessions[h]
            self.gone.add(h)


def lived(step: Mapping[str, Any], *, forked: bool, ended: bool) -> Mapping[str, Any]:
    """``step`` as it left the sessions, for :meth:`Lifecycle.apply` (the runner's and the
    tracker's, which must agree): a fork sent during a turn that the agent did not make
    (``forked`` false: refused, never answered, or the turn never asked the model) leaves
    its handle out, and a close or delete sent during a turn that was not accepted
    (``ended`` false, or never sent) leaves the session as it was."""
    if step.get("during") == "fork" and not forked:
        return {k: v for k, v in step.items() if k != "new"}
    if step.get("during") in ENDING and not ended:
        return {k: v for k, v in step.items() if k != "during"}
    return step


def allowed(steps: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every step of ``steps`` is allowed where it stands, assuming a correct agent
    accepts each (the minimizer's test of a trial: a step on a session no earlier step made,
    or a turn on a session that a restart or a close left closed, proves nothing)."""
    model = Lifecycle()
    for step in steps:
        if not model.allows(step):
            return False
        model.apply(step)
    return True
