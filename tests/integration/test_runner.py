"""The runner against the real reference agent: mid-turn cancel, and pre-spawned runs."""

from __future__ import annotations

import sys

import pytest

from acp_fuzz.core.oracles import evaluate
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.gateway import Gateway

pytestmark = pytest.mark.integration

SPEC = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
SP = {"mode": "append", "content": [{"type": "text", "text": "Answer like a ship's captain."}]}


def test_cancel_mid_turn_gets_a_stop_reason_and_is_written_after_the_prompt(
        no_orphans: object) -> None:
    with Run(SPEC) as run:
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        out = run.execute({"op": "cancel", "session": "A"})
        assert out.outcome == "ok"
        assert out.result["stopReason"] in ("cancelled", "end_turn")
        sent = [m["method"] for _, m in run.history.acp_messages("send")
                if isinstance(m, dict) and "method" in m]
        # The cancel follows its prompt on the wire, never the other way round.
        assert sent[-2:] == ["session/prompt", "session/cancel"]
        # The turn after a cancel still carries the prompt, and nothing is reported.
        run.execute({"op": "prompt", "session": "A"})
        assert [f for f in evaluate(run.history.snapshot()) if f.severity != "info"] == []


def test_a_prepared_run_does_not_take_the_active_runs_model_requests(
        no_orphans: object) -> None:
    with Gateway(None) as gw:
        active = Run(SPEC, gateway=gw)
        active.start()
        active.initialize()
        spare = Run(SPEC, gateway=gw)
        spare.start(activate=False)  # pre-spawned while `active` works
        spare.initialize()
        try:
            active.execute({"op": "new", "session": "A", "systemPrompt": SP})
            active.execute({"op": "prompt", "session": "A"})
            assert [x.session for _, x in active.history.model_exchanges()] == ["A"]
            assert spare.history.model_exchanges() == []
            spare.close()  # closing the spare must not unbind the active run
            active.execute({"op": "prompt", "session": "A"})
            assert [x.turn for _, x in active.history.model_exchanges()] == [1, 2]
        finally:
            spare.close()
            active.close()


def test_a_restart_lets_the_agent_exit_but_an_example_end_stops_it_at_once(
        no_orphans: object) -> None:
    from pathlib import Path

    from acp_fuzz.core.oracles import learn_baseline
    from acp_fuzz.engine.campaign.runner import run_steps

    agent = Path(__file__).resolve().parents[1] / "hostile_agents" / "later.py"
    spec = TargetSpec.from_command([sys.executable, str(agent), "slow-exit"])
    history, _ = run_steps(spec, [{"op": "new", "session": "A"}, {"op": "restart"},
                                  {"op": "new", "session": "B"}],
                           baseline=learn_baseline([]))
    procs = [e.data for e in history.events if e.kind == "process"]
    first = [p for p in procs if p.get("generation") == 0]
    last = [p for p in procs if p.get("generation") == 1]
    # The restarted process had its chance to finish on its own (persist its sessions) ...
    assert [p["what"] for p in first if p["what"] in ("kill", "exit")] == ["exit"]
    assert next(p for p in first if p["what"] == "exit")["returncode"] == 0
    # ... but after the last step nothing reads its state again: SIGTERM at once.
    kills = [(p["signal"], p["reason"]) for p in last if p["what"] == "kill"]
    assert kills[:1] == [(15, "stop")]


def test_a_step_on_a_session_that_does_not_exist_is_skipped_but_a_closed_one_is_sent(
        no_orphans: object) -> None:
    """The runner reads the shared lifecycle model: no session id to send for a session never
    made or refused (skipped, nothing on the wire), and only a turn for a deleted one (to see
    it refused, #38 §5); a closed session, or one a restart unloaded, still exists, and the
    agent is asked (and must refuse)."""
    def methods(run: Run) -> list[str]:
        return [m["method"] for _, m in run.history.acp_messages("send")
                if isinstance(m, dict) and "method" in m]

    with Run(SPEC) as run:
        run.initialize()
        before = len(methods(run))
        assert run.execute({"op": "prompt", "session": "Z"}).outcome == "skipped"
        assert run.execute({"op": "load", "session": "Z"}).outcome == "skipped"
        assert methods(run)[before:] == []
        refused = {"op": "new", "session": "R", "systemPrompt": {"mode": "nope", "content": []}}
        assert run.execute(refused).outcome == "error"
        assert run.execute({"op": "prompt", "session": "R"}).outcome == "skipped"
        run.execute({"op": "new", "session": "A", "systemPrompt": SP})
        assert run.execute({"op": "close", "session": "A"}).outcome == "ok"
        assert not run.life.is_open("A") and run.life.exists("A")
        assert run.execute({"op": "prompt", "session": "A"}).outcome == "error"
        assert methods(run)[-1] == "session/prompt"
        assert run.execute({"op": "delete", "session": "A"}).outcome == "ok"
        assert run.execute({"op": "load", "session": "A"}).outcome == "skipped"
        assert methods(run)[-1] == "session/delete"
        deleted = run.execute({"op": "prompt", "session": "A"})
        assert deleted.outcome == "error" and deleted.error["code"] == -32002
        assert methods(run)[-1] == "session/prompt"
        findings = evaluate(run.history.snapshot())
        assert "session.deleted-usable" not in {f.oracle for f in findings}
        assert [f for f in findings if f.severity != "info"] == []
