"""The session lifecycle as a Hypothesis ``RuleBasedStateMachine`` (``acp_fuzz.strategies``).

:class:`LifecycleMachine` draws sequences of lifecycle steps: new sessions (with or without a
prompt, with a shared or a distinct cwd), prompt turns, load, resume and fork (each with the
same, a different, an omitted, a ``null`` or an invalid prompt), close, delete, list, cancel,
restarts of the agent process, invalid lifecycle requests, turns whose model request the
fake model fails, and (for an agent that can be made to compact) compactions, each followed
by a turn. A load, resume or fork that
succeeds is followed by a turn on that session, where its effect on the prompt shows, and by a
turn on a session it could have changed by mistake: a fork's source, and a loaded session that
shares the reopened session's directory. A delete is followed, half of the time, by a turn
of the deleted session (which a correct agent refuses), then by a new session where the
deleted one lived, and a turn on it.

It is deliberately blind to the live agent. Its preconditions read only what the agent
advertised (``caps``) and the machine's own model of the sessions, so the same draw always
produces the same steps, which is what makes shrinking and replay deterministic. Each step is
handed to :meth:`LifecycleMachine.execute`, which a subclass binds to a live agent (acp-fuzz's
campaign does) or to anything else (your own harness).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from acp_fuzz.core.lifecycle import Lifecycle, handle_name
from acp_fuzz.core.ops import QUERIES, TABLE, Op
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.steps import CANCELLING, FAULTS, invalid_params

from .payloads import decorated, invalid_system_prompts, valid_system_prompts, vendor_meta

__all__ = ["LifecycleMachine", "SessionView"]

MAX_SESSIONS = 4
#: For an agent that offers modes or config options, or client-set titles: one turn in this
#: many is preceded by a switch (or a retitle), and half of the ``misc`` rule's draws are a
#: switch and a turn. Measured with ``benchmarks/search_power.py`` (seeds 0-19, 100
#: examples): with the misc share alone, the planted mode and model bugs were missed at 5 and
#: 4 seeds of 20; with both, at 1 and 1. The title bug, drawn only as a choice of ``misc``
#: (with list, cancel, invalid), was missed at 3 of seeds 0-9; as a switch too, at 0 of 20.
PROMPT_SWITCH_EVERY = 8
MAX_RESTARTS = 2
#: For an agent that can be made to compact (a ``compact`` command it advertises, or a
#: compaction the profile says the fake model can force): one turn in this many, on a
#: session with a conversation, is a compaction of it (of a drawn kind) and a turn after
#: it. A choice inside the ``prompt`` rule, not a rule of its own, so that every other agent
#: draws exactly as before compaction existed.
COMPACT_EVERY = 3
#: One turn in this many is a turn whose first model request the fake model fails (a drawn
#: kind of ``steps.FAULTS``), and a turn after it: the failed turn must end visibly, every
#: retry must carry the session's prompt, and the next turn must still have it. The
#: covering examples send each kind at every seed (``strategies.cover``).
FAULT_EVERY = 10
#: One turn in TOGETHER_EVERY, where another session is open and the model is acp-fuzz's,
#: goes out with another session's turn at once (issue #32 §2). Each held turn costs an agent
#: that runs one turn at a time the whole settle (runner.SETTLE_S): one in ten cost the
#: default campaign a third of its steps/s (docs/performance.md), and a covering example
#: sends it at every seed anyway. The other turn may be the session's own next one (a second
#: prompt while its turn runs: ``during: prompt``), one time in (other sessions + 1).
TOGETHER_EVERY = 20
#: One mode switch or config option in this many is sent while a turn of the session runs
#: (``during: set-mode``, ``during: set-config``); the others as a step of their own, as
#: before.
SET_MODE_DURING_EVERY = 3
#: One fork in this many, and one delete of an open session, is sent while a turn of its
#: session runs (``during: fork``, ``during: delete``), where the model is acp-fuzz's.
FORK_DURING_EVERY = 4
#: One load or resume in this many, where another session is open, is sent while a turn of
#: that session runs (``while``), where the model is acp-fuzz's.
WHILE_EVERY = 6
#: One new session in this many names acp-fuzz's MCP server (``"mcp": true``).
MCP_EVERY = 4
#: One ``session/new``, load, resume or fork in this many goes out with its
#: ``$/cancel_request`` right behind it (``cancel_request``; not a busy reattach): it must
#: still be answered, and a refused one must leave nothing (issue #32). The machine takes it
#: as refused, as the reference agent answers it (-32800); an agent that answers it with a
#: result is followed by the runner and the tracker all the same. Drawn last in its rule, so
#: the request's other draws are as before.
CANCEL_REQUEST_EVERY = 16
#: The titles a retitle sends: plain, padded (an agent may trim it), and beyond ASCII.
TITLES = ("Renamed by acp-fuzz", "  Release checklist  ", "Überprüfung – ✓ 検証")


@dataclass
class SessionView:
    """What the machine expects of one logical session beside its place in the lifecycle
    (never the agent's actual state): its prompt and its directory."""

    prompt: Any = None  # the last valid payload applied (None: defaults)
    #: Its working directory: ``shared``, or the handle of the session that made it (a
    #: fork runs in its source's directory).
    cwd: str = ""


@dataclass
class _Model:
    #: Which sessions exist and are open, as a correct agent leaves them
    #: (:class:`acp_fuzz.core.lifecycle.Lifecycle`, the model the minimizer, runner and oracles
    #: share).
    life: Lifecycle = field(default_factory=Lifecycle)
    sessions: dict[str, SessionView] = field(default_factory=dict)
    next_handle: int = 0
    canaries: int = 0
    moves: int = 0  # sessions moved to a directory of their own (see _draw_dirs)


class LifecycleMachine(RuleBasedStateMachine):
    """Subclass and set ``caps`` (and optionally ``long_texts``), then implement ``execute``."""

    caps: ClassVar[Capabilities] = Capabilities(system_prompt=True, override=True, load=True,
                                                resume=True, fork=True, close=True, list=True,
                                                delete=True)
    long_texts: ClassVar[bool] = True
    #: Whether long texts are now and then huge ones: fill marks that acp-fuzz's runner
    #: expands to megabytes when it sends them (``acp_fuzz.core.fills``; off for an
    #: ``execute`` that sends the steps itself).
    huge_texts: ClassVar[bool] = False
    probe_unadvertised: ClassVar[bool] = True
    #: Whether load, resume and fork may carry a prompt (the standard field re-sends; the
    #: legacy ``_meta`` dialects set a prompt on ``session/new`` only).
    resend_on_lifecycle: ClassVar[bool] = True
    #: Whether turns may have the fake model fail their first model request (``fault``):
    #: off for a harness whose model is not acp-fuzz's gateway.
    model_faults: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.model = _Model()

    def execute(self, step: dict[str, Any]) -> None:  # pragma: no cover - bound by subclasses
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------------------

    def _canary(self, handle: str) -> str:
        self.model.canaries += 1
        return f"[acp-fuzz canary {handle}{self.model.canaries}]"

    def _new_handle(self) -> str:
        h = handle_name(self.model.next_handle)
        self.model.next_handle += 1
        return h

    def _send(self, step: dict[str, Any], *, accepted: bool = True) -> None:
        """Execute ``step`` and move the lifecycle model on, as a correct agent would
        (``accepted``: False for a request it must refuse)."""
        self.execute(step)
        self.model.life.apply(step, accepted=accepted)

    def _draw_prompt(self, data: st.DataObject, handle: str, *, lifecycle: bool,
                     current: Any = None, forced_valid: bool = False,
                     forced_invalid: bool = False) -> tuple[dict[str, Any], Any]:
        """Draw the ``systemPrompt`` part of a request and the payload the model then keeps.

        Returns ``(params, applied)`` where ``applied`` is the payload a correct agent uses
        afterwards (the previous one when the request must be rejected)."""
        caps = self.caps
        if lifecycle and not self.resend_on_lifecycle:
            return {}, current
        if not caps.system_prompt:
            if self.probe_unadvertised and data.draw(st.integers(0, 9), label="probe") == 0:
                sp = data.draw(valid_system_prompts(override=False, canary=self._canary(handle),
                                                    long=False), label="probe systemPrompt")
                return {"systemPrompt": sp}, current
            return {}, current
        choices = ["valid", "omit", "null", "invalid"]
        if lifecycle:
            choices.insert(0, "same")
        if forced_valid or forced_invalid:
            how = "valid" if forced_valid else "invalid"
        else:
            how = data.draw(st.sampled_from(choices), label="systemPrompt")
        if how == "same" and current is not None:
            return {"systemPrompt": current}, current
        if how in ("omit", "same"):
            return {}, current if lifecycle else None
        if how == "null":
            return {"systemPrompt": None}, current if lifecycle else None
        if how == "invalid":
            canary = self._canary(handle)
            bad: Any = data.draw(invalid_system_prompts(override=caps.override, canary=canary),
                                 label="invalid systemPrompt")
            params: dict[str, Any] = {"systemPrompt": bad}
            # Fields of the old drafts beside it: they must not rescue the request.
            old = data.draw(st.integers(0, 3), label="old draft field")
            if old == 2:
                params["extra"] = {"systemPromptMode": "append"}
            elif old == 3:
                params["extra"] = {"sessionInstructions": f"Old draft instructions {canary}"}
            return params, ("REJECT", current)
        canary = self._canary(handle)
        sp = data.draw(valid_system_prompts(override=caps.override, canary=canary,
                                            long=self.long_texts,
                                            huge=self.long_texts and self.huge_texts),
                       label="systemPrompt")
        # Breadth (issue #10 §6), half of the time: things a valid prompt may carry that
        # must change nothing, or a legacy vendor carrier with another text beside it.
        breadth = data.draw(st.integers(0, 3), label="breadth")
        if breadth == 2:
            sp = data.draw(decorated(sp, canary), label="decorated systemPrompt")
        elif breadth == 3:
            return {"systemPrompt": sp,
                    "_meta": data.draw(vendor_meta(canary), label="vendor _meta")}, sp
        return {"systemPrompt": sp}, sp

    def _switches(self) -> list[str]:
        """The changes of an open session's settings the agent offers: its mode, a config
        option (a model), its title; and the queries it answers (``session/status``,
        :data:`~acp_fuzz.core.ops.QUERIES`). None of them may touch the session's prompt."""
        return (["set_mode"] if self.caps.set_mode else []) \
            + (["set_config_option"] if self.caps.set_config_option else []) \
            + (["set_title"] if self.caps.title else []) \
            + [op for op in QUERIES if TABLE[Op(op)].offered(self.caps)]

    def _switch(self, data: st.DataObject, handle: str) -> None:
        """A mode or model switch, or a retitle, of ``handle`` (the runner picks the mode or
        value among what the agent offered for it). One mode switch or config option in
        SET_MODE_DURING_EVERY (where the model is acp-fuzz's) is sent while a turn of the
        session runs, its model request held (``during: set-mode``, ``set-config``): the
        schema says session/set_mode may come while the agent is generating a response."""
        what = data.draw(st.sampled_from(self._switches()), label="switch")
        if what in ("set_mode", "set_config_option") and self.model_faults and data.draw(
                st.integers(0, SET_MODE_DURING_EVERY - 1), label="mode during a turn") == 0:
            held: dict[str, Any] = {"op": "prompt", "session": handle}
            if what == "set_config_option":
                held.update({"during": "set-config",
                             "option": data.draw(st.integers(0, 3), label="option")})
            else:
                held["during"] = "set-mode"
            self._send({**held, "pick": data.draw(st.integers(0, 3), label="value")})
            return
        switch: dict[str, Any] = {"op": what, "session": handle}
        if what in QUERIES:  # a query (session/status): nothing to choose
            self._send(switch)
            return
        if what == "set_title":
            switch["title"] = data.draw(st.sampled_from(TITLES), label="title")
            self._send(switch)
            return
        if what == "set_config_option":
            switch["option"] = data.draw(st.integers(0, 3), label="option")
        switch["pick"] = data.draw(st.integers(0, 3), label="value")
        self._send(switch)

    def _compactions(self, handle: str) -> tuple[str, ...]:
        """The ways ``handle`` can be compacted now: the agent's (``Capabilities.compactions``),
        where the session has a conversation to compact (:meth:`Lifecycle.allows`)."""
        if not self.model.life.allows({"op": "compact", "session": handle}):
            return ()
        return self.caps.compactions()

    def _compact(self, data: st.DataObject, handle: str, kinds: tuple[str, ...]) -> None:
        """A compaction of ``handle`` and a turn after it: whether the agent rebuilt the
        session's prompt whole (and applied a change it had deferred) shows only there. A
        compaction forced by usage happens as the agent starts that turn."""
        by = kinds[0] if len(kinds) == 1 else data.draw(st.sampled_from(kinds), label="by")
        self._send({"op": "compact", "session": handle, "by": by})
        self._turn_after(handle)

    def _loaded(self) -> list[str]:
        return self.model.life.open()

    def _room(self) -> bool:
        return len(self.model.life.sessions) < MAX_SESSIONS

    # -- rules ---------------------------------------------------------------------------------

    # Hypothesis picks among the enabled rules evenly, and its swarm testing switches whole
    # rules off for an example. Creating sessions and prompting them is where the bugs are, so
    # each has two rules (a double weight that no single switch can turn off); list, cancel
    # and invalid requests share one.
    @precondition(lambda self: self._room())
    @rule(data=st.data())
    def new_session(self, data: st.DataObject) -> None:
        self._new(data, forced_valid=False)

    @precondition(lambda self: self._room())
    @rule(data=st.data())
    def new_session_with_prompt(self, data: st.DataObject) -> None:
        self._new(data, forced_valid=True)

    @precondition(lambda self: self.caps.system_prompt and self._room())
    @rule(data=st.data())
    def new_session_invalid(self, data: st.DataObject) -> None:
        self._new(data, forced_valid=False, forced_invalid=True)

    def _new(self, data: st.DataObject, *, forced_valid: bool,
             forced_invalid: bool = False) -> None:
        handle = self._new_handle()
        sp, applied = self._draw_prompt(data, handle, lifecycle=False, forced_valid=forced_valid,
                                        forced_invalid=forced_invalid)
        cwd = data.draw(st.sampled_from(["distinct", "shared"]), label="cwd")
        ok = not _rejected(applied)
        # One new session in MCP_EVERY names acp-fuzz's MCP server (its tool must reach this
        # session's model requests, and no other's): issue #33 §1.
        mcp = {"mcp": True} if data.draw(st.integers(0, MCP_EVERY - 1), label="mcp") == 0 \
            else {}
        cancelled = self._draw_cancel_request(data)
        ok = ok and not cancelled
        self._send({"op": "new", "session": handle, "cwd": cwd, **sp, **mcp, **cancelled},
                   accepted=ok)
        if ok:
            self.model.sessions[handle] = SessionView(
                prompt=applied, cwd="shared" if cwd == "shared" else handle)

    @precondition(lambda self: bool(self._loaded()))
    @rule(data=st.data())
    def prompt(self, data: st.DataObject) -> None:
        handle = data.draw(st.sampled_from(self._loaded()), label="session")
        kinds = self._compactions(handle)
        if kinds and data.draw(st.integers(0, COMPACT_EVERY - 1), label="compact") == 0:
            self._compact(data, handle, kinds)
            return
        switched = bool(self._switches()) and data.draw(
            st.integers(0, PROMPT_SWITCH_EVERY - 1), label="switch first") == 0
        if switched:
            self._switch(data, handle)
        others = [h for h in self._loaded() if h != handle]
        if not switched and self.model_faults and others and data.draw(
                st.integers(0, TOGETHER_EVERY - 1), label="turns at once") == 0:
            self._together(data, handle, others)
            return
        # A turn right after a switch shows what the switch did to the prompt: never faulted.
        if not switched and self.model_faults and data.draw(
                st.integers(0, FAULT_EVERY - 1), label="fault") == 0:
            fault = data.draw(st.sampled_from(FAULTS), label="fault kind")
            self._send({"op": "prompt", "session": handle, "fault": fault})
            self._turn_after(handle)  # whether the prompt survived the failure shows here
            return
        self._send({"op": "prompt", "session": handle})

    @precondition(lambda self: bool(self._loaded()))
    @rule(data=st.data())
    def prompt_again(self, data: st.DataObject) -> None:
        self.prompt(data)

    def _reattach(self, op: str, data: st.DataObject) -> None:
        handle = data.draw(st.sampled_from(self.model.life.existing()), label="session")
        view = self.model.sessions[handle]
        sp, applied = self._draw_prompt(data, handle, lifecycle=True, current=view.prompt)
        ok = not _rejected(applied)
        dirs = self._draw_dirs(data)
        busy = self._draw_busy(data, handle)
        cancelled = {} if busy else self._draw_cancel_request(data)
        during = {} if busy or cancelled else self._draw_while(data, handle)
        self._send({"op": op, "session": handle, **sp, **dirs, **busy, **cancelled, **during},
                   accepted=ok and not cancelled)
        if during:
            # What the reattach did to the running session shows in its next turn.
            self._turn_after(during["while"])
        if cancelled and handle in self._loaded():
            self._turn_after(handle)  # a refused one changed nothing: its turn shows it
        if not ok or cancelled:
            return
        view.prompt = applied
        self._turn_after(handle)
        # A sibling in the same directory: an agent that keys what it stores by cwd
        # rewrites it too, which shows only in the sibling's next turn.
        siblings = [h for h in self._loaded()
                    if h != handle and self.model.sessions[h].cwd == view.cwd]
        if dirs.get("cwd") == "moved":
            view.cwd = self._moved()
        if siblings:
            self._turn_after(data.draw(st.sampled_from(siblings), label="sibling"))

    # v2 has no session/load: the runner sends a load as a resume that replays from the
    # start (SP-V2-NOLOAD-DEF), where the agent's resume takes replayFrom.
    @precondition(lambda self: (self.caps.load or self.caps.replay)
                  and bool(self.model.life.sessions))
    @rule(data=st.data())
    def load(self, data: st.DataObject) -> None:
        self._reattach("load", data)

    @precondition(lambda self: self.caps.resume and bool(self.model.life.sessions))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self._reattach("resume", data)

    @precondition(lambda self: self.caps.fork and self._room() and bool(self._loaded()))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        """A fork of a loaded session, with a drawn prompt (or none), then a turn of the copy
        and of its source. One in FORK_DURING_EVERY of an open session (where the model is
        acp-fuzz's) is sent while a turn of the source runs (``during: fork``, no prompt: the
        copy inherits its source's)."""
        src = data.draw(st.sampled_from(self._loaded()), label="source")
        new = self._new_handle()
        if self.model_faults and self.model.life.is_open(src) and data.draw(
                st.integers(0, FORK_DURING_EVERY - 1), label="fork during a turn") == 0:
            source = self.model.sessions[src]
            self._send({"op": "prompt", "session": src, "during": "fork", "new": new})
            self.model.sessions[new] = SessionView(prompt=source.prompt, cwd=source.cwd)
            self._turn_after(new)
            self._turn_after(src)
            return
        sp, applied = self._draw_prompt(data, new, lifecycle=True,
                                        current=self.model.sessions[src].prompt)
        ok = not _rejected(applied)
        dirs = self._draw_dirs(data)
        cancelled = self._draw_cancel_request(data)
        self._send({"op": "fork", "session": src, "new": new, **sp, **dirs, **cancelled},
                   accepted=ok and not cancelled)
        if cancelled:
            self._turn_after(src)  # the source, as it was
        elif ok:
            source = self.model.sessions[src]
            self.model.sessions[new] = SessionView(
                prompt=applied, cwd=self._moved() if dirs.get("cwd") == "moved" else source.cwd)
            self._turn_after(new)
            # The source too: a fork must leave it as it was, and only its own turn shows it.
            self._turn_after(src)

    def _moved(self) -> str:
        """A directory no other session has (the machine's name for it)."""
        self.model.moves += 1
        return f"moved-{self.model.moves}"

    def _draw_while(self, data: st.DataObject, handle: str) -> dict[str, Any]:
        """Where the model is acp-fuzz's and another session is open: one load or resume in
        WHILE_EVERY goes out while a turn of that session runs (``while``), its model request
        held: a prompt the reattach puts in a process-wide place lands in the running one."""
        others = [h for h in self._loaded() if h != handle]
        if not (self.model_faults and others) or data.draw(
                st.integers(0, WHILE_EVERY - 1), label="during another's turn") != 0:
            return {}
        return {"while": data.draw(st.sampled_from(others), label="the running session")}

    def _draw_busy(self, data: st.DataObject, handle: str) -> dict[str, Any]:
        """In ACP v2 (where a turn runs on after its prompt is answered), half of the loads
        and resumes of an open session go out while a turn of it runs: a busy session may
        refuse them, but must then change nothing, and must apply an accepted one whole.
        v1 agents draw as before."""
        if not self.caps.replay or not self.model.life.is_open(handle):
            return {}
        return {"busy": True} if data.draw(st.booleans(), label="busy") else {}

    def _draw_cancel_request(self, data: st.DataObject) -> dict[str, Any]:
        """``cancel_request`` one time in :data:`CANCEL_REQUEST_EVERY`."""
        return {"cancel_request": True} if data.draw(
            st.integers(0, CANCEL_REQUEST_EVERY - 1), label="cancel_request") == 0 else {}

    def _draw_dirs(self, data: st.DataObject) -> dict[str, Any]:
        """For an agent that advertises ``additionalDirectories``: a load, resume or fork in
        the session's own directory (a third of the time), with extra workspace roots, or in
        a new directory. The prompt belongs to the session, wherever it runs: an agent that
        keys what it stores by directory loses it there. Other agents draw as before."""
        if not self.caps.additional_directories:
            return {}
        where = data.draw(st.sampled_from(["same", "roots", "moved"]), label="directory")
        if where == "roots":
            return {"roots": data.draw(st.integers(1, 2), label="roots")}
        return {"cwd": "moved"} if where == "moved" else {}

    def _turn_after(self, handle: str) -> None:
        """A turn on a session that a load, resume or fork has just (re)opened, or could
        have changed (a fork's source, a sibling sharing the directory of a loaded session).

        What such a request did to the prompt shows only in the next model request: a
        restart or fork bug needs the lifecycle step AND a turn on that very session, and
        leaving the turn to the ``prompt`` rules made those two-edge shapes rare. Measured
        with ``benchmarks/search_power.py`` (100 examples, 11 planted bugs, seeds 0-19):
        14 of 220 bug-seed pairs missed before, none after, and 1 of 1320 over seeds 0-119
        (lost-after-restart's median first hit went from example 92 to 14,
        fork-drops-prompt's from 79 to 16). Drawing the turn instead (50 % or 75 % of the
        time) missed 7 to 13 pairs of 660. It is a step of its own, so shrinking can still
        drop it."""
        self._send({"op": "prompt", "session": handle})

    # One rule for both ways a session ends: a rule of its own for delete took its share of
    # every example's steps from the others, and restart-then-load bugs went unfound at some
    # seeds (benchmarks/search_power.py). An agent without delete draws exactly as before.
    @precondition(lambda self: (self.caps.close or self.caps.delete) and bool(self._loaded()))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        """``session/close`` of an open session, or ``session/delete`` of any session (open,
        closed or unloaded by a restart). A deleted handle is used again only for a turn,
        half of the time, right after the delete: a correct agent refuses it (an agent that
        serves it kept the session, ``session.deleted-usable``). Anything else a deleted
        session leaves behind can only show in another session (a leak).

        Enabled only while a session is open, as close alone was: enabling it after a
        restart too drew deletes where the restart-then-load bugs need a load."""
        ops = [op for op, ok in (("close", self.caps.close), ("delete", self.caps.delete)) if ok]
        op = ops[0] if len(ops) == 1 else data.draw(st.sampled_from(ops), label="close or delete")
        if op == "delete":
            handle = data.draw(st.sampled_from(self.model.life.existing()), label="session")
            held = self.model_faults and self.model.life.is_open(handle) and data.draw(
                st.integers(0, FORK_DURING_EVERY - 1), label="delete during a turn") == 0
            self._send({"op": "prompt", "session": handle, "during": "delete"} if held
                       else {"op": "delete", "session": handle})
            gone = self.model.sessions.pop(handle)
            if data.draw(st.booleans(), label="turn of the deleted session"):
                self._send({"op": "prompt", "session": handle}, accepted=False)
            # What a deleted session leaves behind shows in the next session made where it
            # lived (an agent that keys what it stores by directory, or keeps a global): make
            # one there without a prompt of its own, which anything left over would fill, and
            # take a turn on it. Two steps of their own, so shrinking can drop them.
            if self._room():
                made = self._new_handle()
                cwd = "shared" if gone.cwd == "shared" else "distinct"
                self._send({"op": "new", "session": made, "cwd": cwd})
                self.model.sessions[made] = SessionView(
                    prompt=None, cwd="shared" if cwd == "shared" else made)
                self._turn_after(made)
            return
        handle = data.draw(st.sampled_from(self._loaded()), label="session")
        self._send({"op": "close", "session": handle})

    @rule(data=st.data())
    def misc(self, data: st.DataObject) -> None:
        """session/list, session/cancel, a lifecycle request for an unknown session, (for an
        agent that offers session modes or config options) session/set_mode or
        session/set_config_option and a turn after it, or (for one that advertises
        ``sessionCapabilities.title``) session/set_title.

        The switches and titles are choices here, not rules of their own: an agent without
        them draws exactly as before, and one with them gives them a share of this rule only."""
        # Half of this rule's draws go to the switches where there are any (see
        # PROMPT_SWITCH_EVERY).
        if bool(self._switches()) and data.draw(st.booleans(), label="switch"):
            what = "switch"
        else:
            what = data.draw(st.sampled_from(["list", "cancel", "invalid"]
                                             + (["title"] if self.caps.title else [])),
                             label="misc")
        if what == "switch" and self._loaded():
            handle = data.draw(st.sampled_from(self._loaded()), label="session")
            self._switch(data, handle)
            # Whether the prompt survived the switch shows only in the next turn.
            self._turn_after(handle)
        elif what == "list" and self.caps.list:
            self._send({"op": "list"})
        elif what == "cancel" and self._loaded():
            handle = data.draw(st.sampled_from(self._loaded()), label="session")
            self._cancel(data, handle)
        elif what == "invalid":
            self._invalid_request(data)
        elif what == "title" and self.model.life.sessions:
            self._retitle(data)

    def _together(self, data: st.DataObject, handle: str, others: list[str]) -> None:
        """Two turns at once: ``handle``'s, and another open session's sent while the first's
        model request is held. A prompt kept in one process-wide place shows in the turns
        after (both sessions' next turns: two steps of their own, so shrinking can drop
        them). The other turn may be ``handle``'s own next one (``during: prompt``: a second
        ``session/prompt`` of the session while its turn runs), and a turn after it."""
        other = data.draw(st.sampled_from([*others, handle]), label="the other turn")
        if other == handle:
            self._send({"op": "prompt", "session": handle, "during": "prompt"})
            self._turn_after(handle)
            return
        self._send({"op": "prompt", "session": handle, "with": other})
        self._turn_after(handle)
        self._turn_after(other)

    def _cancel(self, data: st.DataObject, handle: str) -> None:
        """A cancel of a turn: written right behind its prompt (a race the agent must handle
        either way), or (where the model is acp-fuzz's) sent while the turn's model request is
        held (``during``): a ``session/cancel``, a ``$/cancel_request`` of the prompt, or a
        ``session/close``. What a cancelled turn left behind shows in the turn after it."""
        # Half of them as before (the race), so a held one takes no share of the others.
        held = [w for w in CANCELLING if w != "close" or self.caps.close]
        how = data.draw(st.sampled_from(held), label="cancel how") \
            if self.model_faults and data.draw(st.booleans(), label="held") else "race"
        if how == "race":
            self._send({"op": "cancel", "session": handle})
            return
        self._send({"op": "prompt", "session": handle, "during": how})
        if how != "close":
            self._turn_after(handle)

    def _retitle(self, data: st.DataObject) -> None:
        """``session/set_title`` of any session that exists (open, closed, or unloaded by a
        restart: the RFD of titles allows all three), and a turn on it when it is open. What
        a retitle did to the prompt shows in that turn, or in the turn after a later load."""
        handle = data.draw(st.sampled_from(self.model.life.existing()), label="session")
        title = data.draw(st.sampled_from(TITLES), label="title")
        self._send({"op": "set_title", "session": handle, "title": title})
        if self.model.life.is_open(handle):
            self._turn_after(handle)

    # Two rules, like new sessions and turns: what survives a restart (the prompt, on load or
    # resume) is where persistence bugs are, and a single rule was drawn too rarely.
    @precondition(lambda self: self.model.life.restarts < MAX_RESTARTS)
    @rule()
    def restart_again(self) -> None:
        self.restart()

    @precondition(lambda self: self.model.life.restarts < MAX_RESTARTS)
    @rule()
    def restart(self) -> None:
        self._send({"op": "restart"})

    def _invalid_request(self, data: st.DataObject) -> None:
        methods = ["session/prompt"] + (["session/load"] if self.caps.load else []) + (
            ["session/resume"] if self.caps.resume else [])
        method = data.draw(st.sampled_from(methods), label="method")
        # The params are acp-fuzz's own (steps.invalid_params), on replay too.
        self._send({"op": "invalid", "method": method, "params": invalid_params(method),
                    "why": "unknown session id"})


def _rejected(applied: Any) -> bool:
    """Whether ``_draw_prompt`` said a correct agent must refuse the request."""
    return isinstance(applied, tuple) and bool(applied) and applied[0] == "REJECT"
