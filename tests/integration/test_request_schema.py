"""Every request the harness sends is what the official ACP schema says it may be.

The schemas (``tests/fixtures/acp-schema/v1/schema.unstable.json`` and ``v2/...``, the
protocol's own, with ``systemPrompt``) give each method its request type (``x-method``,
``x-side: agent``) and each answer to an agent's request its response type (``x-side:
client``). A run is checked against the schema of the version the agent answered in
``initialize`` (v1 for cassettes from before v2). Checked here:

* every request and notification in every committed cassette, and every answer the harness
  gave to the agent's own requests there;
* the same for a campaign against the reference agent, which offers every capability acp-fuzz
  draws (load, resume, fork, close, delete, list, modes, override): the request shapes the
  strategies can draw, in v1 and in v2 (where a load is a resume with ``replayFrom``);
* the same for the covering examples a campaign opens with, in v1 and in v2.

Left out on purpose, and only these: the ``systemPrompt`` of a step that sends an invalid
payload (the point of the step; its class is ``invalid`` or ``probe``), the deliberately
malformed requests of ``invalid`` steps, and vendor extensions (``_``-prefixed methods).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.runner import Run, TargetSpec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "tests" / "fixtures" / "acp-schema"
CORPUS = sorted((ROOT / "cassettes").rglob("*.cassette"))


@cache
def _defs(version: int) -> dict[str, Any]:
    path = SCHEMAS / f"v{version}" / "schema.unstable.json"
    defs: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return defs


@cache
def _validator(method: str, side: str, kind: str,
               version: int = 1) -> Draft202012Validator | None:
    """The validator of ``method``'s params (``kind`` Request or Notification, received by
    the agent: ``side`` agent) or of an answer to it (Response, received by the agent from
    the client: ``side`` client), in protocol ``version``."""
    defs = _defs(version)
    for name, d in defs.items():
        if d.get("x-method") == method and d.get("x-side") == side and name.endswith(kind):
            return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs})
    return None


def _sent(events: Sequence[Event]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(what, message, the step's class) for every message the harness wrote."""
    klass: Any = None
    op: Any = None
    for e in events:
        if e.kind == "step":
            klass = (e.data.get("class") or {}).get("kind")
            op = e.data.get("args", {}).get("op")
        elif e.kind == "acp" and e.data.get("dir") == "send" and isinstance(e.data.get("msg"),
                                                                            dict):
            yield op, e.data["msg"], klass


def negotiated(events: Sequence[Event]) -> int:
    """The protocol version the run's agent answered (1 for cassettes from before v2)."""
    for e in events:
        if e.kind == "verdict" and e.data.get("what") == "initialize":
            proto = e.data.get("protocol")
            if isinstance(proto, dict) and proto.get("answered") in (1, 2):
                return int(proto["answered"])
    return 1


def problems(events: Sequence[Event]) -> list[str]:
    """Every schema violation in what the harness sent, as readable lines."""
    version = negotiated(events)
    asked: dict[Any, str] = {}  # the agent's own requests: id -> method
    for e in events:
        msg = e.data.get("msg") if e.kind == "acp" and e.data.get("dir") == "recv" else None
        if isinstance(msg, dict) and "method" in msg and "id" in msg:
            asked[msg["id"]] = msg["method"]
    out: list[str] = []
    for op, msg, klass in _sent(events):
        method = msg.get("method")
        if isinstance(method, str):
            if op == "invalid" or method.startswith("_"):
                continue
            params = dict(msg.get("params") or {})
            if klass in ("invalid", "probe") and method in (
                    "session/new", "session/load", "session/resume", "session/fork"):
                params.pop("systemPrompt", None)
            kind = "Request" if "id" in msg else "Notification"
            # $/ notifications belong to the protocol, either side (x-side "protocol").
            v = _validator(method, "protocol" if method.startswith("$/") else "agent", kind,
                           version)
            if v is None:
                out.append(f"{method}: no {kind} type in the schema")
                continue
            out += [f"{method}: {'/'.join(map(str, err.absolute_path))}: {err.message}"[:300]
                    for err in v.iter_errors(params)]
        elif "result" in msg and msg.get("id") in asked:
            answered = asked[msg["id"]]
            v = _validator(answered, "client", "Response", version)
            if v is not None:
                out += [f"answer to {answered}: {err.message}"[:300]
                        for err in v.iter_errors(msg["result"])]
    return out


def test_the_v2_schema_knows_every_method_the_harness_sends_in_v2() -> None:
    for method in ("initialize", "session/new", "session/resume", "session/fork",
                   "session/close", "session/delete", "session/list", "session/prompt",
                   "session/set_config_option", "session/set_title"):
        assert _validator(method, "agent", "Request", 2) is not None, method
    # Gone in v2: a load is a resume with replayFrom, modes are config options.
    assert _validator("session/load", "agent", "Request", 2) is None
    assert _validator("session/set_mode", "agent", "Request", 2) is None
    assert _validator("session/cancel", "agent", "Notification", 2) is not None


def test_the_v2_check_catches_a_v1_shaped_initialize() -> None:
    v1_init = Event(seq=0, t=0.0, kind="acp", data={"dir": "send", "msg": {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 2}}})
    said_v2 = Event(seq=1, t=0.0, kind="verdict", data={
        "what": "initialize", "protocol": {"offered": 2, "answered": 2}})
    assert problems([v1_init]) == []
    assert any("'info' is a required property" in p for p in problems([v1_init, said_v2]))


def test_the_schema_knows_every_method_the_harness_sends() -> None:
    for method in ("initialize", "session/new", "session/load", "session/resume",
                   "session/fork", "session/close", "session/delete", "session/list",
                   "session/prompt", "session/set_mode", "session/set_config_option",
                   "session/set_title"):
        assert _validator(method, "agent", "Request") is not None, method
    assert _validator("session/cancel", "agent", "Notification") is not None
    assert _validator("session/request_permission", "client", "Response") is not None


def test_the_check_catches_a_bad_request() -> None:
    bad = Event(seq=0, t=0.0, kind="acp", data={"dir": "send", "msg": {
        "jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": 3, "mcpServers": [], "systemPrompt": {"mode": "append"}}}})
    found = problems([bad])
    assert any(": cwd:" in p for p in found) and any(": systemPrompt:" in p for p in found), found


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT / "cassettes")))
def test_every_request_in_a_committed_cassette_follows_the_schema(path: Path) -> None:
    assert problems(read_cassette(path).events) == []


#: What the reference agent with every variant offers, in v1 and in v2 (the v2 answer: no load,
#: no modes; modes and options are learned at calibration, not from initialize).
CAPS = {
    1: Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True, delete=True, set_mode=True, set_config_option=True,
                    title=True, status=True, additional_directories=True),
    2: Capabilities(system_prompt=True, override=True, resume=True, replay=True, fork=True,
                    close=True, list=True, delete=True, set_config_option=True, title=True,
                    status=True, additional_directories=True),
}


def _covering_events(protocol: int, gateway: Any) -> list[Event]:
    """The events of the covering examples of the agent that offers everything, each run on
    a fresh reference agent."""
    from acp_fuzz.strategies import covering_examples

    seen: list[Event] = []
    for example in covering_examples(CAPS[protocol]):
        with Run(_everything(protocol), gateway=gateway) as run:
            run.initialize()
            for step in example.steps:
                run.execute(dict(step))
            seen.extend(run.history.snapshot())
    return seen


def _everything(protocol: int) -> TargetSpec:
    return TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                    "--variant", "switches", "--variant", "titles",
                                    "--variant", "status", "--variant", "directories"],
                                   protocol=str(protocol))


V1_METHODS = {"initialize", "session/new", "session/prompt", "session/load", "session/resume",
              "session/fork", "session/close", "session/delete", "session/list",
              "session/set_mode", "session/set_config_option", "session/set_title",
              "session/status", "session/cancel"}
V2_METHODS = V1_METHODS - {"session/load", "session/set_mode"}


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [1, 2])
def test_every_request_shape_the_strategies_draw_follows_the_schema(protocol: int) -> None:
    """The lifecycle machine, with every capability it can draw for, run for real against
    the reference agent (which offers them all): each example on a fresh agent. In v2 the
    capabilities are the ones the agent's v2 answer gives (no load, no modes)."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from acp_fuzz.engine.gateway import Gateway
    from acp_fuzz.strategies import LifecycleMachine

    spec = _everything(protocol)
    seen: list[Event] = []
    with Gateway(None) as gateway:

        class Driven(LifecycleMachine):
            caps = CAPS[protocol]

            def __init__(self) -> None:
                super().__init__()
                self.run = Run(spec, gateway=gateway).__enter__()
                self.run.initialize()
                assert self.run.protocol == protocol
                assert self.run.caps == replace(self.caps, set_mode=False,
                                                set_config_option=False)

            def execute(self, step: dict[str, Any]) -> None:
                self.run.execute(step)

            def teardown(self) -> None:
                seen.extend(self.run.history.snapshot())
                self.run.close(grace=0)

        run_state_machine_as_test(Driven, settings=settings(
            max_examples=80, derandomize=True, database=None, deadline=None,
            stateful_step_count=12, suppress_health_check=list(HealthCheck)))
        # As in a campaign, the covering examples too: they send every method for sure (80
        # derandomized draws may miss one: a cancel, since the strategies' modules changed).
        seen.extend(_covering_events(protocol, gateway))
    methods = {m.get("method") for _, m, _ in _sent(seen)}
    # Every method the strategies draw was drawn and sent; in v2 never a load (SP-V2-NOLOAD-
    # DEF) but resumes that replay from the start.
    expected = V1_METHODS if protocol == 1 else V2_METHODS
    assert expected <= methods, methods
    if protocol == 2:
        assert "session/load" not in methods
        assert any((m.get("params") or {}).get("replayFrom") == {"type": "start"}
                   for _, m, _ in _sent(seen) if m.get("method") == "session/resume")
    assert problems(seen) == []


# Campaign-sized (every covering example on a fresh agent, 13-15 s a version): the long
# tier, which CI runs.
@pytest.mark.slow
@pytest.mark.parametrize("protocol", [1, 2])
def test_every_request_of_the_covering_examples_follows_the_schema(protocol: int) -> None:
    """The covering examples a campaign opens with (every op, every invalid payload on every
    request that carries one), each on a fresh reference agent that offers everything."""
    from acp_fuzz.engine.gateway import Gateway

    with Gateway(None) as gateway:
        seen = _covering_events(protocol, gateway)
    methods = {m.get("method") for _, m, _ in _sent(seen)}
    assert (V1_METHODS if protocol == 1 else V2_METHODS) <= methods, methods
    assert problems(seen) == []
