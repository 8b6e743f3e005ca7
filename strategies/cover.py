"""Covering examples: every invalid payload and every lifecycle op at every seed
(``acp_fuzz.strategies.cover``).

The lifecycle machine draws what it draws: a payload kind that is one draw in a hundred (an
empty ``content``, the mode spelling ``"replace"``) is sent at some seeds and not at others,
and a bug that needs one such request is found by luck. A campaign therefore opens with
*covering examples*: short, fixed step sequences, built from the machine's own step
vocabulary, that send

* every lifecycle op the agent supports (``op:<op>``; ``invalid:<method>`` for each request
  of an unknown session; ``dirs:moved`` and ``dirs:roots`` for an agent that takes
  ``additionalDirectories``, ``busy:<op>`` under v2, ``compact:<by>`` for each way the agent
  can be made to compact, and ``compact:after-change``: a compaction after a live load or
  resume changed the prompt, the rebuild at which a deferred change must land;
  ``delete:prompt``, a turn of a deleted session, which a correct agent refuses, and
  ``list:cold-load``, a ``session/list`` after a session was loaded in a new process before
  its first turn; ``cancel-request:<op>``, a new, load, resume or fork with its
  ``$/cancel_request`` right behind it), each in the
  shortest valid sequence that shows what it did to the prompt: ``new A (P); prompt A; load
  A (P); prompt A``, ``new A (P); fork A->B (Q); prompt B; prompt A``, ``new A (P); prompt
  A; compact A; prompt A``, ``new A (P); prompt A; load A (Q); compact A; prompt A; prompt
  A``, ...;
* every surface beside the model where a prompt can show (``surface:<where>``, issue #33):
  ``surface:update``, a turn or reattach of a session after another session sent a prompt
  (its ``session/update`` texts, titles included, are judged against that prompt);
  ``surface:error``, a refused request after another session sent a prompt (its error
  answer is); ``surface:replay``, a load of a session with a prompt and a conversation
  (what it replays is judged against the session's own prompt); ``scope:<mode>``, the first
  turn of a session made with an ``append`` (``override``) prompt after a session made
  without one had a turn (its tools, and its ``session/new`` answer's modes and config
  options, are compared with that session's); ``mcp:<mode>``, the first turn of a session
  made naming acp-fuzz's MCP server (``none``, ``append``, ``override``), and
  ``mcp:beside``, the first turn of one made without it after one named it;
* every invalid payload variant (:func:`~acp_fuzz.strategies.payloads.invalid_variants`) on
  every request that carries a prompt and that the agent supports (``new:<variant>``,
  ``load:<variant>``, ``resume:<variant>``, ``fork:<variant>``). Each is one rejected
  request, so several go in one example: ``new A (P); prompt A``, then as many rejected
  loads, resumes and forks of ``A`` as ``max_steps`` leaves room for, then ``prompt A`` (a
  rejected request must have changed nothing, the conversation included).

They are pure data: the same capabilities always give the same examples, whatever the seed.
:func:`step_keys` says what a step that was sent covers, for the search's own draws too, so a
campaign records the first example at which each key was sent (``CampaignResult.coverage``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_fuzz.core.fills import SIZES
from acp_fuzz.core.lifecycle import HANDLES, NEEDS, Lifecycle, allowed, handle_name
from acp_fuzz.core.ops import CARRIES_PROMPT, CREATES, MOVES, QUERIES, REATTACHES, TABLE, Op
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.steps import DURING, ENDING, FAULTS, invalid_params

from .lifecycle import TITLES
from .payloads import (
    VALID_CLASSES,
    VENDOR_CARRIERS,
    invalid_payload,
    invalid_variant,
    invalid_variants,
    valid_classes,
    valid_payload,
    vendor_carrier,
    vendor_meta_of,
)

__all__ = ["Cover", "cover_keys", "cover_share", "covering_examples", "example_digest",
           "prompt_requests", "step_keys"]

#: The requests that carry a ``systemPrompt``.
PROMPT_REQUESTS = CARRIES_PROMPT
#: The texts of the covering examples' valid prompts (a session's own, and a fork's).
_P = "You are a code review specialist. Focus on security vulnerabilities."
_Q = "Answer in the voice of a patient teacher, and cite file paths."


@dataclass(frozen=True)
class Cover:
    """One covering example: its steps, and the keys they cover when all are sent."""

    steps: tuple[dict[str, Any], ...]
    keys: tuple[str, ...]

    @property
    def digest(self) -> str:
        """Its :func:`example_digest`: the same example, the same digest, wherever it runs."""
        return example_digest(self.steps)


def example_digest(steps: Sequence[Mapping[str, Any]]) -> str:
    """A short name for an example's steps (12 hex digits of the SHA-256 of their canonical
    JSON): two campaigns ran the same example when they name the same digest (shards and
    workers are checked this way; ``acp-fuzz report merge`` warns of a covering example two
    reports both ran)."""
    text = json.dumps([dict(s) for s in steps], sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prompt_requests(caps: Capabilities, *, resend_on_lifecycle: bool = True) -> tuple[str, ...]:
    """The requests that carry a prompt to this agent: ``session/new`` when it advertises
    ``systemPrompt``, and the load, resume and fork it supports when they may re-send one
    (the legacy ``_meta`` dialects set a prompt on ``session/new`` only)."""
    if not caps.system_prompt:
        return ()
    out = ["new"]
    if resend_on_lifecycle:
        out += [op for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume),
                                  ("fork", caps.fork)) if ok]
    return tuple(out)


def _ops(caps: Capabilities) -> list[str]:
    """The lifecycle ops the machine draws for this agent (its rules' preconditions)."""
    return [str(op) for op, spec in TABLE.items() if spec.offered(caps)]


def _reopens(caps: Capabilities) -> list[str]:
    """The load, resume and fork this agent supports (each sent once with its
    ``$/cancel_request`` right behind it: ``cancel-request:<op>``)."""
    return [op for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume),
                              ("fork", caps.fork)) if ok]


def _invalid_methods(caps: Capabilities) -> list[str]:
    """The methods of the machine's invalid requests (a session id that cannot exist)."""
    return ["session/prompt"] + (["session/load"] if caps.load else []) + (
        ["session/resume"] if caps.resume else [])


def cover_keys(caps: Capabilities, *, resend_on_lifecycle: bool = True) -> list[str]:
    """Every key the covering examples of this agent cover, in their order: the ops, then
    each invalid variant on each request that carries a prompt."""
    keys = [f"op:{op}" for op in _ops(caps)] + [f"invalid:{m}" for m in _invalid_methods(caps)]
    if caps.additional_directories and (caps.load or caps.replay or caps.resume or caps.fork):
        keys += ["dirs:moved", "dirs:roots"]
    if caps.replay:
        keys += ["busy:load", "busy:resume"]
    keys += [f"compact:{by}" for by in caps.compactions()]
    keys += ["delete:prompt"] * caps.delete + ["list:cold-load"] * (
        caps.list and bool(caps.load or caps.replay or caps.resume))
    if _deferral_before_compaction(caps, resend_on_lifecycle):
        keys.append("compact:after-change")
    keys += _surface_keys(caps)
    keys += [f"fault:{kind}" for kind in FAULTS]
    keys += [f"during:{what}" for what in _during(caps)] + ["cancel-request:new", "together"]
    keys += [f"while:{op}" for op in _while_ops(caps)]
    keys += [f"cancel-request:{op}" for op in _reopens(caps)]
    keys += _payload_keys(caps, resend_on_lifecycle) + _pair_keys(caps, resend_on_lifecycle)
    variants = invalid_variants(override=caps.override)
    return keys + [f"{r}:{v}" for r in prompt_requests(caps, resend_on_lifecycle=
                                                        resend_on_lifecycle) for v in variants]


def _surface_keys(caps: Capabilities) -> list[str]:
    """The surfaces beside the model this agent can be shown to put a prompt on, and the
    sessions naming acp-fuzz's MCP server (in each prompt mode, and one beside them)."""
    mcp = [f"mcp:{m}" for m in _mcp_modes(caps)] + ["mcp:beside"]
    if not caps.system_prompt:
        return mcp
    return ["surface:update", "surface:error"] + (
        ["surface:replay"] if caps.load or caps.replay else []) + [
        f"scope:{m}" for m in _scope_modes(caps)] + mcp


def _surfaces_of(step: Mapping[str, Any], caps: Capabilities,
                 before: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``surface:<where>`` keys ``step`` covers, given the steps sent ``before`` it."""
    op, handle = step.get("op"), step.get("new", step.get("session"))
    sent = [s for s in before if s.get("op") in PROMPT_REQUESTS
            and s.get("systemPrompt") is not None
            and invalid_variant(s["systemPrompt"], override=caps.override) is None]
    others = any(s.get("new", s.get("session")) != handle for s in sent)
    out = []
    if others and op in ("prompt", "load", "resume"):
        out.append("surface:update")
    if others and op in PROMPT_REQUESTS and step.get("systemPrompt") is not None \
            and invalid_variant(step["systemPrompt"], override=caps.override) is not None:
        out.append("surface:error")
    talked = any(s.get("op") == "prompt" and s.get("session") == handle for s in before)
    if op == "load" and talked and any(s.get("new", s.get("session")) == handle for s in sent):
        out.append("surface:replay")
    made = next((s for s in before if s.get("op") == "new" and s.get("session") == handle),
                None)
    # (Sessions naming acp-fuzz's MCP server are the mcp:<mode> keys' own example.)
    plain = {s.get("session") for s in before if s.get("op") == "new"
             and s.get("systemPrompt") is None and not s.get("mcp")}
    if op == "prompt" and made is not None and made in sent and not talked \
            and not made.get("mcp") and any(
            s.get("op") == "prompt" and s.get("session") in plain for s in before):
        out.append(f"scope:{made['systemPrompt'].get('mode')}")
    return out


def _fault_group() -> _Group:
    """``fault:<kind>`` for each of ``steps.FAULTS``, in one example: ``new A (P)``, a turn
    of ``A`` per kind whose first model request the fake model fails that way, and a turn
    after them. Each turn after a fault shows whether the prompt survived it (its retries
    are judged as turns too), so one plain turn at the end is enough."""
    def unit(kind: str) -> Unit:
        return lambda ex, a: ex.add({"op": "prompt", "session": a, "fault": kind})
    return _Group(_new_session, tuple(unit(kind) for kind in FAULTS), _turn)


def _during(caps: Capabilities) -> tuple[str, ...]:
    """What this agent is sent while the model is thinking (a close where it has close, a
    mode switch where it offers modes, a fork where it forks, a config option where it
    offers some, a delete where it deletes)."""
    takes = {"close": caps.close, "set-mode": caps.set_mode, "fork": caps.fork,
             "set-config": caps.set_config_option, "delete": caps.delete}
    return tuple(what for what in DURING if takes.get(what, True))


def _during_groups(caps: Capabilities) -> list[_Group]:
    """``during:<what>`` for each of ``steps.DURING`` the agent takes, in one example:
    ``new A (P)``, a turn of ``A`` with a ``session/cancel`` sent while its model request is
    held, one with a ``$/cancel_request`` of its prompt, one with a ``session/set_mode``
    (where it offers modes), one with a second ``session/prompt`` of ``A``, one with a
    ``session/fork`` of ``A`` (where it forks) and a turn of the copy (whether it carries the
    prompt it inherited), one with a ``session/set_config_option`` (where it offers
    options), a ``session/new`` with its ``$/cancel_request`` right behind it
    (``cancel-request:new``; a correct agent may make the session or not), a plain turn
    (what a cancelled turn, a switch or the second prompt left shows there), and last (the
    session is closed after it) one with a ``session/close``. A ``session/delete`` sent
    during a turn (where it deletes) is an example of its own: ``new A (P)``, that turn,
    and a new session in A's directory with a turn (a deleted session's prompt that stays
    behind shows there)."""
    def unit(what: str) -> Unit:
        if what == "fork":
            return _fork_during
        return lambda ex, a: ex.add({"op": "prompt", "session": a, "during": what})

    def cancelled_new(ex: _Example, a: str) -> None:
        ex.add({"op": "new", "session": ex.handle(), "cancel_request": True})

    def suffix(ex: _Example, a: str) -> None:
        _turn(ex, a)
        if caps.close:
            unit("close")(ex, a)
    def deleted(ex: _Example, a: str) -> None:
        a = ex.handle()
        ex.add({"op": "new", "session": a, "cwd": "shared", **ex.prompt(a)},
               {"op": "prompt", "session": a, "during": "delete"})
        b = ex.handle()
        ex.add({"op": "new", "session": b, "cwd": "shared"}, {"op": "prompt", "session": b})
    takes = _during(caps)
    group = _Group(_new_session, (*(unit(w) for w in takes if w not in ENDING),
                                  cancelled_new), suffix)
    return [group, _Group(_nothing, (deleted,))] if "delete" in takes else [group]


def _fork_during(ex: _Example, a: str) -> None:
    """A turn of ``a`` with a fork of it sent while its model request is held, then a turn of
    the copy."""
    b = ex.handle()
    ex.add({"op": "prompt", "session": a, "during": "fork", "new": b},
           {"op": "prompt", "session": b})


def _while_ops(caps: Capabilities) -> list[str]:
    """The reattaches this agent is sent while another session's turn runs."""
    return [op for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume)) if ok]


def _while_group(caps: Capabilities) -> _Group | None:
    """``while:<op>``: ``new A (P)``, ``new B (Q)``, then for each reattach the agent has:
    B closed (where it closes), B reattached (Q re-sent) while A's model request is held,
    a turn of A and one of B. A prompt the reattach puts in a process-wide place shows in
    A's turn (B's prompt there is a leak), a reattach the running turn spoiled in B's."""
    ops = _while_ops(caps)
    if not ops:
        return None

    def unit(op: str) -> Unit:
        def add(ex: _Example, a: str) -> None:
            b = _second_of(a)
            if caps.close:
                ex.add({"op": "close", "session": b})
            ex.add({"op": op, "session": b, **ex.same(b), "while": a},
                   {"op": "prompt", "session": a}, {"op": "prompt", "session": b})
        return add
    return _Group(_two_prompted, tuple(unit(op) for op in ops))


def _together_group() -> _Group:
    """``together``: ``new A (P)``, ``new B (Q)``, a turn of ``A`` with a turn of ``B`` sent
    while A's model request is held, then a turn of each (a prompt one turn left in a
    process-wide place shows in the other session's next turn)."""
    def together(ex: _Example, a: str) -> None:
        b = _second_of(a)
        ex.add({"op": "prompt", "session": a, "with": b}, {"op": "prompt", "session": a},
               {"op": "prompt", "session": b})
    return _Group(_two_prompted, (together,))


def _two_prompted(ex: _Example) -> str:
    """The prefix of the examples of two sessions at once: ``new A (P)``, ``new B (Q)`` in
    a directory of its own; A."""
    a = _new_session(ex)
    b = ex.handle()
    ex.add({"op": "new", "session": b, "cwd": "distinct", **ex.prompt(b, _Q)})
    return a


def _second_of(a: str) -> str:
    """The second session :func:`_two_prompted` made, after ``a``."""
    return HANDLES[HANDLES.index(a) + 1]


def _deferral_before_compaction(caps: Capabilities, resend: bool) -> bool:
    """Whether the agent can be sent a changed prompt on a live load or resume, and then be
    made to compact (``compact:after-change``)."""
    return bool(caps.compactions()) and caps.system_prompt and resend and (
        caps.load or caps.replay or caps.resume)


def step_keys(step: Mapping[str, Any], caps: Capabilities,
              before: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """What ``step``, once sent, covers: its op, its directory or busy form, and the
    invalid variant of its prompt (a request with a valid, omitted or null prompt covers its
    op only). A compaction covers its kind, and, given the steps sent ``before`` it,
    ``compact:after-change`` when a live load or resume of its session since its last
    compaction carried a prompt other than the one the session had."""
    op = step.get("op")
    keys = [f"op:{op}"]
    if op == "invalid":
        keys.append(f"invalid:{step.get('method')}")
    if op == "prompt" and "fault" in step:
        keys.append(f"fault:{step['fault']}")
    if op == "prompt" and "during" in step:
        keys.append(f"during:{step['during']}")
    if op in PROMPT_REQUESTS and step.get("cancel_request"):
        keys.append(f"cancel-request:{op}")
    if op == "prompt" and "with" in step:
        keys.append("together")
    if op in REATTACHES and step.get("while"):
        keys.append(f"while:{op}")
    if op in ("prompt", "list"):
        keys += _after_life(step, before)
    if op == "compact":
        keys.append(f"compact:{step.get('by')}")
        if _changed_live(step.get("session"), before):
            keys.append("compact:after-change")
    if op in MOVES:
        if step.get("cwd") == "moved":
            keys.append("dirs:moved")
        if step.get("roots"):
            keys.append("dirs:roots")
        if step.get("busy"):
            keys.append(f"busy:{op}")
    if op in PROMPT_REQUESTS and caps.system_prompt and step.get("systemPrompt") is not None:
        variant = invalid_variant(step["systemPrompt"], override=caps.override)
        if variant is not None:
            keys.append(f"{op}:{variant}")
        else:
            keys += [f"valid:{c}" for c in valid_classes(step["systemPrompt"])]
            carrier = vendor_carrier(step.get("_meta"))
            if carrier is not None:
                keys.append(f"vendor:{carrier}")
            if op in REATTACHES and _last_prompt(step.get("session"), before) \
                    not in (None, step["systemPrompt"]):
                keys.append(f"change:{op}")
            if op in REATTACHES and _cold_change(step, before):
                keys.append(f"change:cold-{op}")
    if caps.system_prompt:
        keys += _surfaces_of(step, caps, before)
    return keys + _mcp_of(step, before) + _pairs_of(step, before)


def _mcp_of(step: Mapping[str, Any], before: Sequence[Mapping[str, Any]]) -> list[str]:
    """``mcp:<mode>`` for the first turn of a session made naming acp-fuzz's MCP server
    (``none`` without a prompt), ``mcp:beside`` for the first turn of one made without it
    after a session named it."""
    handle = step.get("session")
    if step.get("op") != "prompt" or any(s.get("op") == "prompt" and s.get("session") == handle
                                         for s in before):
        return []
    made = next((s for s in before if s.get("op") == "new" and s.get("session") == handle),
                None)
    if made is None:
        return []
    if made.get("mcp"):
        sp = made.get("systemPrompt")
        return [f"mcp:{sp.get('mode') if isinstance(sp, Mapping) else 'none'}"]
    return ["mcp:beside"] if any(s.get("mcp") for s in before) else []


class _Example:
    """Steps being written: hands out session handles and canaries as the machine does."""

    def __init__(self, caps: Capabilities, resend: bool) -> None:
        self.caps, self.resend = caps, resend
        self.steps: list[dict[str, Any]] = []
        self.handles = 0
        self.canaries = 0
        self.own: dict[str, dict[str, Any]] = {}  # each session's own prompt params

    def handle(self) -> str:
        h = handle_name(self.handles)
        self.handles += 1
        return h

    def _canary(self, handle: str) -> str:
        self.canaries += 1
        return f"[acp-fuzz canary {handle}{self.canaries}]"

    def prompt(self, handle: str, text: str = _P, *, lifecycle: bool = False,
               mode: str = "append") -> dict[str, Any]:
        """A new valid prompt for ``handle`` (``{}`` where the machine would send none)."""
        if not self.caps.system_prompt or (lifecycle and not self.resend):
            return {}
        block = {"type": "text", "text": f"{text} {self._canary(handle)}"}
        self.own[handle] = {"systemPrompt": {"mode": mode, "content": [block]}}
        return self.own[handle]

    def same(self, handle: str) -> dict[str, Any]:
        """``handle``'s own prompt again, as a client re-sends it on a load or resume."""
        return self.own.get(handle, {}) if self.resend else {}

    def valid(self, handle: str, cls: str, carrier: str | None = None) -> dict[str, Any]:
        """``handle``'s own prompt, a valid payload of class ``cls``, with the vendor
        ``carrier``'s other text beside it in the request's ``_meta`` (when given)."""
        canary = self._canary(handle)
        self.own[handle] = {"systemPrompt": valid_payload(cls, canary)}
        if carrier is None:
            return self.own[handle]
        return {**self.own[handle], "_meta": vendor_meta_of(carrier, canary)}

    def invalid(self, handle: str, variant: str) -> dict[str, Any]:
        return {"systemPrompt": invalid_payload(variant, self._canary(handle))}

    def add(self, *steps: dict[str, Any]) -> None:
        self.steps += steps


#: A part of a covering example: it writes its steps, given the example's first session.
Unit = Callable[[_Example, str], None]


@dataclass(frozen=True)
class _Group:
    """Covering examples of one kind: ``prefix`` (makes the session ``A`` the units act on;
    may be empty), as many ``units`` as fit in ``max_steps``, then ``suffix``."""

    prefix: Callable[[_Example], str | None]
    units: tuple[Unit, ...]
    suffix: Unit | None = None
    #: Only these keys are what the units are taken for, and take (``None``: all): an early
    #: group that must leave the rest of what its units send to the groups made for it.
    claims: frozenset[str] | None = None


def _new_session(ex: _Example) -> str:
    a = ex.handle()
    ex.add({"op": "new", "session": a, "cwd": "distinct", **ex.prompt(a)})
    return a


def _new_and_turn(ex: _Example) -> str:
    a = _new_session(ex)
    ex.add({"op": "prompt", "session": a})
    return a


def _two_sessions(ex: _Example) -> str:
    a = _new_and_turn(ex)
    b = ex.handle()
    ex.add({"op": "new", "session": b, "cwd": "distinct"}, {"op": "prompt", "session": b})
    return a


def _plain_and_turn(ex: _Example) -> str:
    a = ex.handle()
    ex.add({"op": "new", "session": a, "cwd": "distinct"}, {"op": "prompt", "session": a})
    return a


def _scope_modes(caps: Capabilities) -> tuple[str, ...]:
    return ("append", "override") if caps.override else ("append",)


def _mcp_modes(caps: Capabilities) -> tuple[str, ...]:
    """The prompt modes a session naming the MCP server is sent in (``none``: no prompt)."""
    return ("none", *(_scope_modes(caps) if caps.system_prompt else ()))


def _nothing(ex: _Example) -> str | None:
    return None


def _turn(ex: _Example, a: str) -> None:
    ex.add({"op": "prompt", "session": a})


def _groups(caps: Capabilities, resend: bool) -> list[_Group]:
    """The covering groups of an agent, in the order they run: the ops, each in the
    shortest sequence that shows its effect on the prompt, the shapes of the reviewed real
    findings, then the rest (the invalid payloads first)."""
    reopen = "load" if caps.load or caps.replay else "resume" if caps.resume else None
    groups = [*_op_groups(caps, reopen), _restart_group(caps, reopen)]
    payloads, changes, huge = _payload_groups(caps, resend) or [_Group(_nothing, ())] * 3
    # The shapes of the reviewed real findings right after the ops (issue #36: one run at the
    # defaults meets the bugs we know of early, and -x stops there): the valid payloads with
    # the vendor carriers (claude-agent-acp 5), the model faults (pi-acp 8), a reattach after
    # a close or a restart, re-sending the prompt and bare (codex-acp 1 and 2).
    groups += [payloads, _fault_group(), *_reattach_pair_groups(caps, resend)]
    groups += [_invalid_method_group(caps), *_scope_groups(caps),
               *_switch_groups(caps, reopen), *_compaction_groups(caps, resend, reopen)]
    # The invalid payloads first among the rest: each one request, so a bug one of them shows
    # is found (and, with -x, the run ends) within the first examples of every seed.
    groups += _invalid_groups(caps, resend)
    during, *deleted = _during_groups(caps)
    groups += [during, _together_group()]
    # The delete during a turn and the reattach during another's turn last: the kept
    # findings' examples (the pairs) come sooner.
    groups += [*_pair_groups(caps), changes, huge, *deleted]
    groups += [g for g in (_while_group(caps),) if g is not None]
    return groups


def _step(op: str, **kw: Any) -> Unit:
    """``op`` of the group's session."""
    return lambda ex, a: ex.add({"op": op, "session": a, **kw})


def _then_turn(unit: Unit) -> Unit:
    """``unit``, then a turn of the group's session."""
    def then(ex: _Example, a: str) -> None:
        unit(ex, a)
        ex.add({"op": "prompt", "session": a})
    return then


def _reattach(op: str, *, cancel_request: bool = False, **kw: Any) -> Unit:
    """``op`` (a load or resume) of the group's session, re-sending its prompt, and a turn
    (``kw``: more of the step, ``busy``). With ``cancel_request``: with a changed prompt and
    its ``$/cancel_request`` right behind it, so that the turn after shows whether a
    cancelled request left its prompt in force."""
    def unit(ex: _Example, a: str) -> None:
        if cancel_request:
            ex.add({"op": op, "session": a, **ex.prompt(a, _Q, lifecycle=True),
                    "cancel_request": True, **kw}, {"op": "prompt", "session": a})
        else:
            ex.add({"op": op, "session": a, **ex.same(a), **kw},
                   {"op": "prompt", "session": a})
    return unit


def _op_groups(caps: Capabilities, reopen: str | None) -> list[_Group]:
    """The lifecycle ops on sessions with a conversation: cancel, a refused new, list and
    close; load and resume; fork; delete."""
    groups: list[_Group] = []
    # Two sessions, one with a prompt, a turn each (the other's turn shows a leak), then a
    # cancel, a refused session/new (its error shows a leak), a list and a close of the
    # first (close last: it ends the session).
    turns: list[Unit] = [_step("cancel")]
    if caps.system_prompt:
        def refused(ex: _Example, _: str) -> None:
            c = ex.handle()
            ex.add({"op": "new", "session": c, "cwd": "distinct",
                    **ex.invalid(c, invalid_variants(override=caps.override)[0])})
        turns.append(refused)
    if caps.list:
        turns.append(lambda ex, a: ex.add({"op": "list"}))
    # The queries the agent answers (session/status), each with a turn after it: a query
    # changes nothing, and the turn shows whether the prompt is still the one in force.
    turns += [_then_turn(_step(op)) for op in QUERIES if TABLE[Op(op)].offered(caps)]
    if caps.close:
        turns.append(_step("close"))
    groups.append(_Group(_two_sessions, tuple(turns)))
    # load and resume of a session with a conversation, re-sending its prompt, and a turn;
    # then one with a changed prompt and its $/cancel_request right behind it
    # (cancel-request:<op>), and a turn: a refused one changed nothing (its prompt is not in
    # force), an accepted one is a reattach as any.
    for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume)):
        if ok:
            groups.append(_Group(_new_and_turn, (_reattach(op),
                                                 _reattach(op, cancel_request=True))))
    if caps.fork:
        def fork(ex: _Example, a: str) -> None:
            b = ex.handle()
            ex.add({"op": "fork", "session": a, "new": b,
                    **ex.prompt(b, _Q, lifecycle=True)},
                   {"op": "prompt", "session": b}, {"op": "prompt", "session": a})

        def cancelled_fork(ex: _Example, a: str) -> None:
            # A fork with its $/cancel_request right behind it, then a turn of the source
            # (the list probe after a refused one shows whether a copy was left).
            ex.add({"op": "fork", "session": a, "new": ex.handle(), "cancel_request": True},
                   {"op": "prompt", "session": a})
        groups.append(_Group(_new_session, (fork, cancelled_fork)))
    if caps.delete:
        # The machine's delete: a turn of the deleted session (which must be refused), then
        # a new session where the deleted one lived, and a turn on it.
        def delete(ex: _Example, a: str) -> None:
            a = ex.handle()
            ex.add({"op": "new", "session": a, "cwd": "shared", **ex.prompt(a)},
                   {"op": "delete", "session": a}, {"op": "prompt", "session": a})
            b = ex.handle()
            ex.add({"op": "new", "session": b, "cwd": "shared"}, {"op": "prompt", "session": b})
        groups.append(_Group(_nothing, (delete,)))
    return groups


def _restart_group(caps: Capabilities, reopen: str | None) -> _Group:
    """A restart after a turn, and (where sessions can be listed and reopened) a session
    reopened in a new process before its first turn, then the list."""
    def restart(ex: _Example, _: str) -> None:
        # In override mode where the agent offers it (the only example that sends it): what
        # a new process must rebuild is then the whole system slot, and a prompt it rebuilds
        # without its mode shows as the defaults come back.
        a = ex.handle()
        ex.add({"op": "new", "session": a, "cwd": "distinct",
                **ex.prompt(a, mode="override" if caps.override else "append")},
               {"op": "prompt", "session": a}, {"op": "restart"})
        if reopen is None:
            b = ex.handle()
            ex.add({"op": "new", "session": b, "cwd": "distinct"}, {"op": "prompt", "session": b})
        else:
            _reattach(reopen)(ex, a)

    def cold_list(ex: _Example, _: str) -> None:
        # A session loaded in a new process before its first turn, then the list: it must
        # show the session by its own id (an agent that stores a session only with its first
        # turn may restore it as a new one).
        a = ex.handle()
        ex.add({"op": "new", "session": a, "cwd": "distinct", **ex.prompt(a)},
               {"op": "restart"}, {"op": reopen, "session": a, **ex.same(a)}, {"op": "list"},
               {"op": "prompt", "session": a})
    return _Group(_nothing, (restart, cold_list) if caps.list and reopen else (restart,))


def _invalid_method_group(caps: Capabilities) -> _Group:
    """Each method an ``invalid`` step probes, with a session id that cannot exist."""
    def invalid(method: str) -> Unit:
        return lambda ex, _: ex.add({"op": "invalid", "method": method,
                                     "params": invalid_params(method),
                                     "why": "unknown session id"})
    return _Group(_nothing, tuple(invalid(m) for m in _invalid_methods(caps)))


def _scope_groups(caps: Capabilities) -> list[_Group]:
    """What a prompt reaches beside the instructions: MCP servers, tools, modes, options."""
    # Sessions that name acp-fuzz's MCP server, one per prompt mode, then one that does not:
    # each named server's tool must reach its session's turn, and no other session's.
    def named(mode: str | None) -> Unit:
        def unit(ex: _Example, _: str) -> None:
            b = ex.handle()
            sp = ex.prompt(b, mode=mode) if mode else {}
            ex.add({"op": "new", "session": b, "cwd": "distinct", **sp, "mcp": True},
                   {"op": "prompt", "session": b})
        return unit

    def beside(ex: _Example, _: str) -> None:
        d = ex.handle()
        ex.add({"op": "new", "session": d, "cwd": "distinct"}, {"op": "prompt", "session": d})

    def first(ex: _Example) -> str:
        named(None)(ex, "")
        return "A"
    groups = [_Group(first, (*(named(m) for m in _mcp_modes(caps)[1:]), beside))]
    if caps.system_prompt:
        # A session without a prompt and a turn, then one per mode: what a prompt must not
        # change beside the instructions (the tools a turn offers, the modes and config
        # options session/new answers) is compared with the first.
        def scoped(mode: str) -> Unit:
            def unit(ex: _Example, _: str) -> None:
                b = ex.handle()
                ex.add({"op": "new", "session": b, "cwd": "distinct",
                        **ex.prompt(b, mode=mode)}, {"op": "prompt", "session": b})
            return unit
        groups.append(_Group(_plain_and_turn, tuple(scoped(m) for m in _scope_modes(caps))))
    return groups


def _switch_groups(caps: Capabilities, reopen: str | None) -> list[_Group]:
    """A mode, config option or title switch and a turn; a reattach or fork to another
    folder; a reattach while a turn runs."""
    groups: list[_Group] = []
    switches: list[Unit] = []
    if caps.set_mode:
        switches.append(lambda ex, a: ex.add({"op": "set_mode", "session": a, "pick": 0},
                                             {"op": "prompt", "session": a}))
    if caps.set_config_option:
        switches.append(lambda ex, a: ex.add({"op": "set_config_option", "session": a,
                                              "option": 0, "pick": 0},
                                             {"op": "prompt", "session": a}))
    if caps.title:
        switches.append(lambda ex, a: ex.add({"op": "set_title", "session": a,
                                              "title": TITLES[0]},
                                             {"op": "prompt", "session": a}))
    if switches:
        groups.append(_Group(_new_session, tuple(switches)))
    moving = reopen or ("fork" if caps.fork else None)
    if caps.additional_directories and moving is not None:
        def moved(**kw: Any) -> Unit:
            if moving != "fork":
                return _reattach(moving, **kw)

            def unit(ex: _Example, a: str) -> None:
                b = ex.handle()
                ex.add({"op": "fork", "session": a, "new": b, **kw},
                       {"op": "prompt", "session": b})
            return unit
        groups.append(_Group(_new_session, (moved(cwd="moved"), moved(roots=1))))
    if caps.replay:
        groups.append(_Group(_new_session, (_reattach("resume", busy=True),
                                            _reattach("load", busy=True))))
    return groups


def _compaction_groups(caps: Capabilities, resend: bool, reopen: str | None) -> list[_Group]:
    """Each way the agent can be made to compact, after a turn (there is nothing to compact
    before one), and a turn after it, where the prompt the agent rebuilt shows; and a change
    deferred to that rebuild."""
    groups = [_Group(_new_and_turn, (_step("compact", by=by),), _turn)
              for by in caps.compactions()]
    if _deferral_before_compaction(caps, resend) and reopen is not None:
        # A change on a live reattach, which the agent may defer to its next rebuild
        # (SP-LIFECYCLE-DEFER-MAY), then that rebuild, and two turns: the change must show.
        def deferred(ex: _Example, a: str) -> None:
            ex.add({"op": reopen, "session": a, **ex.prompt(a, _Q, lifecycle=True)},
                   {"op": "compact", "session": a, "by": caps.compactions()[0]},
                   {"op": "prompt", "session": a}, {"op": "prompt", "session": a})
        groups.append(_Group(_new_and_turn, (deferred,)))
    return groups


def _invalid_groups(caps: Capabilities, resend: bool) -> list[_Group]:
    """Every invalid payload variant on every request that carries a prompt, each one a
    rejected request, packed: ``session/new`` ones alone, the others on one session."""
    groups: list[_Group] = []
    # The invalid payloads: each one a rejected request, packed.
    requests = prompt_requests(caps, resend_on_lifecycle=resend)
    variants = invalid_variants(override=caps.override)
    if "new" in requests:
        def rejected_new(v: str) -> Unit:
            def unit(ex: _Example, _: str) -> None:
                h = ex.handle()
                ex.add({"op": "new", "session": h, "cwd": "distinct", **ex.invalid(h, v)})
            return unit
        groups.append(_Group(_nothing, tuple(rejected_new(v) for v in variants)))
    reopened: list[Unit] = []
    for op in requests[1:]:
        for v in variants:
            if op == "fork":
                def rejected_fork(ex: _Example, a: str, v: str = v) -> None:
                    b = ex.handle()
                    ex.add({"op": "fork", "session": a, "new": b, **ex.invalid(b, v)})
                reopened.append(rejected_fork)
            else:
                def rejected(ex: _Example, a: str, op: str = op, v: str = v) -> None:
                    ex.add({"op": op, "session": a, **ex.invalid(a, v)})
                reopened.append(rejected)
    if reopened:
        # After a turn: a refused request on a session with a conversation must leave it as
        # it was (a reattach refused after unloading it leaves its next turn failing).
        groups.append(_Group(_new_and_turn, tuple(reopened), _turn))
    return groups


#: The ops whose ordered pairs the covering examples send, each pair on one session: the
#: ones that change a session's place in the lifecycle or what it holds (a turn, a switch
#: or a list changes neither; a list is sent after a delete, where it shows what the delete
#: left). ``restart`` acts on every session.
PAIR_OPS = ("cancel", "close", "load", "resume", "fork", "delete", "restart", "compact")
#: The ops that close a session, after which a second op that needs it open goes out
#: behind a reopen (``close; load; fork`` is the pair ``close+fork``).
_CLOSING = ("close", "restart")


def _pair_ops(caps: Capabilities) -> list[str]:
    ok = {"cancel": True, "close": caps.close, "load": caps.load or caps.replay,
          "resume": caps.resume, "fork": caps.fork, "delete": caps.delete, "restart": True,
          "compact": bool(caps.compactions())}
    return [op for op in PAIR_OPS if ok[op]]


def _pairs(caps: Capabilities) -> list[tuple[str, str]]:
    """The ordered pairs of :data:`PAIR_OPS` this agent supports, that can follow each other
    on one session (nothing but a restart or a list follows its delete; an op that needs an
    open session follows a close or a restart only where a load or resume can reopen it).

    A reattach is not the first op of a pair of its own: ``close; load; X`` and ``restart;
    load; X``, sent for every ``X`` that needs the session open, already put it there, and
    the pairs stay few enough (41 units, 17 examples, for an agent with every op)."""
    ops = _pair_ops(caps)
    reopen = caps.load or caps.replay or caps.resume
    out: list[tuple[str, str]] = []
    for x in (op for op in ops if op not in REATTACHES):
        out += [(x, y) for y in ops if y != x and (x != "delete" or y == "restart") and (
            reopen or x not in _CLOSING or NEEDS[y] != "open")]
        if x == "delete" and caps.list:
            out.append((x, "list"))
    return out


def _omits(caps: Capabilities, resend: bool) -> list[tuple[str, str]]:
    """The pairs a reattach ends that go out a second time with the prompt omitted: after a
    close or a restart, where the agent must rebuild the session from what it stored."""
    if not (caps.system_prompt and resend):
        return []
    return [(x, y) for x, y in _pairs(caps) if x in _CLOSING and y in REATTACHES]


def _pair_keys(caps: Capabilities, resend: bool) -> list[str]:
    return [f"pair:{x}+{y}" for x, y in _pairs(caps)] + [
        f"pair:{x}+{y}:omitted" for x, y in _omits(caps, resend)]


def _pairs_of(step: Mapping[str, Any], before: Sequence[Mapping[str, Any]]) -> list[str]:
    """The pairs ``step`` covers, given the steps sent ``before`` it: ``pair:<x>+<op>``,
    where ``x`` is the last op of :data:`PAIR_OPS` on its session since it was made (turns
    and switches in between do not count; a restart or a list pairs with the last such op of
    any session), also past a reopen right behind a close or a restart for an op that needs
    the session open, and ``pair:<x>+<op>:omitted`` for a reattach after a close or restart
    that omits the prompt (or sends ``null``)."""
    op = step.get("op")
    if op in ("restart", "list"):
        prev = next((s.get("op") for s in reversed(before) if s.get("op") in PAIR_OPS), None)
        return [f"pair:{prev}+{op}"] if prev is not None else []
    if op not in PAIR_OPS:
        return []
    h, seen = step.get("session"), []
    for s in before:
        o = s.get("op")
        if o in CREATES and (s.get("new") if o == "fork" else s.get("session")) == h:
            seen = ["fork"] if o == "fork" else []
        elif o == "restart" or (o in PAIR_OPS and s.get("session") == h):
            seen.append(o)
    if not seen:
        return []
    out = [f"pair:{seen[-1]}+{op}"]
    if len(seen) > 1 and seen[-1] in REATTACHES and seen[-2] in _CLOSING \
            and NEEDS[op] == "open":
        out.append(f"pair:{seen[-2]}+{op}")
    if op in REATTACHES and seen[-1] in _CLOSING and step.get("systemPrompt") is None:
        out.append(f"pair:{seen[-1]}+{op}:omitted")
    return out


def _last_prompt(handle: Any, before: Sequence[Mapping[str, Any]]) -> Any:
    """The last ``systemPrompt`` sent for ``handle`` in ``before``, or None: none was, or
    the session has had a turn (``change:<op>`` is a change before the first turn)."""
    out = None
    for s in before:
        mine = s.get("new") == handle if s.get("op") == "fork" else s.get("session") == handle
        if mine and s.get("op") in ("prompt", "cancel"):
            return None
        if mine and s.get("op") in PROMPT_REQUESTS and s.get("systemPrompt") is not None:
            out = s["systemPrompt"]
    return out


def _changes(caps: Capabilities, resend: bool) -> list[str]:
    """The reattaches that carry a changed prompt in a covering example of their own."""
    if not (caps.system_prompt and resend):
        return []
    return [op for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume)) if ok]


def _payload_keys(caps: Capabilities, resend: bool) -> list[str]:
    """Each vendor carrier beside the standard field (where the standard field is what the
    run sends), each valid payload class the agent may be sent, then a changed prompt on
    each reattach."""
    if not caps.system_prompt:
        return []
    vendor = [f"vendor:{c}" for c in VENDOR_CARRIERS] if resend else []
    return vendor + [f"valid:{c}" for c in VALID_CLASSES if c != "override" or caps.override] \
        + [f"change:{op}" for op in _changes(caps, resend)] \
        + [f"change:cold-{op}" for op in _changes(caps, resend)]


def _payload_groups(caps: Capabilities, resend: bool) -> list[_Group]:
    """The valid payloads: each vendor carrier with another text beside a valid standard
    prompt, then each valid payload class, each on a ``session/new`` of its own and a turn
    (where which prompt won, and whether it arrived whole, shows)."""
    if not caps.system_prompt:
        return []

    def sent(cls: str, carrier: str | None = None) -> Unit:
        def unit(ex: _Example, _: str) -> None:
            a = ex.handle()
            ex.add({"op": "new", "session": a, "cwd": "distinct", **ex.valid(a, cls, carrier)},
                   {"op": "prompt", "session": a})
        return unit
    def changed(op: str) -> Unit:
        # Before any turn: an agent that stores a session only with its first turn has
        # nothing yet to apply the change to (codex-acp 2.6.0 refuses it).
        def unit(ex: _Example, _: str) -> None:
            a = ex.handle()
            ex.add({"op": "new", "session": a, "cwd": "distinct", **ex.prompt(a)},
                   {"op": op, "session": a, **ex.prompt(a, _Q, lifecycle=True)},
                   {"op": "prompt", "session": a})
        return unit
    def cold(op: str) -> Unit:
        # After a restart: the new process has only what the session stored, so the change
        # is applied when the session is rebuilt, which the cold load is; two turns after it
        # show a change kept back past that rebuild (prompt.change-ignored). A turn before
        # the restart: an agent that stores a session only with its first turn has nothing
        # to load otherwise.
        def unit(ex: _Example, _: str) -> None:
            a = ex.handle()
            ex.add({"op": "new", "session": a, "cwd": "distinct", **ex.prompt(a)},
                   {"op": "prompt", "session": a}, {"op": "restart"},
                   {"op": op, "session": a, **ex.prompt(a, _Q, lifecycle=True)},
                   {"op": "prompt", "session": a}, {"op": "prompt", "session": a})
        return unit
    units = [sent("one-block", c) for c in VENDOR_CARRIERS] if resend else []
    units += [sent(c) for c in VALID_CLASSES
              if (c != "override" or caps.override) and c not in SIZES]
    # After the pairs (see _groups): codex-acp refuses a change and a re-sent prompt after a
    # close alike, and the MUST one should be what a run reports. The huge prompts last, in
    # an example of their own: megabytes each, and an agent that dies of one takes no other
    # class's unit down with it.
    return [_Group(_nothing, tuple(units)),
            _Group(_nothing, tuple(changed(op) for op in _changes(caps, resend))
                   + tuple(cold(op) for op in _changes(caps, resend))),
            _Group(_nothing, tuple(sent(c) for c in SIZES))]


def _pair_groups(caps: Capabilities) -> list[_Group]:
    """Every pair of :func:`_pairs`, each on a session of its own: ``new A (P)``, the two
    ops (a turn first where a compaction needs one, a reopen where the second needs the
    session open), then a turn on each session they left open (after a restart, a reopen
    and a turn), where the prompt after them shows. (The reattaches after a close or a
    restart, re-sent and bare, go out early: :func:`_reattach_pair_groups`.)"""
    units = [_pair_unit(caps, x, y) for x, y in _pairs(caps)]
    return [_Group(_nothing, tuple(units))] if units else []


def _reattach_pair_groups(caps: Capabilities, resend: bool) -> list[_Group]:
    """The pairs of :func:`_omits` (a reattach after a close or a restart), early, each
    re-sending the prompt and then bare: where the new process (or the closed session) must
    rebuild the prompt from what it stored, and where the real agents failed (codex-acp 1
    refuses the re-sent prompt, 2 hangs on the bare one). They claim only those pairs'
    keys: what else their steps cover still goes out in its own examples."""
    pairs = _omits(caps, resend)
    units = [_pair_unit(caps, x, y, omit=omit) for x, y in pairs for omit in (False, True)]
    keys = frozenset(k for x, y in pairs for k in (f"pair:{x}+{y}", f"pair:{x}+{y}:omitted"))
    return [_Group(_nothing, tuple(units), claims=keys)] if units else []


def _pair_unit(caps: Capabilities, x: str, y: str, *, omit: bool = False) -> Unit:
    reopen = "load" if caps.load or caps.replay else "resume"

    def life(ex: _Example) -> Lifecycle:
        model = Lifecycle()
        for s in ex.steps:
            model.apply(s)
        return model

    def send(ex: _Example, op: str, a: str, touched: list[str]) -> None:
        if op in ("restart", "list"):
            ex.add({"op": op})
            return
        if op == "delete":
            # As the machine deletes: a new session where the deleted one lived, and a turn.
            b = ex.handle()
            ex.add({"op": "delete", "session": a}, {"op": "new", "session": b, "cwd": "shared"})
            touched.append(b)
            return
        if NEEDS[op] == "open" and not life(ex).is_open(a):
            ex.add({"op": reopen, "session": a, **ex.same(a)})
        if op == "compact" and not life(ex).talked(a):
            ex.add({"op": "prompt", "session": a})
        if op == "fork":
            b = ex.handle()
            ex.add({"op": "fork", "session": a, "new": b, **ex.prompt(b, _Q, lifecycle=True)})
            touched.append(b)
        elif op in REATTACHES:
            ex.add({"op": op, "session": a, **({} if omit and op == y else ex.same(a))})
        else:
            ex.add({"op": op, "session": a,
                    **({"by": caps.compactions()[0]} if op == "compact" else {})})

    def unit(ex: _Example, _: str) -> None:
        a = ex.handle()
        ex.add({"op": "new", "session": a, "cwd": "shared" if "delete" in (x, y) else "distinct",
                **ex.prompt(a)})
        touched = [a]
        for op in (x, y):
            send(ex, op, a, touched)
        if y == "restart" and life(ex).exists(a) and (caps.load or caps.replay or caps.resume):
            ex.add({"op": reopen, "session": a, **ex.same(a)})
        now = life(ex)
        ex.add(*({"op": "prompt", "session": h} for h in touched if now.is_open(h)))
    return unit


def _after_life(step: Mapping[str, Any], before: Sequence[Mapping[str, Any]]) -> list[str]:
    """``delete:prompt`` for a turn of a session deleted in ``before``; ``list:cold-load`` for
    a list while a session loaded or resumed in a new process (after a restart) exists."""
    life, cold = Lifecycle(), set()
    for s in before:
        h = s.get("session")
        if s.get("op") in REATTACHES and life.cold(h):
            cold.add(h)
        elif s.get("op") in ("new", "delete"):
            cold.discard(h)
        life.apply(s)
    if step.get("op") == "prompt":
        return ["delete:prompt"] if life.deleted(step.get("session")) else []
    return ["list:cold-load"] if any(life.exists(h) for h in cold) else []


def _cold_change(step: Mapping[str, Any], before: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``step``, a load or resume, is the first reattach of its session after a
    restart in ``before`` and carries a prompt other than the last one sent for it."""
    handle, prompt, cold = step.get("session"), None, False
    for s in before:
        op = s.get("op")
        if op == "restart":
            cold = True
            continue
        mine = s.get("new") == handle if op == "fork" else s.get("session") == handle
        if not mine or op not in PROMPT_REQUESTS:
            continue
        if op in CREATES:
            prompt = s.get("systemPrompt")
        else:
            cold = False
            prompt = s.get("systemPrompt") or prompt
    return cold and prompt is not None and step.get("systemPrompt") not in (None, prompt)


def _changed_live(handle: Any, before: Sequence[Mapping[str, Any]]) -> bool:
    """Whether, in ``before``, a live load or resume of ``handle`` (not the first after a
    restart) changed its prompt since it was last compacted (see :func:`step_keys`). A
    restart since does not undo it: a change deferred to the next compaction outlives the
    process."""
    prompt: Any = None
    changed = cold = False
    for s in before:
        op = s.get("op")
        if op == "restart":
            cold = True
        if s.get("session") != handle and not (op == "fork" and s.get("new") == handle):
            continue
        if op == "compact":
            changed = False
        elif op in CREATES and "systemPrompt" in s:
            prompt = s["systemPrompt"]
        elif op in REATTACHES:
            if s.get("systemPrompt") is not None:
                changed = changed or (s["systemPrompt"] != prompt and not cold)
                prompt = s["systemPrompt"]
            cold = False
    return changed


def _keys(steps: Sequence[Mapping[str, Any]], caps: Capabilities) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for i, s in enumerate(steps):
        out.update(dict.fromkeys(step_keys(s, caps, steps[:i])))
    return tuple(out)


def covering_examples(caps: Capabilities, *, resend_on_lifecycle: bool = True,
                      max_steps: int = 12, keys: Sequence[str] | None = None) -> list[Cover]:
    """The covering examples of an agent with these capabilities, in the order a campaign
    runs them; with ``keys``, only what covers those: a unit (with its group's first session)
    is taken when it covers a key that the units taken before it do not. Each example has at
    most ``max_steps`` steps (one unit longer than that is an example of its own) and at most
    26 sessions, and each is a valid sequence (:func:`acp_fuzz.core.lifecycle.allowed`)."""
    remaining = set(cover_keys(caps, resend_on_lifecycle=resend_on_lifecycle)
                    if keys is None else keys)
    out: list[Cover] = []
    for group in _groups(caps, resend_on_lifecycle):
        # Each unit (with the group's first session) that still covers something wanted.
        units = []
        for unit in group.units:
            covers = {k for k in _unit_keys(group, unit, caps, resend_on_lifecycle)
                      if group.claims is None or k in group.claims}
            if covers & remaining:
                units.append(unit)
                remaining -= covers
        while units:
            ex, a = _start(group, caps, resend_on_lifecycle)
            taken = 0
            for unit in units:
                trial, _ = _start(group, caps, resend_on_lifecycle)
                for u in [*units[:taken], unit]:
                    u(trial, a or "")
                if group.suffix is not None:
                    group.suffix(trial, a or "")
                if taken and (len(trial.steps) > max_steps or trial.handles > len(HANDLES)):
                    break
                taken += 1
            for u in units[:taken]:
                u(ex, a or "")
            if group.suffix is not None:
                group.suffix(ex, a or "")
            units = units[taken:]
            assert allowed(ex.steps), ex.steps
            out.append(Cover(tuple(ex.steps), _keys(ex.steps, caps)))
    return out


def cover_share(caps: Capabilities, index: int, n: int, *, resend_on_lifecycle: bool = True,
                max_steps: int = 12) -> list[str]:
    """The keys that campaign ``index`` of ``n`` (a worker of ``--workers``, a shard of
    ``--shard``; 0-based) sends in its covering examples: those that the ``index``-th,
    ``index + n``-th, ... example of the whole plan (:func:`covering_examples`) is the first
    to cover. The shares partition :func:`cover_keys`. The campaign runs those plan examples
    as they are (``n`` campaigns together run each once), and builds new ones only for what
    they left unsent (``covering_examples(caps, keys=...)``)."""
    plan = covering_examples(caps, resend_on_lifecycle=resend_on_lifecycle, max_steps=max_steps)
    wanted = set(cover_keys(caps, resend_on_lifecycle=resend_on_lifecycle))
    first: dict[str, int] = {}  # each key, and the first example of the plan that covers it
    for i, ex in enumerate(plan):
        for k in ex.keys:
            if k in wanted:  # not what a step covers only beside another example's
                first.setdefault(k, i)
    return [k for k, i in first.items() if i % n == index]


def _start(group: _Group, caps: Capabilities, resend: bool) -> tuple[_Example, str | None]:
    ex = _Example(caps, resend)
    return ex, group.prefix(ex)


def _unit_keys(group: _Group, unit: Unit, caps: Capabilities, resend: bool) -> tuple[str, ...]:
    """The keys of a group's prefix and ``unit``, with its suffix."""
    ex, a = _start(group, caps, resend)
    unit(ex, a or "")
    if group.suffix is not None:
        group.suffix(ex, a or "")
    return _keys(ex.steps, caps)
