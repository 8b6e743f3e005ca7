"""ACP v2 end to end: version negotiation, the v2 turn (an answer, then state updates), a
load sent as a resume that replays from the start, and the one-line errors of a broken
negotiation. Real agent subprocesses: the reference agent (which speaks v1 and v2) and a
tiny v2 agent with odd turns (tests/hostile_agents/v2_turns.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.oracles import evaluate
from acp_fuzz.engine.campaign.runner import Run, TargetSpec

pytestmark = pytest.mark.integration

HOSTILE = Path(__file__).resolve().parent.parent / "hostile_agents"
REF = [sys.executable, "-m", "acp_fuzz.reference_agent"]
SP = {"mode": "append", "content": [{"type": "text", "text": "Answer like a ship's captain."}]}


def spec(*extra: str, protocol: str = "2", **kw: object) -> TargetSpec:
    return TargetSpec.from_command([*REF, *extra], protocol=protocol, **kw)  # type: ignore[arg-type]


def sent(run: Run) -> list[dict]:
    return [m for _, m in run.history.acp_messages("send") if isinstance(m, dict)]


def test_a_v2_turn_ends_with_the_idle_update_and_its_stop_reason(no_orphans: object) -> None:
    with Run(spec()) as run:
        run.initialize()
        assert run.protocol == 2 and run.caps.replay and not run.caps.load
        init = sent(run)[0]["params"]
        assert init["protocolVersion"] == 2 and "info" in init and "clientInfo" not in init
        assert run.execute({"op": "new", "session": "A", "systemPrompt": SP}).outcome == "ok"
        out = run.execute({"op": "prompt", "session": "A"})
        assert out.outcome == "ok"
        assert isinstance(out.result["messageId"], str) and out.result["stopReason"] == "end_turn"
        # The model got the turn with the prompt in the system slot, and nothing is reported.
        (_, x), = run.history.model_exchanges()
        assert "ship's captain" in "\n".join(x.texts("system"))
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


def test_a_v2_cancel_ends_the_turn_cancelled_or_done(no_orphans: object) -> None:
    with Run(spec()) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        out = run.execute({"op": "cancel", "session": "A"})
        assert out.outcome == "ok" and out.result["stopReason"] in ("cancelled", "end_turn")
        assert [m.get("method") for m in sent(run)][-2:] == ["session/prompt", "session/cancel"]
        assert run.execute({"op": "prompt", "session": "A"}).outcome == "ok"
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


def test_a_v2_load_is_a_resume_that_replays_and_keeps_the_conversation(
        no_orphans: object) -> None:
    with Run(spec()) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        run.execute({"op": "prompt", "session": "A"})
        run.execute({"op": "restart"})
        assert run.execute({"op": "load", "session": "A", "systemPrompt": SP}).outcome == "ok"
        run.execute({"op": "prompt", "session": "A"})
        methods = [m.get("method") for m in sent(run)]
        assert "session/load" not in methods
        (resume,) = [m for m in sent(run) if m.get("method") == "session/resume"]
        assert resume["params"]["replayFrom"] == {"type": "start"}
        # The second turn's request carries the first turn: the conversation survived.
        first, second = (x for _, x in run.history.model_exchanges())
        assert first.turn == 1 and second.turn == 2
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


def test_a_planted_load_bug_is_found_through_the_v2_resume(no_orphans: object) -> None:
    with Run(spec("--bug", "history-lost-after-restart")) as run:
        run.initialize()
        for step in ({"op": "new", "session": "A"}, {"op": "prompt", "session": "A"},
                     {"op": "restart"}, {"op": "load", "session": "A"},
                     {"op": "prompt", "session": "A"}):
            run.execute(step)
        found = {f.oracle for f in evaluate(run.history.snapshot()) if f.severity == "MUST"}
        assert found == {"session.history-lost"}


def test_an_idle_update_before_the_answer_still_ends_the_turn(no_orphans: object) -> None:
    s = TargetSpec.from_command([sys.executable, str(HOSTILE / "v2_turns.py"), "idle-first"],
                                protocol="2", request_timeout=20)
    with Run(s) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A"})
        out = run.execute({"op": "prompt", "session": "A"})
        assert out.outcome == "ok" and out.result == {"messageId": "m1", "stopReason": "end_turn"}


def test_a_v2_turn_that_never_goes_idle_is_a_hang(no_orphans: object) -> None:
    s = TargetSpec.from_command([sys.executable, str(HOSTILE / "v2_turns.py"), "no-idle"],
                                protocol="2", request_timeout=1.0)
    with Run(s) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A"})
        # The answer came (a messageId): only the missing idle update shows the hang.
        assert run.execute({"op": "prompt", "session": "A"}).outcome == "timeout"
        answers = [m for _, m in run.history.acp_messages("recv")
                   if isinstance(m, dict) and "result" in m]
        assert answers[-1]["result"] == {"messageId": "m1"}
        hang = [f for f in evaluate(run.history.snapshot()) if f.oracle == "agent.hang"]
        assert hang and hang[0].severity == "MUST"


@pytest.mark.parametrize(("choice", "extra", "version"), [
    ("auto", (), 2), ("auto", ("--variant", "v1-only"), 1), ("1", (), 1)])
def test_negotiation_settles_on_what_both_speak(choice: str, extra: tuple[str, ...],
                                                version: int, no_orphans: object) -> None:
    with Run(spec(*extra, protocol=choice)) as run:
        run.initialize()
        assert run.protocol == version
        offered = sent(run)[0]["params"]
        # auto offers 2 in both spellings, so that a v1 agent still learns who the client is.
        assert offered["protocolVersion"] == (1 if choice == "1" else 2)
        assert ("clientInfo" in offered) == (choice != "2")
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        assert run.execute({"op": "prompt", "session": "A"}).outcome == "ok"


@pytest.mark.parametrize(("choice", "extra", "why"), [
    ("2", ("--variant", "v1-only"), "run with --protocol 1 or --protocol auto"),
    ("2", ("--bug", "version-above-offer"), "INIT-VERSION-NEGOTIATE-DEF"),
    ("1", ("--bug", "version-above-offer"), "answered protocolVersion 2 to an offer of 1"),
])
def test_a_broken_negotiation_is_a_one_line_harness_error(
        choice: str, extra: tuple[str, ...], why: str, no_orphans: object) -> None:
    with Run(spec(*extra, protocol=choice)) as run, pytest.raises(HarnessError) as e:
        run.initialize()
    assert why in str(e.value) and "\n" not in str(e.value)


def test_target_protocol_2_against_a_v1_only_agent_exits_with_one_line(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "target", "--protocol", "2", "--max-examples", "2", "--",
                *REF, "--variant", "v1-only")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--protocol auto" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_target_rejects_an_unknown_protocol(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "target", "--protocol", "3", "--", *REF)
    assert r.returncode == 2 and "--protocol must be one of 1, 2, auto" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_a_busy_resume_is_written_right_behind_its_turn_and_both_are_awaited(
        protocol: str, no_orphans: object) -> None:
    with Run(spec(protocol=protocol)) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        out = run.execute({"op": "resume", "session": "A", "systemPrompt": SP, "busy": True})
        assert out.outcome == "ok"
        methods = [m.get("method") for m in sent(run) if "method" in m]
        assert methods[-2:] == ["session/prompt", "session/resume"]
        (turn,) = [e.data for e in run.history.snapshot()
                   if e.kind == "verdict" and e.data.get("what") == "busy-turn"]
        assert turn["outcome"] == "ok" and turn["stopReason"] == "end_turn"
        run.execute({"op": "prompt", "session": "A"})
        assert [x.turn for _, x in run.history.model_exchanges()] == [1, 2]
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


def test_a_busy_resume_that_drops_the_prompt_is_found(no_orphans: object) -> None:
    with Run(spec("--bug", "busy-resume-drops-prompt")) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        # Not busy: the bug does not fire.
        run.execute({"op": "resume", "session": "A", "systemPrompt": SP})
        run.execute({"op": "prompt", "session": "A"})
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []
        run.execute({"op": "resume", "session": "A", "systemPrompt": SP, "busy": True})
        run.execute({"op": "prompt", "session": "A"})
        found = {(f.oracle, f.severity) for f in evaluate(run.history.snapshot())}
        assert ("prompt.lost", "MUST") in found
