"""Bug reports: a finding cassette rendered as Markdown (pure).

:func:`render_markdown` turns a cassette into a report that can be pasted into an issue
tracker as is. It is written for a reader who has never heard of acp-fuzz: what the agent is,
what went wrong, which rule of the ACP ``systemPrompt`` RFD that breaks, the exact JSON-RPC
requests that trigger it, what reached the model next to what should have, and the one
command that reproduces it::

    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.reporting import render_markdown

    path = "cassettes/prompt.leak-seed0.cassette"
    print(render_markdown(read_cassette(path), path=path))

The command line equivalent is ``acp-fuzz report CASSETTE [-o FILE]``.

Paths inside the throw-away sandbox acp-fuzz ran the agent in are shown as ``<sandbox>``, and
strings longer than :data:`CLIP` characters are shortened (the cassette keeps everything):
the transcript's strings, and what the cassette's maker chose, such as the agent's name and
version and each finding's message (at twice that). The cassette's path in the replay
commands is shell-quoted, so the command pastes as it reads whatever the file is called.
This module reads nothing and writes nothing: it only formats.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from acp_fuzz.core.cassette import Cassette, Header
from acp_fuzz.core.escaping import clip, md_code, md_text, terminal
from acp_fuzz.core.facts import refusal_codes
from acp_fuzz.core.findings import CATALOG, Finding, Status, is_reported
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.ops import CARRIES_PROMPT
from acp_fuzz.core.payloads import Capabilities, blocks_of
from acp_fuzz.core.protocol import agent_info, answered
from acp_fuzz.core.scenarios import ClientRunSettings, Step
from acp_fuzz.core.scrub import normalize_sandbox
from acp_fuzz.core.steps import describe, will_send

__all__ = ["CLIP", "cassette_agent", "cassette_findings", "client_prompt", "initialize_result",
           "model_of", "prompt_given", "render_markdown"]

#: Strings in the transcript longer than this are clipped, and so are the agent's name and
#: version and the other words a cassette chooses; a finding's message at twice this.
CLIP = 200
#: The system-slot text shown under "What reached the model" is clipped at this length.
SYSTEM_CLIP = 4000

_SEVERITY_ORDER = {"MUST": 0, "SHOULD": 1, "info": 2}


def render_markdown(cassette: Cassette, *, path: str | None = None) -> str:
    """The Markdown bug report for ``cassette``.

    ``path`` is where the cassette lives, used (shell-quoted) in the replay commands
    (``<cassette>`` when not given). Works for any cassette; one without a failing finding
    is reported as such.
    """
    shown_path = _shell_path(path) if path else "<cassette>"
    header = cassette.header
    events = cassette.events
    findings = cassette_findings(cassette)
    failing = [f for f in findings if is_reported(f.severity)]
    failing.sort(key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), f.step, f.oracle))
    info = [f for f in findings if f not in failing]
    agent_name, agent_version = cassette_agent(cassette)
    init = initialize_result(cassette)

    out: list[str] = []
    title = _word(failing[0].oracle) if failing else "no failure"
    # Agent- and cassette-chosen text goes through acp_fuzz.core.escaping: code spans, one line,
    # `|` escaped in tables, so it cannot add HTML, links, rows or hide the report.
    version = f" {md_code(agent_version)}" if agent_version else ""
    out.append(f"# {md_text(title)}: {md_code(agent_name)}{version}")
    out.append("")
    out.append(
        "This report was produced by acp-fuzz, a tester for agents that "
        "speak the Agent Client Protocol (ACP: JSON-RPC 2.0 over stdio between an editor and "
        "a coding agent). It checks what an agent does with the `systemPrompt` a client sends "
        "in `session/new`, `session/load`, `session/resume` and `session/fork`, by looking at "
        "what actually reaches the model: acp-fuzz points the agent at a fake model server "
        "and records every request. Rule ids (such as `SP-AGENT-APPLY-NEW-MUST`) refer to the "
        "ACP `systemPrompt` RFD.")
    out.append("")
    out += _agent_section(header, init, agent_name, agent_version)
    out += _finding_section(header.meta, failing, info)
    out += _error_codes(events)
    out += _steps_section(events, header.run_settings.dialect, init)
    out += _transcript_section(events)
    if failing:
        out.extend(_model_section(failing[0], events))
    out += _reproduce_section(header, shown_path)
    return "\n".join(out)


def _agent_section(header: Header, init: Any, agent_name: str, agent_version: str
                   ) -> list[str]:
    """The "Agent" table: who it is, how it was run, and what it advertises."""
    out = ["## Agent", "", "| | |", "|---|---|"]
    version = f" {md_code(agent_version, table=True)}" if agent_version else ""
    out.append(f"| Agent | {md_code(agent_name, table=True)}{version} |")
    command = clip(" ".join(map(str, header.target)), 2 * CLIP)
    out.append(f"| Command | {md_code(command, table=True)} |")
    out.append(f"| Protocol | ACP v{answered(init)} |")
    out.append(f"| Advertises `systemPrompt` | {_advertised(init)} |")
    out.append(f"| Recorded by | acp-fuzz {md_text(_word(header.acp_fuzz_version), table=True)} |")
    out.append("")
    return out


def _finding_section(meta: Mapping[str, Any], failing: Sequence[Finding],
                     info: Sequence[Finding]) -> list[str]:
    """The "Finding" section: each failing finding's rule, status and how often it was
    reproduced, then what was only observed."""
    status = meta.get("status")
    runs, reproduced = meta.get("runs"), meta.get("reproduced")
    rate = f"{reproduced}/{runs}" if isinstance(runs, int) and isinstance(reproduced, int) \
        else "-"
    out = ["## Finding", ""]
    if not failing:
        out.append("No MUST or SHOULD finding was recorded in this cassette.")
        out.append("")
    else:
        out.append("| Oracle | Rule | Severity | Status | Reproduced |")
        out.append("|---|---|---|---|---|")
        for f in failing:
            shown = md_text(_word(status), table=True) if isinstance(status, str) else "-"
            out.append(f"| {md_code(_word(f.oracle), table=True)} | "
                       f"{md_code(_word(f.rule), table=True)} | "
                       f"{md_text(_word(f.severity), table=True)} | {shown} | {rate} |")
        out.append("")
        if isinstance(status, str) and isinstance(runs, int):
            # A client cassette before the one vocabulary recorded FAILED and FLAKY: the same.
            what = ("in every one of" if status.lower() == Status.FAILED else "in only some of")
            out.append(f"Status {md_code(_word(status))}: the minimal steps below showed the "
                       f"failure {what} {runs} confirmation run(s) on fresh agent processes "
                       f"({rate}).")
            out.append("")
        for f in failing:
            summary = CATALOG[f.oracle].summary if f.oracle in CATALOG else ""
            where = f" (step {f.step + 1})" if f.step >= 0 else ""
            out.append(f"- **{md_code(_word(f.oracle))}**{where}: {_text(f.message)}."
                       + (f" In general: {summary}." if summary else ""))
        out.append("")
    if info:
        out.append("Also observed (informational, not a failure): "
                   + "; ".join(f"{md_code(_word(f.oracle))} ({_text(f.message)})" for f in info)
                   + ".")
        out.append("")
    return out


def _steps_section(events: Sequence[Event], dialect: str | None, init: Any) -> list[str]:
    """ "What the client did": the recorded steps, each with the request replay sends."""
    steps = [e for e in events if e.kind == "step"]
    out = ["## What the client did", "",
           "acp-fuzz speaks of sessions by letter (A, B, ...); the agent gave them its own "
           "ids. The minimal sequence that shows the problem:", ""]
    if not steps:
        out.append("(no steps recorded)")
    dialect = dialect if dialect is not None else "standard"
    for i, ev in enumerate(steps, 1):
        args = ev.data.get("args") or {}
        line = describe(args, answered(init)) if isinstance(args, Mapping) else args
        out.append(f"{i}. {md_text(clip(line, 2 * CLIP))}")
        # The request replay sends for it (the agent's ids and directories as placeholders,
        # long strings clipped as in the transcript; `show --full` prints it whole), so a
        # reader sees everything the cassette makes acp-fuzz send.
        sends = will_send(args, answered(init), dialect, shorten=_clip_value)
        if sends:
            out.append(f"   - {md_code(sends)}")
    out.append("")
    return out


def _transcript_section(events: Sequence[Event]) -> list[str]:
    """The JSON-RPC requests sent to the agent, each with its response."""
    out = ["## Minimal JSON-RPC transcript", "",
           "The requests acp-fuzz sent to the agent on its stdin, in order, each followed "
           "by the agent's response. Long strings are clipped; `<sandbox>` is the "
           "temporary directory the agent ran in.", ""]
    for i, (req, resp) in enumerate(_requests(events), 1):
        out.append(f"{i}. {md_code(_word(req.get('method')))}")
        out.append("")
        out.extend("   " + line for line in _fence(_json(_body(req)), "json").splitlines())
        out.append("")
        if resp is not None:
            out.append(f"   Response: {md_code(_json_line(_body(resp)))}")
        else:
            out.append("   (no response)" if "id" in req else "   (notification)")
        out.append("")
    return out


def _reproduce_section(header: Header, shown_path: str) -> list[str]:
    """ "Reproduce": the replay commands (a client cassette's own, for one)."""
    out = ["## Reproduce", ""]
    if _is_client_cassette(header):
        return out + _reproduce_client(header, shown_path)
    out.append("Install acp-fuzz, then replay the recorded client side against your build of "
               "the agent. It starts the agent in a fresh sandbox, sends the same requests, "
               "runs the same checks, and prints `FAILED` (exit 1) while the bug is present or "
               "`FIXED` (exit 0) once it is gone:")
    out.append("")
    out.append(_fence(f"acp-fuzz replay {shown_path} -- ./your-agent", "sh"))
    out.append("")
    profile = _known_profile(header.run_settings.profile)
    out.append("For an agent acp-fuzz knows (see `acp-fuzz profiles`):")
    out.append("")
    out.append(_fence(f"acp-fuzz replay --profile {profile or 'NAME'} {shown_path}", "sh"))
    out.append("")
    out.append("Replay never runs the command recorded in a cassette on its own: name the agent "
               "yourself, as above.")
    out.append("")
    return out


# -- helpers --------------------------------------------------------------------------------------

def _error_codes(events: Sequence[Event]) -> list[str]:
    """The error codes of the cassette's refused requests that carried a prompt, by payload
    class: a table of facts (no rule fixes a code), or nothing."""
    codes = refusal_codes(events)
    if not codes:
        return []
    out = ["Error codes of the refused requests that carried a `systemPrompt` (information: "
           "the RFD fixes no code):", "", "| payload class | codes |", "|---|---|"]
    for cls, by in sorted(codes.items()):
        shown = ", ".join(f"`{code}` ×{n}" for code, n in sorted(by.items()))
        out.append(f"| {md_code(cls, table=True)} | {shown} |")
    return [*out, ""]


def _is_client_cassette(header: Any) -> bool:
    from acp_fuzz.engine.client.campaign import CASSETTE_KIND

    return bool(header.kind == CASSETTE_KIND)


def _reproduce_client(header: Any, shown_path: str) -> list[str]:
    """The "Reproduce" section of a client cassette (``acp-fuzz client``): ``replay
    --client`` against the reader's build of the client."""
    try:
        steps: tuple[Step, ...] = ClientRunSettings.from_wire(header.settings).scenario.steps
    except ValueError:  # broken settings: the replay itself says so, in one line
        steps = ()
    many = any(s.args or s.stdin for s in steps)
    out = ["Install acp-fuzz, then replay the recorded capability set against your build of "
           "the client. acp-fuzz plays the agent again (a stand-in that advertises what this "
           "cassette recorded), runs your client, judges what it sends, and prints `FAILED` "
           "(exit 1) while the bug is present or `FIXED` (exit 0) once it is gone:", "",
           _fence(f"acp-fuzz replay --client {shown_path} -- ./your-client", "sh"), ""]
    if many:
        out += [f"The client ran a scenario of {len(steps)} step(s): give them again with "
                "`--step` or `--scenario FILE` (`acp-fuzz show` lists them).", ""]
    out += ["Replay never runs the command recorded in a cassette on its own: name the client "
            "yourself, as above (docs/clients.md).", ""]
    return out


def _known_profile(name: str | None) -> str | None:
    # Only a built-in profile name is shown: the cassette's own text never reaches the command.
    from acp_fuzz.engine.agents.profiles import PROFILES

    return name if name is not None and name in PROFILES else None


def cassette_findings(cassette: Cassette) -> list[Finding]:
    """The findings a cassette recorded (``meta["findings"]``, malformed ones skipped), or,
    for a cassette without that list, the current oracles' findings over its events."""
    meta = cassette.header.meta.get("findings")
    if isinstance(meta, list):
        out = []
        for f in meta:
            try:
                out.append(Finding.from_wire(f))
            except (KeyError, TypeError, ValueError):
                continue
        return out
    from acp_fuzz.core.oracles import Baseline, evaluate

    settings = cassette.header.run_settings
    return evaluate(cassette.events, baseline=Baseline.from_wire(settings.baseline),
                    strict=settings.strict)


def initialize_result(cassette: Cassette) -> Any:
    """The agent's ``initialize`` result: the header's, else the recorded response."""
    if isinstance(cassette.header.initialize, Mapping):
        return cassette.header.initialize
    ids = {json.dumps(e.data["msg"].get("id"), default=repr) for e in cassette.events
           if e.kind == "acp" and e.data.get("dir") == "send"
           and isinstance(e.data.get("msg"), Mapping)
           and e.data["msg"].get("method") == "initialize"}
    for e in cassette.events:
        msg = e.data.get("msg") if e.kind == "acp" else None
        if (isinstance(msg, Mapping) and e.data.get("dir") == "recv" and "method" not in msg
                and json.dumps(msg.get("id"), default=repr) in ids
                and isinstance(msg.get("result"), Mapping)):
            return msg["result"]
    return None


def cassette_agent(cassette: Cassette) -> tuple[str, str]:
    """The agent's name and version (``""`` when unknown), clipped."""
    init = initialize_result(cassette)
    info = agent_info(init)
    if info:
        name = info.get("name") or info.get("title")
        version = info.get("version")
        return (_word(name) if name else "unknown agent", _word(version) if version else "")
    target = cassette.header.target
    return (_word(target[0]) if target else "unknown agent", "")


def _advertised(init: Any) -> str:
    caps = Capabilities.from_initialize(init)
    if not caps.system_prompt:
        return "no"
    return "yes: `append` and `override`" if caps.override else "yes: `append` only"


def _requests(events: Sequence[Event]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """The harness's requests and notifications in order, each with the agent's response.

    JSON-RPC ids restart with every agent process, so responses are matched within one
    process generation."""
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    pending: dict[str, int] = {}
    for e in events:
        if e.kind == "process" and e.data.get("what") == "restart":
            pending.clear()
        if e.kind != "acp" or not isinstance(e.data.get("msg"), Mapping):
            continue
        msg = dict(e.data["msg"])
        if e.data.get("dir") == "send" and "method" in msg:
            if "id" in msg:
                pending[json.dumps(msg["id"], default=repr)] = len(out)
            out.append((msg, None))
        elif e.data.get("dir") == "recv" and "method" not in msg and "id" in msg:
            i = pending.pop(json.dumps(msg["id"], default=repr), None)
            if i is not None:
                out[i] = (out[i][0], msg)
    return out


def _model_section(f: Finding, events: Sequence[Event]) -> list[str]:
    x = model_of(f, events)
    if x is None:
        return []
    out = ["## What reached the model", ""]
    session = f.session or x.session
    turn = f" (turn {x.turn})" if x.turn is not None else ""
    out.append(f"The system slot (the model API's place for system instructions) of the "
               f"agent's model request for session {md_code(_word(session))}{turn}, exactly as the "
               "fake model server received it:")
    out.append("")
    system = "\n".join(x.texts("system"))
    out.append(_fence(_clip(normalize_sandbox(system), SYSTEM_CLIP) if system
                      else "(empty: the request had no system instructions)", "text"))
    out.append("")
    expected = client_prompt(events, session, f.step)
    if expected is not None:
        mode, blocks = expected
        where = ("after the agent's own default instructions" if mode == "append"
                 else "in place of the agent's own default instructions")
        out.append(f"What should have been there: the client's {md_code(_word(mode))} text for "
                   f"session {md_code(_word(session))}, {where}:")
        out.append("")
        out.append(_fence("\n\n".join(_clip(b, SYSTEM_CLIP) for b in blocks), "text"))
        out.append("")
    foreign = f.evidence.get("foreign_session")
    if f.oracle == "prompt.leak" and isinstance(foreign, str):
        other = client_prompt(events, foreign, f.step)
        if other is not None:
            out.append(f"Instead, the request carries session {md_code(_word(foreign))}'s text, "
                       f"which was given only to session {md_code(_word(foreign))}:")
            out.append("")
            out.append(_fence("\n\n".join(_clip(b, SYSTEM_CLIP) for b in other[1]), "text"))
            out.append("")
    return out


def model_of(f: Finding, events: Sequence[Event]) -> ModelExchange | None:
    """The model request a finding rests on (its ``model_event``), else the first turn of
    its session."""
    seq = f.evidence.get("model_event")
    if isinstance(seq, int) and 0 <= seq < len(events) and events[seq].kind == "model":
        return ModelExchange.from_wire(events[seq].data)
    for e in events:
        if e.kind == "model":
            x = ModelExchange.from_wire(e.data)
            if x.session == f.session and not x.side:
                return x
    return None


def client_prompt(events: Sequence[Event], session: str | None, until: int
                  ) -> tuple[str, tuple[str, ...]] | None:
    """The last systemPrompt the client gave ``session`` at or before step ``until``."""
    found: tuple[str, tuple[str, ...]] | None = None
    for e in events:
        if e.kind != "step":
            continue
        index = e.data.get("index", -1)
        if until >= 0 and isinstance(index, int) and index > until:
            break
        given = prompt_given(e.data.get("args"))
        if given is not None and given[0] == session:
            found = given[1:]
    return found


def prompt_given(args: Any) -> tuple[Any, str, tuple[str, ...]] | None:
    """The session a step's arguments give a systemPrompt to (the new one for a fork), the
    prompt's mode and its blocks; ``None`` for a step that gives none."""
    if not isinstance(args, Mapping):
        return None
    op = args.get("op")
    owner = args.get("new") if op == "fork" else args.get("session")
    sp = args.get("systemPrompt")
    if op in CARRIES_PROMPT and isinstance(sp, Mapping) and blocks_of(sp):
        return (owner, str(sp.get("mode")), blocks_of(sp))
    return None


def _body(msg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in msg.items() if k not in ("jsonrpc",)}


def _clip(s: str, n: int = CLIP) -> str:
    return clip(s, n)


def _word(v: Any) -> str:
    """A name, id or version the cassette chose, clipped for the report."""
    return clip(v, CLIP)


def _shell_path(path: str) -> str:
    """``path`` as one shell word: quoted (a name holding ``;``, ``$(...)``, a quote or a
    newline stays one argument when the command is pasted into a shell), and after ``./``
    when it starts with ``-``, so that acp-fuzz does not read it as an option."""
    return shlex.quote(f"./{path}" if path.startswith("-") else path)


def _clip_value(v: Any) -> Any:
    if isinstance(v, str):
        return _clip(normalize_sandbox(v))
    if isinstance(v, Mapping):
        return {k: _clip_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clip_value(x) for x in v]
    return v


def _json(v: Any) -> str:
    return json.dumps(_clip_value(v), indent=2, ensure_ascii=False, default=repr)


def _json_line(v: Any) -> str:
    text = json.dumps(_clip_value(v), ensure_ascii=False, default=repr)
    return _clip(text, 2 * CLIP)


def _text(s: str) -> str:
    return md_text(clip(" ".join(normalize_sandbox(str(s)).split()), 2 * CLIP).rstrip("."))


def _fence(text: str, lang: str) -> str:
    """A fenced block that nothing inside can close, with control characters shown."""
    text = terminal(text, newlines=True)
    longest = max(map(len, re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"
