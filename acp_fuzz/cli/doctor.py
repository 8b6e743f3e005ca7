"""``acp-fuzz doctor``: one turn of an agent, and whether it reaches the fake model.

It runs ``initialize``, one ``session/new`` and one ``session/prompt`` turn, prints what the
agent advertised and what the gateway saw (each model request, tied or not), then the
diagnosis of :mod:`acp_fuzz.engine.campaign.diagnosis`; it fuzzes nothing. Exit codes: ``0`` the
turn reached the fake model and was tied to it (fuzzing can judge this agent), ``1`` a diagnosis
case applies (or the agent could not be initialised), ``2`` bad arguments or an agent that
cannot be started, ``130`` interrupted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from acp_fuzz.cli.app import (
    app,
    check_writable_dir,
    err,
    fail,
    hide,
    install_interrupt_handlers,
    out,
)
from acp_fuzz.cli.options import (
    AGENT_ARGUMENT,
    DIALECT_OPTION,
    PASS_ENV_OPTION,
    PROFILE_OPTION,
    PROTOCOL_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    TIMEOUT_OPTION,
    cassette_dir_option,
    enter_sandbox_net,
    require_bwrap,
)
from acp_fuzz.cli.target import (
    build_spec,
    passed_secrets,
    print_agent,
)
from acp_fuzz.core.cassette import Header
from acp_fuzz.core.dialects import CHOICES as DIALECT_CHOICES
from acp_fuzz.core.escaping import clip, terminal
from acp_fuzz.core.history import ModelExchange
from acp_fuzz.core.protocol import CHOICES as PROTOCOL_CHOICES
from acp_fuzz.core.protocol import agent_info
from acp_fuzz.core.steps import describe
from acp_fuzz.engine.campaign.diagnosis import (
    diagnose_run,
    error_text,
    request_class,
    side_rule,
)
from acp_fuzz.engine.campaign.recording import scrubber_for, target_settings, write_scrubbed
from acp_fuzz.engine.campaign.runner import HarnessError, Run, StepOutcome, TargetSpec

__all__ = ["doctor"]

#: Model requests listed one by one; the rest are counted.
MAX_LISTED = 20


# As target's (doctor writes the cassette of the untied requests it found).
_CASSETTE_DIR: Any = cassette_dir_option(Path("cassettes"))


@app.command(context_settings={"allow_interspersed_args": False})
def doctor(
    command: list[str] = AGENT_ARGUMENT,
    profile: str | None = PROFILE_OPTION,
    timeout: float = TIMEOUT_OPTION,
    protocol: str | None = PROTOCOL_OPTION,
    dialect: str = DIALECT_OPTION,
    sandbox_net: bool = SANDBOX_NET_OPTION,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    pass_env: list[str] = PASS_ENV_OPTION,
    cassette_dir: Path = _CASSETTE_DIR,
) -> None:
    """Run one turn and say whether the agent reaches the fake model; fuzzes nothing.

    The turn runs the way ``acp-fuzz target`` would run it with the same options (the same
    sandbox, variables and dialect), so an agent that doctor passes under ``--sandbox-fs``
    or ``--sandbox-net`` can be fuzzed under them."""
    if protocol is not None and protocol not in PROTOCOL_CHOICES:
        fail(f"--protocol must be one of {', '.join(PROTOCOL_CHOICES)}, not {protocol!r}")
    if dialect not in DIALECT_CHOICES:
        fail(f"--dialect {dialect!r} is not known (known: {', '.join(DIALECT_CHOICES)})")
    enter_sandbox_net(sandbox_net)
    spec = build_spec(command or [], profile, timeout)
    if sandbox_fs:
        require_bwrap()
    check_writable_dir(cassette_dir, "--cassette-dir")
    spec = dataclasses.replace(
        spec, sandbox_fs=sandbox_fs or spec.sandbox_fs,
        passthrough_env=(*spec.passthrough_env, *pass_env),
        dialect=spec.dialect if dialect == "auto" else dialect,
        protocol=spec.protocol if protocol is None else protocol)
    hide(sorted(passed_secrets(spec.passthrough_env)))
    restore = install_interrupt_handlers()
    try:
        code = _one_turn(spec, cassette_dir)
    except KeyboardInterrupt:
        err.print("acp-fuzz: interrupted", markup=False)
        code = 130
    finally:
        restore()
    raise typer.Exit(code)


def _say(text: str) -> None:
    out.print(terminal(text), markup=False)


#: The client prompt of doctor's session, when the agent advertises ``systemPrompt``: most of
#: a campaign's sessions carry one, and some requests (a digest, a title) come only then.
DOCTOR_PROMPT = {"mode": "append", "content": [
    {"type": "text", "text": "acp-fuzz doctor: answer in one short sentence."}]}


def _one_turn(spec: TargetSpec, cassette_dir: Path) -> int:
    run = Run(spec)
    try:
        run.start()
    except HarnessError as e:  # the agent cannot be started: a usage error, as in target
        run.close(grace=0)
        fail(str(e))
    except BaseException:
        run.close(grace=0)
        raise
    try:
        try:
            init = run.initialize()
        except HarnessError as e:
            _say(f"initialize: failed: {e}")
            return 1
        print_agent(agent_info(init), init)
        step, turn = _session_and_turn(run)
        _list_requests(run)
        diagnosis = diagnose_run(run, turn, step=step)
        run.close(grace=0)
        _untied_evidence(run, init, cassette_dir)
    finally:
        run.close(grace=0)
    for line in diagnosis.lines():  # escaped already
        out.print(line, markup=False)
    if diagnosis.reached:
        _say("ok: the turn reached the fake model and was tied to it; "
             "`acp-fuzz target` can judge this agent.")
        return 0
    return 1


def _session_and_turn(run: Run) -> tuple[str, StepOutcome]:
    """``session/new`` (with :data:`DOCTOR_PROMPT` where the agent advertises a prompt; again
    without one if it refuses it), then one turn; the last step sent and its outcome."""
    prompt = run.caps.system_prompt and run.dialect == "standard"
    new = run.execute({"op": "new", "session": "A", "cwd": "distinct",
                       **({"systemPrompt": DOCTOR_PROMPT} if prompt else {})})
    label = "session/new (systemPrompt append, 1 block)" if prompt else "session/new"
    _say(f"{label}: " + _outcome(run, new, "sessionId"))
    if prompt and new.outcome == "error":
        new = run.execute({"op": "new", "session": "A", "cwd": "distinct"})
        _say("session/new (again, without a systemPrompt): " + _outcome(run, new, "sessionId"))
    if new.outcome != "ok":
        return "session/new", new
    turn = run.execute({"op": "prompt", "session": "A"})
    _say("session/prompt: " + _outcome(run, turn, "stopReason"))
    return "session/prompt", turn


def _list_requests(run: Run) -> None:
    """Every model request, numbered, under the step it came during, each with how it was
    classified; then, for a turn that made several and for each untied one, what to do."""
    groups = _by_step(run)
    total = sum(len(g) for _, g in groups)
    _say(f"model requests seen by the gateway: {total}")
    listed = 0
    setup = run.spec.setup
    for what, group in groups:
        _say(f"  during {what}: {len(group)} request(s)")
        for n, x in group:
            listed += 1
            if listed <= MAX_LISTED:
                _say(f"  [{n}] {x.method} {clip(x.path, 200)} -> {x.status} ({x.api}): "
                     f"{request_class(x, setup)}")
    if total > MAX_LISTED:
        _say(f"  ... and {total - MAX_LISTED} more")
    turns = [x for _, g in groups for _, x in g if x.session is not None and not x.side]
    for what, group in groups:
        tied = [(n, x) for n, x in group if x.session is not None and not x.side]
        if len(group) > 1 and what.startswith("session/prompt"):
            kinds = ", ".join(f"[{n}] {request_class(x, setup).split(':')[0]}" for n, x in group)
            _say(f"note: one turn ({what}) made {len(group)} model requests: {kinds}.")
        if len(tied) > 1:
            _say(f"  {len(tied)} are tied to it: every oracle judges each as a turn of the "
                 "session. One the agent makes on its own (a title, a summary) is not a turn: "
                 "name it in a profile's [[side]] rule; docs/profiles.md says how.")
            for n, x in tied[1:]:
                _suggest(n, x, [t for _, t in tied[:1]], f"request [{n}] and not [{tied[0][0]}]")
    for _, group in groups:
        for n, x in group:
            if x.side_kind == "untied":
                _suggest(n, x, turns, f"request [{n}] and none of the turns' own")


def _suggest(n: int, x: ModelExchange, others: list[ModelExchange], what: str) -> None:
    rule = side_rule(x, others)
    if rule is None:
        _say(f"  no [[side]] rule on its API, path or slot texts tells request [{n}] apart from "
             "the turn's own request.")
        return
    _say(f"  a [[side]] rule for a profile file that matches {what} (checked):")
    for line in rule:
        _say("    " + line)


def _by_step(run: Run) -> list[tuple[str, list[tuple[int, ModelExchange]]]]:
    """The model requests of the run, numbered from 1, grouped by the step they came during
    (``"session/prompt A (turn 1)"``), in order."""
    groups: list[tuple[str, list[tuple[int, ModelExchange]]]] = []
    what = "initialize"
    n = 0
    for e in run.history.snapshot():
        if e.kind == "step":
            args = e.data.get("args")
            turn = e.data.get("turn")
            what = describe(args if isinstance(args, Mapping) else {}) + (
                f" (turn {turn})" if isinstance(turn, int) else "")
        elif e.kind == "model":
            n += 1
            if not groups or groups[-1][0] != what:
                groups.append((what, []))
            groups[-1][1].append((n, ModelExchange.from_wire(e.data)))
    return groups


def _untied_evidence(run: Run, init: Any, cassette_dir: Path) -> None:
    """Write the run as a cassette when any model request was untied, and say where."""
    untied = [x for _, x in run.history.model_exchanges() if x.side_kind == "untied"]
    if not untied:
        return
    header = Header(target=list(run.spec.argv), kind="untied", initialize=init,
                    settings=target_settings(run.spec, init),
                    meta={"status": "evidence", "untied": len(untied), "findings": []})
    path = cassette_dir / "untied-doctor.cassette"
    try:
        write_scrubbed(path, header, run.history.snapshot(),
                       scrubber_for(run.spec, run.secrets))
    except (OSError, ValueError, TypeError, MemoryError) as e:
        _say(f"untied requests: {len(untied)}; their cassette could not be written "
             f"({type(e).__name__}: {e})")
        return
    _say(f"untied requests: {len(untied)}, kept in {path} (`acp-fuzz show --full {path}` "
         "shows each with its slots)")


def _outcome(run: Run, answer: StepOutcome, key: str) -> str:
    """One step's answer in a line (``key`` of its result, when there is one)."""
    if answer.outcome == "ok":
        value = answer.result.get(key) if isinstance(answer.result, Mapping) else None
        return f"ok ({key} {clip(value, 200)})" if value is not None else "ok"
    if answer.outcome == "error":
        return f"error {clip(error_text(answer.error), 300)}"
    if answer.outcome == "timeout":
        return f"no answer within {run.spec.request_timeout:g}s{run.stderr_note()}"
    if answer.outcome == "exited":
        return f"the agent exited{run.stderr_note(exited=True)}"
    return answer.outcome


