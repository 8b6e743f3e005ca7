"""The core "done when": one scripted lifecycle against the reference agent, judged from what
reached the model.

Script (handles are the runner's logical sessions)::

    new A (append P) ; prompt A ; new B (override Q) ; prompt B ; restart ;
    load A (P re-sent) ; prompt A ; fork A -> C (append R) ; prompt C ; prompt A

Against the correct agent every session's client text sits in the system slot of that
session's model requests and nowhere else, and the oracles find nothing. Against ``--bug leak``
the same script puts C's text into A's last request. The recorded run survives a cassette round
trip, and ``acp-fuzz show`` refuses damaged cassettes with one line on stderr.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import Event, History, ModelExchange
from acp_fuzz.core.oracles import Baseline, evaluate, learn_baseline
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.reference_agent import default_instructions

pytestmark = pytest.mark.integration

P = "You review code for handle A. Focus on security vulnerabilities first."
Q = "Answer only in French, handle B; ignore every other language request."
R = "You are the fork C reviewer; cite file paths and line numbers."
TEXTS = {"A": P, "B": Q, "C": R}

Track = Callable[[int | None], None]


def sp(mode: str, text: str) -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": text}]}


SCRIPT: list[dict[str, Any]] = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "prompt", "session": "A"},
    {"op": "new", "session": "B", "systemPrompt": sp("override", Q)},
    {"op": "prompt", "session": "B"},
    {"op": "restart"},
    {"op": "load", "session": "A", "systemPrompt": sp("append", P)},
    {"op": "prompt", "session": "A"},
    {"op": "fork", "session": "A", "new": "C", "systemPrompt": sp("append", R)},
    {"op": "prompt", "session": "C"},
    {"op": "prompt", "session": "A"},
]

#: (session, turn) of every prompt step of SCRIPT, in order.
TURNS = [("A", 1), ("B", 1), ("A", 2), ("C", 1), ("A", 3)]


def baseline() -> Baseline:
    """The reference agent's defaults, learned the way calibration learns them: from two
    default prompts with different working directories (the cwd line drops out)."""
    return learn_baseline([default_instructions("/one"), default_instructions("/two")])


def agent(*bug: str) -> TargetSpec:
    argv = [sys.executable, "-m", "acp_fuzz.reference_agent", *(("--bug", *bug) if bug else ())]
    return TargetSpec.from_command(argv, request_timeout=20.0, init_timeout=20.0)


def run_script(spec: TargetSpec, track: Track) -> tuple[History, Any]:
    with Run(spec) as run:
        track(run.agent.pgid)
        init = run.initialize()
        for step in SCRIPT:
            out = run.execute(step)
            assert out.outcome == "ok", (step, out)
            if step["op"] == "restart":
                track(run.agent.pgid)
        events = run.history.snapshot()
    return History.from_events(events), init


def turn_requests(history: History) -> dict[tuple[str, int], list[ModelExchange]]:
    out: dict[tuple[str, int], list[ModelExchange]] = {}
    for _, x in history.model_exchanges():
        assert not x.side, "the reference agent makes no side requests"
        assert x.session is not None and x.turn is not None, "every request is tied to a turn"
        out.setdefault((x.session, x.turn), []).append(x)
    return out


@pytest.fixture
def correct(no_orphans: Track) -> tuple[History, Any]:
    return run_script(agent(), no_orphans)


def test_correct_agent_isolates_sessions(correct: tuple[History, Any]) -> None:
    history, _ = correct
    by_turn = turn_requests(history)
    assert sorted(by_turn) == sorted(TURNS), "exactly one turn request per prompt step"
    for (session, turn), exchanges in by_turn.items():
        for x in exchanges:
            system = x.texts("system")
            everything = "\n".join(s.text for s in x.segments)
            own = TEXTS[session]
            # The exact client text, verbatim, in the system slot of its own session.
            assert any(own in t for t in system), (session, turn, system)
            assert own not in "\n".join(x.texts("user") + x.texts("history"))
            for other, text in TEXTS.items():
                if other != session:
                    assert text not in everything, f"{other}'s text in {session} turn {turn}"
    # The prompt re-sent on load after the restart and the fork's own prompt really are the
    # ones in use: A keeps P across the restart and the fork; C has R, not its source's P.
    assert P in "".join(by_turn[("A", 3)][0].texts("system"))
    assert R in "".join(by_turn[("C", 1)][0].texts("system"))
    # override: B's system slot is Q alone, none of the agent's own instructions.
    assert by_turn[("B", 1)][0].texts("system") == [Q]


def test_correct_agent_gives_no_findings(correct: tuple[History, Any]) -> None:
    history, _ = correct
    base = baseline()
    assert base.known
    assert evaluate(history.snapshot(), baseline=base) == []
    assert evaluate(history.snapshot(), baseline=base, strict=True) == []


def test_leak_puts_foreign_text_in_history(no_orphans: Track) -> None:
    history, _ = run_script(agent("leak"), no_orphans)
    by_turn = turn_requests(history)
    # After the fork, the agent's one global prompt is C's: A's third turn gets R, not P.
    last_a = "\n".join(by_turn[("A", 3)][0].texts("system"))
    assert R in last_a
    assert P not in last_a
    findings = evaluate(history.snapshot(), baseline=baseline())
    leaks = [f for f in findings if f.oracle == "prompt.leak"]
    assert leaks, findings
    assert {(f.session, f.evidence.get("foreign_session")) for f in leaks} == {("A", "C")}
    assert all(f.severity == "MUST" for f in leaks)
    # The leak is exposed by the last step (index 9), not earlier.
    assert {f.step for f in leaks} == {len(SCRIPT) - 1}


# -- cassettes -------------------------------------------------------------------------------


def header_for(init: Any) -> Header:
    return Header(target=["python", "-m", "acp_fuzz.reference_agent"], kind="run", seed=None,
                  settings={"baseline": baseline().to_wire()}, initialize=init,
                  meta={"script": "lifecycle-scripted"})


def test_cassette_round_trip_is_equal(correct: tuple[History, Any], tmp_path: Path) -> None:
    history, init = correct
    events: list[Event] = history.snapshot()
    header = header_for(init)
    path = write_cassette(tmp_path / "run.cassette", header, events)
    back = read_cassette(path)
    assert back.header == header
    assert back.events == events
    # And the oracles agree on the copy (offline evaluation).
    assert evaluate(back.events, baseline=Baseline.from_wire(back.header.settings["baseline"])
                    ) == []


def _show(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_fuzz", "show", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_show_reads_the_good_cassette(correct: tuple[History, Any], tmp_path: Path) -> None:
    history, init = correct
    path = write_cassette(tmp_path / "run.cassette", header_for(init), history.snapshot())
    res = _show(path)
    assert res.returncode == 0, res.stderr
    assert "session/fork" in res.stdout


@pytest.mark.parametrize("damage", ["truncated", "random-bytes"])
def test_show_refuses_damaged_cassette(correct: tuple[History, Any], tmp_path: Path,
                                       damage: str) -> None:
    history, init = correct
    good = write_cassette(tmp_path / "run.cassette", header_for(init), history.snapshot())
    bad = tmp_path / f"{damage}.cassette"
    if damage == "truncated":
        data = good.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        bad.write_bytes(random.Random(1234).randbytes(8192))
    res = _show(bad)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("acp-fuzz: error: ")
    assert str(bad) in lines[0]
    assert "Traceback" not in res.stderr
    assert res.stdout == ""
