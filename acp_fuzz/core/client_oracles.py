"""Client oracles: judge what an ACP *client* sent to the stand-in agent (pure).

``acp-fuzz client`` plays the agent (``acp_fuzz.engine.client.stand_in``) and records every frame in
a history, like ``target`` does for agents. Here the roles are the other way round, but the
directions keep their meaning: ``dir: "send"`` is a frame from the client to the agent,
``"recv"`` one from the agent (the stand-in) to the client. Each stand-in process is one
connection, numbered by ``data["conn"]`` on its ``acp`` events (a missing one reads as 0);
sessions outlive connections (a scenario creates a session in one command line and reattaches
it in the next), so what a session's prompt is carries across them.

:func:`judge_client` reads the events in order and returns the findings (one per oracle and
method, with the number of occurrences in its evidence) and how many cases each oracle judged.
What was advertised is read from the stand-in's recorded ``initialize`` answer on the same
connection, never from the drawn capability set: a cassette is judged by what crossed the
wire. A request the client sent before that answer came is judged against nothing advertised.

The oracles (:data:`CLIENT_CATALOG`; ``docs/oracles.md``, "Client oracles"):

``client.prompt-unadvertised`` (MUST, SP-CLIENT-GATE-MUSTNOT)
    ``systemPrompt`` in any request although the agent did not advertise it. ``null`` is not
    counted: the schema makes it the same as leaving the field out.
``client.override-unadvertised`` (MUST, SP-CLIENT-OVERRIDE-GATE-MUSTNOT)
    ``mode: "override"`` without ``mode.override``.
``client.prompt-non-text`` (MUST, SP-CLIENT-CONTENT-TEXT-MUSTNOT)
    a ``systemPrompt`` content block that is not ``text``.
``client.prompt-empty`` (MUST, SP-CLIENT-CONTENT-EMPTY-MUSTNOT)
    ``content: []``.
``client.prompt-malformed`` (MUST, ACPFUZZ-CLIENT-PROMPT-SHAPE-MUST)
    an advertised ``systemPrompt`` that is not ``{mode, content: [...]}`` (an earlier draft's
    string or array, docs/rules.md).
``client.capability-unadvertised`` (MUST, CAP-CLIENT-GATE-MUSTNOT)
    a gated method (``session/load``, ``resume``, ``fork``, ``close``, ``list``, ``delete``,
    ``set_title``, ``set_mode``, ``set_config_option``, ``authenticate``, ``logout``; in v2
    ``session/load`` at all), ``additionalDirectories``, or an ``image``/``audio``/``resource``
    prompt block (then PROMPT-CLIENT-CAP-MUSTNOT) without its capability.
``client.before-initialize`` (MUST, INIT-CLIENT-FIRST-MUST)
    a request other than ``initialize`` on a connection before its ``initialize``.
``client.prompt-not-resent`` (SHOULD, SP-CLIENT-RESEND-SHOULD)
    a load, resume or fork of a session that has a prompt, without it; info when the
    session's prompt went in a vendor ``_meta`` key only and is re-sent in no form; nothing
    when the prompt is an override the connection does not advertise (the gate comes first).
``client.prompt-changed`` (SHOULD, SP-CLIENT-RESEND-SHOULD)
    a load, resume or fork that sends another prompt than the session's (or one where the
    session was created without).
``client.legacy-meta-prompt`` (SHOULD, ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD; info beside it)
    a vendor ``_meta`` prompt (``_meta.systemPrompt`` and the other dialects of §7.5) where the
    agent advertised the standard field: SHOULD when it is sent *instead of* the standard
    field, info when *beside* it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.checks import BaseContext, Ledger, builtin, checks, run_user_check
from acp_fuzz.core.findings import CLIENT_CATALOG, Finding
from acp_fuzz.core.history import Event
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.rules import RULES

__all__ = ["CLIENT_CATALOG", "CLIENT_HARNESS_RULES", "ClientContext", "ClientVerdict",
           "judge_client"]

#: Rules of acp-fuzz's own for client oracles that no rule of the reference states: the
#: ``ACPFUZZ-CLIENT-*`` rows of :data:`acp_fuzz.core.rules.RULES` (argued in docs/oracles.md,
#: "Client oracles", and quoted in docs/rules.md).
CLIENT_HARNESS_RULES: dict[str, str] = {
    r.id: r.reading for r in RULES if r.id.startswith("ACPFUZZ-CLIENT-")}


#: Where systemPrompt belongs (v1; v2 has no load).
LIFECYCLE = ("session/new", "session/load", "session/resume", "session/fork")
#: Reattaching requests, which should carry the session's prompt again.
REATTACH = ("session/load", "session/resume", "session/fork")

#: Gated methods: the Capabilities flag, and the capability's wire name for messages.
_GATES: dict[str, tuple[str, str]] = {
    "session/load": ("load", "agentCapabilities.loadSession"),
    "session/resume": ("resume", "sessionCapabilities.resume"),
    "session/fork": ("fork", "sessionCapabilities.fork"),
    "session/close": ("close", "sessionCapabilities.close"),
    "session/list": ("list", "sessionCapabilities.list"),
    "session/delete": ("delete", "sessionCapabilities.delete"),
    "session/set_title": ("title", "sessionCapabilities.title"),
}
_V2_GATE_NAMES = {"session/fork": "capabilities.session.fork",
                  "session/delete": "capabilities.session.delete",
                  "session/set_title": "capabilities.session.title"}
#: Methods v2 removed (docs/rules.md): never advertised there.
_V2_REMOVED = {"session/load": "v2 has no session/load (a load is session/resume with "
                               "replayFrom, SP-V2-NOLOAD-DEF)",
               "session/set_mode": "v2 has no session/set_mode",
               "authenticate": "v2 calls it auth/login",
               "logout": "v2 calls it auth/logout"}
#: Prompt block types beyond the baseline, and the promptCapabilities flag each needs.
_PROMPT_BLOCKS = {"image": "image", "audio": "audio", "resource": "embeddedContext"}

EXCERPT = 400


@dataclass
class ClientVerdict:
    """What :func:`judge_client` found: the findings (in the order first seen) and the cases
    each (oracle, rule) judged."""

    findings: list[Finding] = field(default_factory=list)
    judged: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The stand-in's ``initialize`` answers, one per connection that got one.
    initialize: dict[int, Any] = field(default_factory=dict)


@dataclass
class _Conn:
    initialized: bool = False
    result: Any = None
    caps: Capabilities = field(default_factory=Capabilities)
    version: int = 1
    prompt_caps: frozenset[str] = frozenset()
    auth_methods: bool = False
    logout: bool = False
    offered_modes: bool = False
    offered_config: bool = False
    pending: dict[str, tuple[str, Any]] = field(default_factory=dict)


@dataclass
class _Judge:
    step: int = -1
    conns: dict[int, _Conn] = field(default_factory=dict)
    #: session id -> its prompt (the normal form of :func:`_normal`, or None: none)
    sessions: dict[str, str | None] = field(default_factory=dict)
    #: session id -> the same prompt as the client sent it (for users' checks)
    prompts: dict[str, Any] = field(default_factory=dict)
    #: session id -> the vendor ``_meta`` prompt keys it was created with, where the
    #: standard field was advertised and not sent
    legacy: dict[str, list[str]] = field(default_factory=dict)
    found: dict[tuple[str, str], Finding] = field(default_factory=dict)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    judged: Counter[tuple[str, str]] = field(default_factory=Counter)

    # -- reporting ---------------------------------------------------------------------------

    def judge(self, oracle: str, rule: str | None = None) -> None:
        self.judged[(oracle, rule or CLIENT_CATALOG[oracle].rule)] += 1

    def add(self, oracle: str, method: str, message: str, *, conn: int, event: Event,
            session: str | None = None, severity: str | None = None, rule: str | None = None,
            **evidence: Any) -> None:
        info = CLIENT_CATALOG[oracle]
        key = (oracle, method)
        self.counts[key] += 1
        if key in self.found:
            return
        msg = event.data.get("msg")
        rid = msg.get("id") if isinstance(msg, Mapping) else None
        self.found[key] = Finding(
            oracle=oracle, severity=severity or info.severity, rule=rule or info.rule,
            message=message, step=self.step, session=session,
            evidence={"method": method, "request_id": rid, "connection": conn,
                      "event": event.seq, **evidence})

    def verdict(self, ledger: Ledger) -> ClientVerdict:
        """The built-in oracles' findings (with their occurrences), then the users' checks'
        (``ledger``), in the order first seen; the cases both judged."""
        out = []
        for key, f in self.found.items():
            n = self.counts[key]
            if n > 1:
                f = Finding(oracle=f.oracle, severity=f.severity, rule=f.rule,
                            message=f.message, step=f.step, session=f.session,
                            evidence={**f.evidence, "occurrences": n})
            out.append(f)
        out += ledger.findings.values()
        return ClientVerdict(out, self.judged + Counter(ledger.judged),
                             {n: c.result for n, c in self.conns.items() if c.result is not None})

    # -- events ------------------------------------------------------------------------------

    def event(self, ev: Event) -> None:
        if ev.kind == "step":
            index = ev.data.get("index")
            if isinstance(index, int) and not isinstance(index, bool):
                self.step = index
            return
        if ev.kind != "acp":
            return
        msg = ev.data.get("msg")
        if not isinstance(msg, Mapping):
            return
        n = ev.data.get("conn", 0)
        n = n if isinstance(n, int) and not isinstance(n, bool) else 0
        conn = self.conns.setdefault(n, _Conn())
        if ev.data.get("dir") == "send":
            method = msg.get("method")
            if isinstance(method, str):
                self.client_message(conn, n, ev, method, msg)
        elif "method" not in msg and "id" in msg:
            self.response(conn, msg)

    def client_message(self, conn: _Conn, n: int, ev: Event, method: str,
                       msg: Mapping[str, Any]) -> None:
        is_request = "id" in msg
        params = msg.get("params")
        params = params if isinstance(params, Mapping) else {}
        if is_request:
            conn.pending[_key(msg["id"])] = (method, params)
        if method == "initialize":
            conn.initialized = True
            return
        if is_request:
            self.judge("client.before-initialize")
            if not conn.initialized:
                self.add("client.before-initialize", method,
                         f"{method} sent before initialize on connection {n}", conn=n,
                         event=ev)
                return  # nothing else is judged on a connection that never said hello
        elif not conn.initialized:
            return
        self.prompt_field(conn, n, ev, method, params)
        self.legacy_meta(conn, n, ev, method, params)
        if is_request:
            self.gates(conn, n, ev, method, params)
            if method in REATTACH:
                self.resend(conn, n, ev, method, params)

    def response(self, conn: _Conn, msg: Mapping[str, Any]) -> None:
        pending = conn.pending.pop(_key(msg["id"]), None)
        result = msg.get("result")
        if pending is None or "error" in msg or not isinstance(result, Mapping):
            return
        method, params = pending
        if method == "initialize":
            self.initialized(conn, result)
            return
        if result.get("modes") is not None:
            conn.offered_modes = True
        if result.get("configOptions") is not None:
            conn.offered_config = True
        sent = self.usable_prompt(conn, params)
        raw = params.get("systemPrompt") if sent is not None else None
        if method == "session/new":
            sid = result.get("sessionId")
            if isinstance(sid, str):
                self.sessions[sid] = sent
                self.prompts[sid] = raw
                keys = _legacy_keys(params.get("_meta"))
                if sent is None and keys and conn.caps.system_prompt:
                    self.legacy[sid] = keys
        elif method == "session/fork":
            new, source = result.get("sessionId"), params.get("sessionId")
            if isinstance(new, str):
                inherited = self.sessions.get(source) if isinstance(source, str) else None
                self.sessions[new] = sent if sent is not None else inherited
                self.prompts[new] = raw if sent is not None else (
                    self.prompts.get(source) if isinstance(source, str) else None)
        elif method in ("session/load", "session/resume"):
            sid = params.get("sessionId")
            if isinstance(sid, str) and sent is not None:
                self.sessions[sid] = sent  # an accepted change is the session's prompt now
                self.prompts[sid] = raw

    def initialized(self, conn: _Conn, result: Mapping[str, Any]) -> None:
        conn.result = dict(result)
        conn.caps = Capabilities.from_initialize(result)
        version = result.get("protocolVersion")
        conn.version = 2 if version == 2 else 1
        if conn.version >= 2:
            caps = result.get("capabilities")
            sess = caps.get("session") if isinstance(caps, Mapping) else None
            prompt = sess.get("prompt") if isinstance(sess, Mapping) else None
            conn.prompt_caps = frozenset(
                k for k in ("image", "audio", "embeddedContext")
                if isinstance(prompt, Mapping) and isinstance(prompt.get(k), Mapping))
            conn.logout = bool(result.get("authMethods"))
        else:
            caps = result.get("agentCapabilities")
            caps = caps if isinstance(caps, Mapping) else {}
            prompt = caps.get("promptCapabilities")
            conn.prompt_caps = frozenset(
                k for k in ("image", "audio", "embeddedContext")
                if isinstance(prompt, Mapping) and prompt.get(k) is True)
            auth = caps.get("auth")
            conn.logout = isinstance(auth, Mapping) and isinstance(auth.get("logout"), Mapping)
        conn.auth_methods = bool(result.get("authMethods"))

    # -- the systemPrompt field --------------------------------------------------------------

    def usable_prompt(self, conn: _Conn, params: Mapping[str, Any]) -> str | None:
        """The normal form of the prompt a request carried, when the agent advertised the
        field (else it is no prompt of the session's)."""
        sp = params.get("systemPrompt")
        if sp is None or not conn.caps.system_prompt:
            return None
        return _normal(sp)

    def prompt_field(self, conn: _Conn, n: int, ev: Event, method: str,
                     params: Mapping[str, Any]) -> None:
        if "systemPrompt" not in params:
            if method in LIFECYCLE:
                self.judge("client.prompt-unadvertised")
            return
        sp = params["systemPrompt"]
        self.judge("client.prompt-unadvertised")
        if sp is None:
            return  # omitted and null are equivalent (SP-LIFECYCLE-NULL-EQUIV-DEF)
        sid = _session(params)
        if not conn.caps.system_prompt:
            self.add("client.prompt-unadvertised", method,
                     f"{method} includes systemPrompt, but the agent did not advertise "
                     f"{_sp_path(conn)}", conn=n, event=ev, session=sid,
                     systemPrompt=_excerpt(sp), advertised=None)
            return
        self.judge("client.prompt-malformed")
        mode = sp.get("mode") if isinstance(sp, Mapping) else None
        content = sp.get("content") if isinstance(sp, Mapping) else None
        if not isinstance(sp, Mapping) or not isinstance(mode, str) \
                or not isinstance(content, list):
            what = ("a string" if isinstance(sp, str) else "an array" if isinstance(sp, list)
                    else "an object without a mode string" if not isinstance(mode, str)
                    else "an object whose content is not an array")
            self.add("client.prompt-malformed", method,
                     f"{method} sends systemPrompt as {what}; the current shape is an object "
                     "{mode, content: [...]}", conn=n, event=ev, session=sid,
                     systemPrompt=_excerpt(sp))
            return
        self.judge("client.override-unadvertised")
        if mode == "override" and not conn.caps.override:
            self.add("client.override-unadvertised", method,
                     f"{method} sends mode \"override\", but the agent did not advertise "
                     f"{_sp_path(conn)}.mode.override", conn=n, event=ev, session=sid,
                     advertised=_advertised_sp(conn))
        self.judge("client.prompt-empty")
        if not content:
            self.add("client.prompt-empty", method, f"{method} sends systemPrompt.content: []",
                     conn=n, event=ev, session=sid, systemPrompt=_excerpt(sp))
        self.judge("client.prompt-non-text")
        kinds = sorted({str(b.get("type")) if isinstance(b, Mapping) else "a non-object"
                        for b in content} - {"text"})
        if kinds:
            self.add("client.prompt-non-text", method,
                     f"{method} sends systemPrompt content block(s) of type "
                     f"{', '.join(kinds)} (only text is allowed)", conn=n, event=ev,
                     session=sid, types=kinds)

    def legacy_meta(self, conn: _Conn, n: int, ev: Event, method: str,
                    params: Mapping[str, Any]) -> None:
        if method not in LIFECYCLE or not conn.caps.system_prompt:
            return
        self.judge("client.legacy-meta-prompt")
        found = _legacy_keys(params.get("_meta"))
        if not found:
            return
        sid = _session(params)
        beside = params.get("systemPrompt") is not None
        where = ", ".join(f"_meta.{k}" for k in found)
        if beside:
            self.add("client.legacy-meta-prompt", method,
                     f"{method} sends a vendor prompt ({where}) beside the standard "
                     "systemPrompt", conn=n, event=ev, session=sid, severity="info",
                     keys=found)
        else:
            self.add("client.legacy-meta-prompt", method,
                     f"{method} sends its prompt as {where} only, although the agent "
                     f"advertised the standard {_sp_path(conn)}: an agent that does not "
                     "read that vendor key never sees the prompt", conn=n, event=ev,
                     session=sid, keys=found)

    # -- gated methods and fields ------------------------------------------------------------

    def gates(self, conn: _Conn, n: int, ev: Event, method: str,
              params: Mapping[str, Any]) -> None:
        sid = _session(params)
        why = self.ungated(conn, method)
        if why is not None:
            self.judge("client.capability-unadvertised")
            if why:
                self.add("client.capability-unadvertised", method, f"{method}: {why}",
                         conn=n, event=ev, session=sid)
        if method in LIFECYCLE and "additionalDirectories" in params:
            self.judge("client.capability-unadvertised")
            dirs = params["additionalDirectories"]
            if dirs not in (None, []) and not conn.caps.additional_directories:
                self.add("client.capability-unadvertised", f"{method} additionalDirectories",
                         f"{method} sends additionalDirectories, but the agent did not "
                         "advertise sessionCapabilities.additionalDirectories", conn=n,
                         event=ev, session=sid, additionalDirectories=_excerpt(dirs))
        if method == "session/prompt" and isinstance(params.get("prompt"), list):
            rule = "PROMPT-CLIENT-CAP-MUSTNOT"
            self.judge("client.capability-unadvertised", rule)
            for block in params["prompt"]:
                kind = block.get("type") if isinstance(block, Mapping) else None
                flag = _PROMPT_BLOCKS.get(kind) if isinstance(kind, str) else None
                if flag is not None and flag not in conn.prompt_caps:
                    article = "an" if str(kind).startswith(("a", "e", "i", "o", "u")) else "a"
                    self.add("client.capability-unadvertised", f"session/prompt {kind}",
                             f"session/prompt sends {article} "
                             f"{kind} block, but the agent did not advertise "
                             f"promptCapabilities.{flag}", conn=n, event=ev, session=sid,
                             rule=rule)

    def ungated(self, conn: _Conn, method: str) -> str | None:
        """Why ``method`` is not advertised on ``conn`` (``""``: it is; ``None``: the method
        is not gated)."""
        if conn.version >= 2 and method in _V2_REMOVED:
            return _V2_REMOVED[method]
        if method in _GATES:
            flag, name = _GATES[method]
            if conn.version >= 2:
                name = _V2_GATE_NAMES.get(method, "capabilities.session")
            return "" if getattr(conn.caps, flag) else \
                f"the agent did not advertise {name}"
        if method == "session/set_mode":
            return "" if conn.offered_modes else "the agent offered no modes"
        if method == "session/set_config_option":
            return "" if conn.offered_config else "the agent offered no configOptions"
        if method in ("authenticate", "auth/login"):
            return "" if conn.auth_methods else "the agent advertised no authMethods"
        if method in ("logout", "auth/logout"):
            return "" if conn.logout else (
                "the agent advertised no authMethods" if conn.version >= 2
                else "the agent did not advertise agentCapabilities.auth.logout")
        return None

    # -- re-sending on load, resume and fork -------------------------------------------------

    def resend(self, conn: _Conn, n: int, ev: Event, method: str,
               params: Mapping[str, Any]) -> None:
        sid = params.get("sessionId")
        if not conn.caps.system_prompt or not isinstance(sid, str) or sid not in self.sessions:
            return
        had = self.sessions[sid]
        sent = params.get("systemPrompt")
        if sent is None and had is not None and _mode_of(had) == "override" \
                and not conn.caps.override:
            # This connection does not advertise override (the agent's capabilities changed
            # since the session was made): the gate's MUST NOT comes before the SHOULD.
            return
        self.judge("client.prompt-not-resent")
        self.judge("client.prompt-changed")
        if had is not None and sent is None:
            self.add("client.prompt-not-resent", method,
                     f"{method} of session {sid} does not re-send the session's systemPrompt",
                     conn=n, event=ev, session=sid, session_prompt=_clip(had))
        elif had is None and sent is None and sid in self.legacy \
                and not _legacy_keys(params.get("_meta")):
            # Its prompt went in a vendor key (client.legacy-meta-prompt); no dialect defines
            # re-sending one, so this is info: the prompt is not re-sent in any form.
            keys = self.legacy[sid]
            self.add("client.prompt-not-resent", method,
                     f"{method} of session {sid} re-sends its prompt in no form: it was sent "
                     f"as {', '.join(f'_meta.{k}' for k in keys)} on session/new, and "
                     "neither that nor systemPrompt is sent now", conn=n, event=ev,
                     session=sid, severity="info", legacy=keys)
        elif sent is not None and _normal(sent) != had:
            self.add("client.prompt-changed", method,
                     f"{method} of session {sid} sends another systemPrompt than "
                     + ("the session's" if had is not None
                        else "none, which the session was created with"),
                     conn=n, event=ev, session=sid,
                     session_prompt=None if had is None else _clip(had),
                     sent=_excerpt(sent))


class ClientContext(BaseContext):
    """What a client check (``@check(..., direction="client")``) sees of the run so far, and
    how it speaks (:meth:`judge`, :meth:`report`, as an agent's check). One per (check,
    history). A user's check sees each event after the built-in client oracles judged it:
    the state the event left (a session made by the answer it is, is there)."""

    def __init__(self, oracle: str, state: _Judge, ledger: Ledger) -> None:
        super().__init__(oracle, ledger)
        #: The built-in oracles' state (read it through the methods below).
        self.state = state

    def _index(self) -> int:
        return self.state.step

    @property
    def step(self) -> int:
        """The index of the scenario step being run (-1 before the first)."""
        return self.state.step

    def connection(self, event: Event) -> int:
        """The stand-in connection (one per agent process the client started) an ``acp``
        event crossed; 0 for any other event."""
        n = event.data.get("conn", 0) if event.kind == "acp" else 0
        return n if isinstance(n, int) and not isinstance(n, bool) else 0

    def initialize(self, event: Event) -> Mapping[str, Any] | None:
        """The stand-in's ``initialize`` answer on the event's connection (what the agent
        advertised there); ``None`` before it came."""
        conn = self.state.conns.get(self.connection(event))
        return conn.result if conn is not None else None

    def capabilities(self, event: Event) -> Capabilities:
        """What that answer advertised, read (``Capabilities.system_prompt``, ``override``,
        ``load``...); nothing advertised before it came."""
        conn = self.state.conns.get(self.connection(event))
        return conn.caps if conn is not None else Capabilities()

    def protocol(self, event: Event) -> int:
        """The ACP version of the event's connection (1 or 2)."""
        conn = self.state.conns.get(self.connection(event))
        return conn.version if conn is not None else 1

    def session_prompt(self, session: str) -> Any:
        """The ``systemPrompt`` the session has so far, as the client sent it with an
        accepted ``session/new`` (or a fork, load or resume that changed it); ``None`` for
        none, or a session not seen."""
        return self.state.prompts.get(session)

    def sessions(self) -> list[str]:
        """Every session the stand-in made so far (and those a fork made), in order."""
        return list(self.state.sessions)


@builtin(
    "client.prompt-unadvertised", severity="MUST", rule="SP-CLIENT-GATE-MUSTNOT",
    summary="systemPrompt in a request, although the agent did not advertise it",
    direction="client",
    also=[
        ("client.override-unadvertised", "MUST", "SP-CLIENT-OVERRIDE-GATE-MUSTNOT",
         "mode \"override\" without the mode.override sub-capability"),
        ("client.prompt-non-text", "MUST", "SP-CLIENT-CONTENT-TEXT-MUSTNOT",
         "a systemPrompt content block that is not text"),
        ("client.prompt-empty", "MUST", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT",
         "systemPrompt content: []"),
        ("client.prompt-malformed", "MUST", "ACPFUZZ-CLIENT-PROMPT-SHAPE-MUST",
         "a systemPrompt that is not an object {mode, content: [...]}"),
        ("client.capability-unadvertised", "MUST", "CAP-CLIENT-GATE-MUSTNOT",
         "a gated method, field or prompt content type without its capability"),
        ("client.before-initialize", "MUST", "INIT-CLIENT-FIRST-MUST",
         "a request before initialize on the connection"),
        ("client.prompt-not-resent", "SHOULD", "SP-CLIENT-RESEND-SHOULD",
         "a load, resume or fork without the session's systemPrompt"),
        ("client.prompt-changed", "SHOULD", "SP-CLIENT-RESEND-SHOULD",
         "a load, resume or fork with another systemPrompt than the session's"),
        ("client.legacy-meta-prompt", "SHOULD", "ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD",
         "a vendor _meta prompt where the standard systemPrompt is advertised"),
    ],
)
def _builtin_client_oracles(ctx: ClientContext, event: Event) -> None:
    """The built-in client oracles: one pass of :class:`_Judge` over the events, whose
    state every client check's context reads."""
    ctx.state.event(event)


def judge_client(events: Iterable[Event]) -> ClientVerdict:
    """Judge a client's recorded frames: every registered client check (the built-in ones
    first, then the users', each in registration order) sees each event in turn; the
    findings and the judged cases."""
    state, ledger = _Judge(), Ledger()
    registered = checks("client")  # what is registered cannot change within one call
    ordered = [c for c in registered if c.builtin] + [c for c in registered if not c.builtin]
    contexts = [(c, ClientContext(c.info.id, state, ledger)) for c in ordered]
    for ev in events:
        for chk, ctx in contexts:
            if chk.builtin:
                chk.run(ctx, ev)
            else:
                run_user_check(chk, ctx, ev)
    return state.verdict(ledger)


# -- helpers -----------------------------------------------------------------------------------


def _key(rid: Any) -> str:
    return json.dumps(rid, sort_keys=True, default=repr)


def _session(params: Mapping[str, Any]) -> str | None:
    sid = params.get("sessionId")
    return sid if isinstance(sid, str) else None


def _sp_path(conn: _Conn) -> str:
    return ("capabilities.session.systemPrompt" if conn.version >= 2
            else "sessionCapabilities.systemPrompt")


def _advertised_sp(conn: _Conn) -> Any:
    result = conn.result if isinstance(conn.result, Mapping) else {}
    if conn.version >= 2:
        caps = result.get("capabilities")
        sess = caps.get("session") if isinstance(caps, Mapping) else None
    else:
        caps = result.get("agentCapabilities")
        sess = caps.get("sessionCapabilities") if isinstance(caps, Mapping) else None
    return sess.get("systemPrompt") if isinstance(sess, Mapping) else None


def _normal(sp: Any) -> str:
    """A prompt's normal form for comparison: mode and each block's type and text (the
    whole block for a block that is not text); ``_meta`` and annotations do not count."""
    if isinstance(sp, Mapping) and isinstance(sp.get("content"), list):
        blocks = [[b.get("type"), b.get("text")] if isinstance(b, Mapping)
                  and b.get("type") == "text" else b for b in sp["content"]]
        return json.dumps([sp.get("mode"), blocks], sort_keys=True, default=repr)
    return json.dumps(sp, sort_keys=True, default=repr)


def _mode_of(normal: str) -> Any:
    """The mode of a prompt in :func:`_normal`'s form (``None`` for a shape without one)."""
    value = json.loads(normal)
    return value[0] if isinstance(value, list) and len(value) == 2 else None


def _excerpt(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    return value if len(text) <= EXCERPT else _clip(text)


def _clip(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"... ({len(text)} chars)"


def _legacy_keys(meta: Any) -> list[str]:
    """The vendor prompt keys (docs/rules.md) present in a request's ``_meta``."""
    if not isinstance(meta, Mapping):
        return []
    found = []
    if meta.get("systemPrompt") is not None:
        found.append("systemPrompt")  # claude-agent-acp, pi-acp
    claude = meta.get("claudeCode")
    options = claude.get("options") if isinstance(claude, Mapping) else None
    if isinstance(options, Mapping) and options.get("systemPrompt") is not None:
        found.append("claudeCode.options.systemPrompt")
    sudo = meta.get("sudocode")
    if isinstance(sudo, Mapping):
        found += [f"sudocode.{k}" for k in ("systemPrompt", "appendSystemPrompt")
                  if sudo.get(k) is not None]
    jb = meta.get("jetbrains")
    air = jb.get("air") if isinstance(jb, Mapping) else None
    if isinstance(air, Mapping) and air.get("customInstructions") is not None:
        found.append("jetbrains.air.customInstructions")
    return found
