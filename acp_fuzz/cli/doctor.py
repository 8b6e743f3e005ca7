"""``acp-fuzz doctor``: one turn of an agent, and whether it reaches the fake model.

It runs ``initialize``, one ``session/new`` and one ``session/prompt`` turn, prints what the
agent advertised and what the gateway saw (each model request, tied or not), then the
diagnosis of :mod:`acp_fuzz.engine.diagnosis`; it fuzzes nothing. Exit codes: ``0`` the turn
reached the fake model and was tied to it (fuzzing can judge this agent), ``1`` a diagnosis
case applies (or the agent could not be initialised), ``2`` bad arguments or an agent that
cannot be started, ``130`` interrupted.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import typer

from acp_fuzz.cli.app import app, err, fail, hide, install_interrupt_handlers, out
from acp_fuzz.cli.options import (
    PASS_ENV_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    enter_sandbox_net,
    require_bwrap,
)
from acp_fuzz.cli.target import AGENT_ARGUMENT, PROFILE_OPTION, build_spec, print_agent
from acp_fuzz.core.dialects import CHOICES as DIALECT_CHOICES
from acp_fuzz.core.escaping import clip, terminal
from acp_fuzz.core.history import ModelExchange
from acp_fuzz.core.protocol import CHOICES as PROTOCOL_CHOICES
from acp_fuzz.core.protocol import agent_info
from acp_fuzz.core.scrub import env_secrets
from acp_fuzz.engine.diagnosis import diagnose_run, error_text
from acp_fuzz.engine.runner import HarnessError, Run, StepOutcome, TargetSpec

__all__ = ["doctor"]

#: Model requests listed one by one; the rest are counted.
MAX_LISTED = 20


@app.command(context_settings={"allow_interspersed_args": False})
def doctor(
    command: list[str] = AGENT_ARGUMENT,
    profile: str | None = PROFILE_OPTION,
    timeout: float = typer.Option(30.0, "--timeout", min=0.1,
                                  help="Seconds to wait for each agent answer."),
    protocol: str | None = typer.Option(
        None, "--protocol", metavar="1|2|auto",
        help="ACP version to offer in initialize (default: the profile's, else 1)."),
    dialect: str = typer.Option(
        "auto", "--dialect",
        help="How a system prompt is sent, as in `acp-fuzz target --dialect`."),
    sandbox_net: bool = SANDBOX_NET_OPTION,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    pass_env: list[str] = PASS_ENV_OPTION,
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
    spec = dataclasses.replace(
        spec, sandbox_fs=sandbox_fs or spec.sandbox_fs,
        passthrough_env=(*spec.passthrough_env, *pass_env),
        dialect=spec.dialect if dialect == "auto" else dialect,
        protocol=spec.protocol if protocol is None else protocol)
    hide(sorted(env_secrets({n: os.environ[n] for n in spec.passthrough_env
                             if n in os.environ}, spec.passthrough_env)))
    restore = install_interrupt_handlers()
    try:
        code = _one_turn(spec)
    except KeyboardInterrupt:
        err.print("acp-fuzz: interrupted", markup=False)
        code = 130
    finally:
        restore()
    raise typer.Exit(code)


def _say(text: str) -> None:
    out.print(terminal(text), markup=False)


def _one_turn(spec: TargetSpec) -> int:
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
        new = run.execute({"op": "new", "session": "A", "cwd": "distinct"})
        _say("session/new: " + _outcome(run, new, "sessionId"))
        step, turn = "session/new", new
        if new.outcome == "ok":
            step, turn = "session/prompt", run.execute({"op": "prompt", "session": "A"})
            _say("session/prompt: " + _outcome(run, turn, "stopReason"))
        exchanges = [x for _, x in run.history.model_exchanges()]
        _say(f"model requests seen by the gateway: {len(exchanges)}")
        for x in exchanges[:MAX_LISTED]:
            _say(f"  {x.method} {clip(x.path, 200)} -> {x.status} ({x.api}): {_tie(x)}")
        if len(exchanges) > MAX_LISTED:
            _say(f"  ... and {len(exchanges) - MAX_LISTED} more")
        diagnosis = diagnose_run(run, turn, step=step)
    finally:
        run.close(grace=0)
    for line in diagnosis.lines():  # escaped already
        out.print(line, markup=False)
    if diagnosis.reached:
        _say("ok: the turn reached the fake model and was tied to it; "
             "`acp-fuzz target` can judge this agent.")
        return 0
    return 1


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
        return f"the agent exited{run.stderr_note()}"
    return answer.outcome


def _tie(x: ModelExchange) -> str:
    if x.status == 401 and not x.upstream:
        return "refused: no token"
    if x.api == "unknown" or (x.status >= 400 and not x.upstream):
        return "not served"
    if x.session is not None and not x.side:
        return f"tied to session {x.session} turn {x.turn}"
    return "not tied (a side or untied request)"
