"""Compaction as a lifecycle step (issue #22 §1), through the runner and the gateway, against
the reference agent's ``--variant compacting`` (profile ``reference-compacting``): a
``compact`` step of each kind makes it compact, its summary request is recorded as a
compaction's side request tied to the session, the forced replies say what the gateway did,
and what it sends is what the ACP schema allows. The planted bugs and the deferring variant
do to the system slot what they say."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import History, ModelExchange
from acp_fuzz.engine.campaign.runner import Run, TargetSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
P_TEXT = "Review for security first. [canary P]"
Q_TEXT = "Answer as a patient teacher. [canary Q]"
P = {"mode": "append", "content": [{"type": "text", "text": P_TEXT}]}
Q = {"mode": "append", "content": [{"type": "text", "text": Q_TEXT}]}
NEW = {"op": "new", "session": "A", "cwd": "distinct", "systemPrompt": P}
TURN = {"op": "prompt", "session": "A"}


def compacting(*args: str, protocol: str = "1") -> TargetSpec:
    """The reference agent with ``args`` (a bug, a variant) under the profile that says how it
    compacts, as ``acp-fuzz target --profile reference-compacting -- CMD`` runs it."""
    return TargetSpec.from_profile(
        "reference-compacting", protocol=protocol,
        command=[sys.executable, "-m", "acp_fuzz.reference_agent", *args])


def run(spec: TargetSpec, steps: list[dict[str, Any]]) -> tuple[History, list[str]]:
    with Run(spec) as r:
        r.initialize()
        outcomes = [r.execute(s).outcome for s in steps]
        return History.from_events(r.history.snapshot()), outcomes


def turns(history: History) -> list[ModelExchange]:
    """The model turns of session A (not its summaries), in order."""
    return [x for _, x in history.model_exchanges() if x.session == "A" and not x.side
            and x.status == 200]


def system(x: ModelExchange) -> str:
    return "\n".join(x.texts("system"))


def updates(history: History, kind: str) -> list[dict[str, Any]]:
    return [m["params"]["update"] for _, m in history.acp_messages("recv")
            if isinstance(m, dict) and m.get("method") == "session/update"
            and m["params"]["update"].get("sessionUpdate") == kind]


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_every_kind_of_compaction_and_what_the_history_says(protocol: str,
                                                            tmp_path: Path) -> None:
    steps = [NEW, TURN, {"op": "compact", "session": "A", "by": "command"}, TURN,
             {"op": "compact", "session": "A", "by": "usage"}, TURN,
             {"op": "compact", "session": "A", "by": "overflow"}, TURN]
    history, outcomes = run(compacting("--variant", "compacting", protocol=protocol), steps)
    assert outcomes == ["ok"] * len(steps)
    exchanges = [x for _, x in history.model_exchanges()]
    summaries = [x for x in exchanges if x.side_kind == "compaction"]
    # One summary per compaction, each tied to A by the nonces of the turns it summarises.
    assert len(summaries) == 3 and {x.session for x in summaries} == {"A"}
    assert all(x.side and x.texts("system")[0].startswith("acp-fuzz reference agent: summar")
               for x in summaries)
    assert [(x.pressure, x.status) for x in exchanges if x.pressure] == [
        ("usage", 200), ("overflow", 400)]
    # The client prompt is in the system slot of every turn, before and after each compaction.
    assert len(turns(history)) == 6 and all(P_TEXT in system(x) for x in turns(history))
    verdicts = [e.data for e in history.of_kind("verdict")]
    assert [(v["by"], v["pressed"]) for v in verdicts if v["what"] == "compact"] == [
        ("usage", True), ("overflow", True)]
    init = next(v for v in verdicts if v["what"] == "initialize")
    assert init["compaction"] == ["usage", "overflow"]
    assert init["capabilities"]["compact_usage"] and init["capabilities"]["compact_overflow"]
    # The command step is a turn of its own, with no nonce of the harness's.
    command = next(e.data for e in history.of_kind("step") if e.data["args"].get("by") ==
                   "command")
    assert "nonce" not in command
    # What the agent sent is what the schema of its version allows.
    schema = json.loads((ROOT / "tests" / "fixtures" / "acp-schema" / f"v{protocol}" /
                         "schema.unstable.json").read_text())
    name = next(k for k, d in schema["$defs"].items()
                if isinstance(d, dict) and d.get("x-method") == "session/update")
    validator = Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]})
    advertised = updates(history, "available_commands_update")
    assert advertised and all(c["name"] == "compact" for u in advertised
                              for c in u["availableCommands"])
    compactions = updates(history, "compaction_update")
    assert [u["status"] for u in compactions] == (
        ["in_progress", "completed"] * 3 if protocol == "2" else [])
    for _, m in history.acp_messages("recv"):
        if isinstance(m, dict) and m.get("method") == "session/update":
            validator.validate(m["params"])
    # The cassette keeps what the gateway did, and reads back the same.
    path = write_cassette(tmp_path / "c.cassette", Header(target=["agent"]),
                          history.snapshot())
    back = [ModelExchange.from_wire(e.data) for e in read_cassette(path).events
            if e.kind == "model"]
    assert back == exchanges


def test_a_change_is_held_until_the_compaction_even_across_a_restart() -> None:
    steps = [NEW, TURN, {"op": "resume", "session": "A", "systemPrompt": Q}, TURN,
             {"op": "restart"}, {"op": "load", "session": "A", "systemPrompt": Q}, TURN,
             {"op": "compact", "session": "A", "by": "usage"}, TURN, TURN]
    history, outcomes = run(compacting("--variant", "defer-until-compaction"), steps)
    assert outcomes == ["ok"] * len(steps)
    sent = [(P_TEXT in system(x), Q_TEXT in system(x)) for x in turns(history)]
    # P until the compaction (which the usage of the fourth turn brings before the fifth).
    assert sent == [(True, False)] * 4 + [(False, True)] * 2


@pytest.mark.parametrize(("bug", "after"), [
    ("compaction-drops-prompt", (False, False)),  # the defaults alone
    ("compaction-keeps-stale", (True, False)),  # the old prompt, for good
])
def test_the_planted_compaction_bugs(bug: str, after: tuple[bool, bool]) -> None:
    steps = [NEW, TURN, {"op": "resume", "session": "A", "systemPrompt": Q},
             {"op": "compact", "session": "A", "by": "command"}, TURN, TURN]
    history, outcomes = run(compacting("--bug", bug), steps)
    assert outcomes == ["ok"] * len(steps)
    sent = [(P_TEXT in system(x), Q_TEXT in system(x)) for x in turns(history)]
    assert sent == [(True, False), after, after]


def test_no_compaction_command_no_command_step() -> None:
    """An agent that advertised no ``compact`` command gets no ``/compact`` turn: the step
    is skipped. The fake model's pressure reaches any agent."""
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
    history, outcomes = run(spec, [NEW, TURN, {"op": "compact", "session": "A",
                                               "by": "command"},
                                   {"op": "compact", "session": "A", "by": "overflow"}])
    assert outcomes == ["ok", "ok", "skipped", "error"]
    assert not any(x.side_kind == "compaction" for _, x in history.model_exchanges())
