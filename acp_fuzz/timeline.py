"""Render a cassette as a readable timeline (pure).

One line per event: JSON-RPC requests and responses, ``session/update`` notifications, model
requests with what sat in the system slot, process events and stderr. Used by
``acp-fuzz show``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from acp_fuzz.core.cassette import Cassette
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.protocol import agent_info, answered
from acp_fuzz.core.steps import describe, will_send

__all__ = ["render_timeline"]


def _dumps(value: Any, *, ensure_ascii: bool = True) -> str:
    # What an agent sent is JSON, but a cassette's msgpack can hold what JSON cannot (bytes):
    # shown by its repr rather than a crash.
    return json.dumps(value, ensure_ascii=ensure_ascii, default=repr)


def _clip(s: str, n: int, full: bool) -> str:
    s = s.replace("\n", "\\n")
    return s if full or len(s) <= n else s[:n] + f"... [{len(s)} chars]"


def render_timeline(c: Cassette, *, full: bool = False) -> Iterator[str]:
    """The timeline of ``c``, one string per event (a model event spans several lines).
    Everything the agent or the cassette chose is shown through
    :func:`acp_fuzz.core.escaping.terminal`: no control character reaches the terminal, and
    only the renderer's own line breaks do."""
    for line in _render(c, full):
        yield terminal(line)


def _render(c: Cassette, full: bool) -> Iterator[str]:
    h = c.header
    agent = agent_info(h.initialize)
    protocol = answered(h.initialize)
    yield (f"cassette: {h.kind}, format {h.format}, acp-fuzz {h.acp_fuzz_version}, "
           f"seed {h.seed}")
    yield f"target:   {' '.join(h.target)}"
    if agent:
        yield f"agent:    {agent.get('name', '?')} {agent.get('version', '?')}"
    yield f"protocol: ACP v{protocol}"
    dialect = h.run_settings.dialect
    dialect = dialect if dialect is not None else "standard"
    findings = h.meta.get("findings") if isinstance(h.meta, Mapping) else None
    if findings:
        status = h.meta.get("status", "")
        yield f"recorded: {status} ({h.meta.get('reproduced', '?')}/{h.meta.get('runs', '?')})"
        for f in findings if isinstance(findings, list) else []:
            if not isinstance(f, Mapping):
                continue
            yield f"  {f.get('severity', '?')!s:6} {f.get('oracle')} [{f.get('rule')}] " \
                  f"{f.get('message', '')}"
    yield ""
    for ev in c.events:
        line = _line(ev, full, protocol)
        if full and ev.kind == "step":
            # What replay will send for this step, exactly (or why it refuses the step).
            sends = will_send(ev.data.get("args"), protocol, dialect)
            line = [str(line)] + ([f"{'':18}{sends}"] if sends else [])
        if isinstance(line, list):  # a model event: its slots on lines of their own
            yield f"{ev.seq:5} {ev.t:9.3f}  {line[0]}"
            yield from line[1:]
        elif line is not None:
            yield f"{ev.seq:5} {ev.t:9.3f}  {line}"


def _line(ev: Event, full: bool, protocol: int = 1) -> str | list[str] | None:
    d = ev.data
    if ev.kind == "step":
        args = d.get("args")
        what = describe(args, protocol) if isinstance(args, Mapping) else repr(args)
        return f"== step {d.get('index', 0) + 1}: {what}"
    if ev.kind == "verdict":
        if d.get("what") == "reply":
            extra = f" {_dumps(d['error'])[:160]}" if d.get("error") else ""
            if d.get("stopReason") is not None:
                extra += f" ({d['stopReason']})"
            return f"   -> {d.get('outcome')}{extra}"
        if d.get("what") == "probe-list":
            return f"   -> session/list shows {d.get('sessions')}"
        if d.get("what") == "busy-turn":
            stop = f" ({d['stopReason']})" if d.get("stopReason") is not None else ""
            return f"   -> the turn beside it: {d.get('outcome')}{stop}"
        return None
    if ev.kind == "acp":
        arrow = ">>" if d.get("dir") == "send" else "<<"
        msg = d.get("msg")
        if msg is None:
            return f"{arrow} BAD LINE ({d.get('error')}): {_clip(str(d.get('raw', '')), 120, full)}"
        return f"{arrow} {_summarise(msg, full)}"
    if ev.kind == "model":
        x = ModelExchange.from_wire(d)
        tie = f"session {x.session} turn {x.turn}" if x.session else "untied"
        kind = "untied request" if x.side_kind == "untied" else \
            "side request" if x.side else "turn request"
        # Not the model's answer: say so (a 401 is a request without the gateway's token).
        status = "" if x.status == 200 else f", HTTP {x.status}" + (
            " (refused: no gateway token)" if x.status == 401 else "")
        lines = [f"MODEL {x.method} {x.path} [{x.api}] {kind}, {tie}{status}"]
        for s in x.segments:
            if s.slot in ("system", "user"):
                lines.append(f"{'':18}{s.slot:7} {s.path}: {_clip(s.text, 160, full)}")
        return lines
    if ev.kind == "process":
        return f"PROCESS {d.get('what')} pid={d.get('pid')} gen={d.get('generation')}" + (
            f" returncode={d.get('returncode')}" if "returncode" in d else "")
    if ev.kind == "stderr":
        return f"STDERR {_clip(str(d.get('text', '')), 160, full)}"
    return None


def _summarise(msg: Any, full: bool) -> str:
    if not isinstance(msg, Mapping):
        return _clip(_dumps(msg), 160, full)
    if "method" in msg:
        params = msg.get("params")
        if msg["method"] == "session/update" and isinstance(params, Mapping):
            upd = params.get("update", {})
            kind = upd.get("sessionUpdate") if isinstance(upd, Mapping) else "?"
            text = ""
            content = upd.get("content") if isinstance(upd, Mapping) else None
            if isinstance(content, list):  # v2 messages: a list of blocks
                content = content[0] if content else None
            if isinstance(content, Mapping):
                text = str(content.get("text", ""))
            elif kind == "state_update":  # v2: a turn running, or ended with its stop reason
                reason = upd.get("stopReason")
                text = f"{upd.get('state')}" + (f" ({reason})" if reason else "")
            return f"session/update {kind} {_clip(text, 80, full)}"
        ident = f"#{msg['id']} " if "id" in msg else ""
        return f"{ident}{msg['method']} {_clip(_dumps(params, ensure_ascii=False), 200, full)}"
    if "error" in msg:
        return f"#{msg.get('id')} error {_clip(_dumps(msg['error']), 200, full)}"
    result = _dumps(msg.get("result"), ensure_ascii=False)
    return f"#{msg.get('id')} result {_clip(result, 200, full)}"
