"""Finds and shrinks the planted bugs of a request sent while the model is thinking (issue
#32 §2), at seeds 1-3 (a covering example sends each kind at every seed), and replays each
cassette deterministically: FAILED with the bug, FIXED without. The correct reference agent,
which peeks at its input after the model answers, is clean under every kind, in v1 and v2.

* ``cancel-ignored-mid-turn``: a ``session/cancel`` written while the turn's model request is
  held is not looked for: ``end_turn``, ``cancel.turn-kept`` (SHOULD).
* ``close-keeps-turn``: a ``session/close`` then does not cancel the turn: ``end_turn``,
  ``close.turn-kept`` (SHOULD).
* ``close-drops-turn``: the close ends the turn unanswered: ``close.turn-unanswered`` (MUST).
* ``cancel-request-unanswered``: a ``$/cancel_request`` of the prompt drops it:
  ``cancel-request.unanswered`` (MUST).

* ``set-mode-during-turn-unanswered``: a ``session/set_mode`` (to another of the session's
  advertised modes) written while the model is thinking is never answered:
  ``set-mode.unanswered`` (MUST).
* ``set-mode-refused-during-turn``: that set_mode is refused: ``set-mode.refused-mid-turn``
  (SHOULD).
* ``second-prompt-unanswered``: a second ``session/prompt`` of the session written while the
  model is thinking is never answered: ``second-prompt.unanswered`` (MUST); in v1 and v2.
* ``cancel-new-unanswered``: a ``session/new`` with its ``$/cancel_request`` right behind it
  (one write) is never answered: ``cancel-request.new-unanswered`` (MUST);
  ``cancel-new-leaves-session``: it is answered ``-32800`` and the session is made (listed):
  ``cancel-request.session-left`` (SHOULD). Each shrinks to that one step.
* ``cancel-load-unanswered``: a ``session/load``, ``session/resume`` or ``session/fork``
  with its ``$/cancel_request`` right behind it is never answered:
  ``cancel-request.lifecycle-unanswered`` (MUST); ``cancel-fork-leaves-session``: that fork
  is answered ``-32800`` and the copy is made (listed): ``cancel-request.session-left``
  (SHOULD). Each shrinks to two steps: ``new A``, and that request.
  ``cancel-load-keeps-prompt``: a load or resume answered ``-32800`` applies the prompt it
  carried anyway: ``cancel-request.session-left`` (SHOULD), shrunk to ``new A``, that
  request with a changed prompt, and a turn of A.
* ``fork-during-turn-unanswered``: a ``session/fork`` of the session written while the model
  is thinking is never answered: ``fork.unanswered`` (MUST).
* ``set-config-during-turn-unanswered``: a ``session/set_config_option`` written then is
  never answered: ``set-config.unanswered`` (MUST).
* ``delete-drops-turn``: a ``session/delete`` of the session written then is answered, and
  the turn never is: ``delete.turn-unanswered`` (MUST).

Each shrinks to two steps: ``new A``, and the turn with the request sent during it. (The
set_mode and set_config_option bugs turn on ``--variant switches``: modes and a model to
switch to; the correct agent they are replayed against offers them too, and answers the
switch once the turn ended.)

Two turns at once: ``shared-prompt-slot`` keeps the running turn's prompt in one
process-wide slot that a turn stores as its session's when it ends; a turn of B that starts
while A's model is answering leaves B's prompt to A. Found as ``prompt.leak`` (MUST) at seeds
1-3 in v1 and v2, shrunk to the four steps it needs (new A (P); new B (Q); A's turn with B's
at once; A's next turn), and replayed.

A reattach during another session's turn: ``reattach-swaps-running-prompt`` puts the
prompt of a session loaded (or resumed) while A's model is answering in that slot, and A's
turn stores it. Found as ``prompt.leak`` (MUST) at seeds 1-3 in v1 and v2, shrunk to the
reattach sent while A's turn ran and A's next turn, and replayed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, calibrate, run_campaign, run_steps
from acp_fuzz.engine.gateway import Gateway

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

#: The request timeout of the campaigns and of the replays that meet a planted hang: the
#: reference agent answers within milliseconds, and each trial or replay that keeps the hang
#: waits this long (at replay's default 30 s, two runs of a hang took a minute).
TIMEOUT = 3.0

#: bug -> (oracle, severity, what the shrunk turn sends during it).
BUGS = {
    "cancel-ignored-mid-turn": ("cancel.turn-kept", "SHOULD", "cancel"),
    "close-keeps-turn": ("close.turn-kept", "SHOULD", "close"),
    "close-drops-turn": ("close.turn-unanswered", "MUST", "close"),
    "cancel-request-unanswered": ("cancel-request.unanswered", "MUST", "cancel-request"),
    "set-mode-during-turn-unanswered": ("set-mode.unanswered", "MUST", "set-mode"),
    "set-mode-refused-during-turn": ("set-mode.refused-mid-turn", "SHOULD", "set-mode"),
    "second-prompt-unanswered": ("second-prompt.unanswered", "MUST", "prompt"),
    "fork-during-turn-unanswered": ("fork.unanswered", "MUST", "fork"),
    "set-config-during-turn-unanswered": ("set-config.unanswered", "MUST", "set-config"),
    "delete-drops-turn": ("delete.turn-unanswered", "MUST", "delete"),
}


def argv(*bugs: str, variant: str | None = None) -> list[str]:
    out = [sys.executable, "-m", "acp_fuzz.reference_agent"]
    for bug in bugs:
        out += ["--bug", bug]
    return out + (["--variant", variant] if variant else [])


def fixed_argv(bug: str) -> list[str]:
    """The correct agent a bug's cassette is replayed against: for a mode switch, one that
    offers modes (the bug planted them), so the switch is sent and answered."""
    return argv(variant="switches" if BUGS[bug][2] in ("set-mode", "set-config") else None)


def reference(*bugs: str, protocol: str = "1", variant: str | None = None) -> TargetSpec:
    # A short timeout: some of the bugs leave a request unanswered, and the shrinker meets
    # that hang again at every trial that keeps it.
    spec = TargetSpec.from_command(argv(*bugs, variant=variant), protocol=protocol)
    return dataclasses.replace(spec, request_timeout=TIMEOUT)


def found_and_confirmed(bug: str, oracle: str, severity: str, seed: int,
                        tmp_path: Path) -> Any:
    """A default campaign against the reference agent with ``bug`` (strict for a SHOULD):
    its first report, confirmed 3/3, with a finding of ``oracle`` at ``severity``."""
    result = run_campaign(reference(bug), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed, strict=severity == "SHOULD"))
    assert result.reports, f"{bug} not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    (f,) = [f for f in report.findings if f.oracle == oracle]
    assert f.severity == severity
    return report


def replays_failed_then_fixed(cassette: Path, bug: str, fixed: list[str] | None = None) -> None:
    """``cassette`` replays FAILED twice out of two against the reference agent with
    ``bug``, and FIXED against the correct one (``fixed``: its command, default the plain
    reference agent)."""
    again = replay_cassette(cassette, target=argv(bug), runs=2, timeout=TIMEOUT)
    assert again.verdict == "FAILED" and again.reproduced == 2, again.line()
    result = replay_cassette(cassette, target=argv() if fixed is None else fixed)
    assert result.verdict == "FIXED", result.line()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_bug_of_a_request_during_a_turn_is_found_shrunk_and_replayed(
        bug: str, seed: int, tmp_path: Path, no_orphans: object) -> None:
    oracle, severity, during = BUGS[bug]
    report = found_and_confirmed(bug, oracle, severity, seed, tmp_path)
    assert [(s["op"], s.get("during")) for s in report.steps] == [
        ("new", None), ("prompt", during)], report.steps
    assert report.cassette is not None
    if seed == 1:  # the cassette is the same at every seed: replay one
        replays_failed_then_fixed(report.cassette, bug, fixed_argv(bug))


#: bug -> (oracle, severity, the shapes it may shrink to) of a session/new, load, resume or
#: fork with its $/cancel_request right behind it: that request alone (new), or new A and
#: that request of A.
CANCELLED = {
    "cancel-new-unanswered": ("cancel-request.new-unanswered", "MUST", [[("new", True)]]),
    "cancel-new-leaves-session": ("cancel-request.session-left", "SHOULD", [[("new", True)]]),
    "cancel-load-unanswered": ("cancel-request.lifecycle-unanswered", "MUST", [
        [("new", None), (op, True)] for op in ("load", "resume", "fork")]),
    "cancel-fork-leaves-session": ("cancel-request.session-left", "SHOULD",
                                   [[("new", None), ("fork", True)]]),
    "cancel-load-keeps-prompt": ("cancel-request.session-left", "SHOULD", [
        [("new", None), (op, True), ("prompt", None)] for op in ("load", "resume")]),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bug", sorted(CANCELLED))
def test_a_bug_of_a_cancelled_request_is_found_shrunk_and_replayed(
        bug: str, seed: int, tmp_path: Path, no_orphans: object) -> None:
    oracle, severity, shapes = CANCELLED[bug]
    report = found_and_confirmed(bug, oracle, severity, seed, tmp_path)
    assert [(s["op"], s.get("cancel_request")) for s in report.steps] in shapes, report.steps
    assert len({s["session"] for s in report.steps}) == 1, report.steps
    assert report.cassette is not None
    if seed == 1:
        replays_failed_then_fixed(report.cassette, bug)


def clean_during(spec: TargetSpec, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``steps`` on ``spec`` (calibrated first): no MUST or SHOULD finding; the ``during``
    verdicts."""
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(spec, gateway=gateway)
        history, findings = run_steps(spec, steps, baseline=baseline, gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []
    return [e.data for e in history.events
            if e.kind == "verdict" and e.data.get("what") == "during"]


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_every_request_during_a_turn(
        protocol: str, no_orphans: object) -> None:
    spec = reference(protocol=protocol)
    steps = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": "Review every change for injection flaws first."}]}},
        {"op": "prompt", "session": "A", "during": "cancel"},
        {"op": "prompt", "session": "A", "during": "cancel-request"},
        {"op": "prompt", "session": "A"},
        {"op": "prompt", "session": "A", "during": "fork", "new": "B"},
        {"op": "prompt", "session": "B"},
        {"op": "prompt", "session": "A", "during": "close"}]
    verdicts = clean_during(spec, steps)
    # Each was sent while the model request was held, and each turn but the fork's stopped
    # as cancelled (the $/cancel_request: -32800 in v1, where the prompt was still
    # unanswered; in v2 the prompt was answered before the model was asked, and the turn
    # ran on). The fork was made once the turn had ended, and its copy's turn (judged with
    # the prompt it inherited) found nothing.
    assert [(v["during"], v["held"], v["pending"]) for v in verdicts] == [
        ("cancel", True, protocol == "1"), ("cancel-request", True, protocol == "1"),
        ("fork", True, protocol == "1"), ("close", True, protocol == "1")]
    ends = [v["turn"].get("stopReason", v["turn"].get("code")) for v in verdicts]
    assert ends == (["cancelled", -32800, "end_turn", "cancelled"] if protocol == "1"
                    else ["cancelled", "end_turn", "end_turn", "cancelled"])
    assert verdicts[2]["fork"]["outcome"] == "ok" and verdicts[2]["fork"]["new"] == "B"
    assert isinstance(verdicts[2]["fork"]["sessionId"], str)
    assert verdicts[3]["close"] == {"outcome": "ok"}


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_a_config_switch_and_a_delete_mid_turn(
        protocol: str, no_orphans: object) -> None:
    """A model switch sent while the model is thinking is answered (after the turn), and the
    prompt is in the session's next turn; a delete sent then is answered, the turn ends
    (``end_turn``: the correct agent reads the delete after it, ``delete.handling`` info),
    and a new session in the deleted one's directory does not get its prompt."""
    spec = reference(protocol=protocol, variant="switches")
    steps = [{"op": "new", "session": "A", "cwd": "shared", "systemPrompt": {
        "mode": "append", "content": [{"type": "text", "text": "Cite the line numbers of "
                                                                "every change you review."}]}},
        {"op": "prompt", "session": "A", "during": "set-config"},
        {"op": "prompt", "session": "A"},
        {"op": "prompt", "session": "A", "during": "delete"},
        {"op": "new", "session": "B", "cwd": "shared"},
        {"op": "prompt", "session": "B"}]
    verdicts = clean_during(spec, steps)
    assert [(v["during"], v["held"]) for v in verdicts] == [("set-config", True),
                                                            ("delete", True)]
    assert verdicts[0]["set_config"] == {"outcome": "ok", "configId": "model",
                                         "value": "reference-model-mini"}
    assert verdicts[1]["delete"] == {"outcome": "ok"}
    assert verdicts[1]["turn"] == {"outcome": "ok", "stopReason": "end_turn"}


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_a_cancelled_session_new(
        protocol: str, no_orphans: object) -> None:
    """It answers -32800 and makes nothing (the list probe shows no session); the sessions
    after it are made and used as usual."""
    steps = [{"op": "new", "session": "A", "cancel_request": True},
             {"op": "new", "session": "B", "systemPrompt": {"mode": "append", "content": [
                 {"type": "text", "text": "Review every change for injection flaws first."}]}},
             {"op": "prompt", "session": "B"}, {"op": "list"}]
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(reference(protocol=protocol), gateway=gateway)
        history, findings = run_steps(reference(protocol=protocol), steps, baseline=baseline,
                                      gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []
    replies = [e.data for e in history.events
               if e.kind == "verdict" and e.data.get("what") == "reply"]
    assert replies[0]["outcome"] == "error" and replies[0]["error"]["code"] == -32800
    probe = next(e.data for e in history.events  # the probe after the refused new
                 if e.kind == "verdict" and e.data.get("what") == "probe-list")
    assert probe["step"] == 0 and probe["outcome"] == "ok" and probe["sessions"] == []


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_a_cancelled_load_resume_and_fork(
        protocol: str, no_orphans: object) -> None:
    """It answers each -32800 and changes nothing: the turns after show the session's own
    prompt (not the changed one the cancelled resume carried), the list probe after the fork
    shows no copy, and after a restart a cancelled load leaves the session to the plain load
    after it (in v2 each load is a resume that replays from the start)."""
    def prompt(text: str) -> dict[str, Any]:
        return {"systemPrompt": {"mode": "append", "content": [{"type": "text", "text": text}]}}
    own = prompt("Review every change for injection flaws first.")
    steps = [{"op": "new", "session": "A", **own}, {"op": "prompt", "session": "A"},
             {"op": "load", "session": "A", **own, "cancel_request": True},
             {"op": "prompt", "session": "A"},
             {"op": "resume", "session": "A", "cancel_request": True,
              **prompt("Answer only in French, whatever the question.")},
             {"op": "prompt", "session": "A"},
             {"op": "fork", "session": "A", "new": "B", "cancel_request": True},
             {"op": "prompt", "session": "A"}, {"op": "restart"},
             {"op": "load", "session": "A", **own, "cancel_request": True},
             {"op": "load", "session": "A", **own}, {"op": "prompt", "session": "A"}]
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(reference(protocol=protocol), gateway=gateway)
        history, findings = run_steps(reference(protocol=protocol), steps, baseline=baseline,
                                      gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []
    replies = {e.data["step"]: e.data for e in history.events
               if e.kind == "verdict" and e.data.get("what") == "reply"}
    for i in (2, 4, 6, 9):
        assert replies[i]["outcome"] == "error" and replies[i]["error"]["code"] == -32800
    assert all(replies[i]["outcome"] == "ok" for i in (0, 1, 3, 5, 7, 10, 11)), replies
    probe = next(e.data for e in history.events  # the probe after the refused fork
                 if e.kind == "verdict" and e.data.get("what") == "probe-list")
    assert probe["step"] == 6 and probe["outcome"] == "ok"
    assert probe["sessions"] == [replies[0]["sessionId"]]


@pytest.mark.parametrize("prompt", ["append", "override"])
def test_the_correct_reference_agent_is_clean_under_a_mode_switch_during_a_turn(
        prompt: str, no_orphans: object) -> None:
    """The switches go to plan (which brings an instruction of its own into the defaults),
    then ask, then plan again; each is answered once the turn ended, and the turns after
    each are judged as after a set_mode step."""
    spec = reference(variant="switches")
    steps = [{"op": "new", "session": "A", "systemPrompt": {"mode": prompt, "content": [
        {"type": "text", "text": "Review every change for injection flaws first."}]}},
        {"op": "prompt", "session": "A", "during": "set-mode", "pick": 1},
        {"op": "prompt", "session": "A"},
        {"op": "prompt", "session": "A", "during": "set-mode"},
        {"op": "prompt", "session": "A", "during": "set-mode", "pick": 1},
        {"op": "prompt", "session": "A"}]
    verdicts = clean_during(spec, steps)
    assert [(v["held"], v["pending"], v["turn"], v["set_mode"]) for v in verdicts] == [
        (True, True, {"outcome": "ok", "stopReason": "end_turn"},
         {"outcome": "ok", "modeId": mode}) for mode in ("plan", "ask", "plan")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_second_prompt_left_unanswered_is_found_in_v2_too(
        seed: int, tmp_path: Path, no_orphans: object) -> None:
    bug = "second-prompt-unanswered"
    result = run_campaign(reference(bug, protocol="2"), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed))
    assert result.reports, f"not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert "second-prompt.unanswered" in {f.oracle for f in report.findings
                                          if f.severity == "MUST"}
    assert [(s["op"], s.get("during")) for s in report.steps] == [
        ("new", None), ("prompt", "prompt")], report.steps


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_a_second_prompt_during_a_turn(
        protocol: str, no_orphans: object) -> None:
    """It queues the second prompt (single-threaded: read after the first turn), runs it
    with the session's prompt, and the turns after, and after a resume, carry it too."""
    spec = reference(protocol=protocol)
    steps = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": "Review every change for injection flaws first."}]}},
        {"op": "prompt", "session": "A", "during": "prompt"},
        {"op": "prompt", "session": "A"},
        {"op": "resume", "session": "A"}, {"op": "prompt", "session": "A"}]
    (verdict,) = clean_during(spec, steps)
    assert verdict["held"] and verdict["turn"] == {"outcome": "ok", "stopReason": "end_turn"}
    assert verdict["second"] == {"outcome": "ok", "stopReason": "end_turn", "answered": True,
                                 "overlapped": False}


@pytest.mark.parametrize("protocol", ["1", "2"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_prompt_slot_two_turns_at_once_swap_is_found_and_shrunk_to_those_turns(
        seed: int, protocol: str, tmp_path: Path, no_orphans: object) -> None:
    result = run_campaign(reference("shared-prompt-slot", protocol=protocol), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed))
    assert result.reports, f"not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert "prompt.leak" in {f.oracle for f in report.findings if f.severity == "MUST"}
    assert [(s["op"], s["session"], s.get("with")) for s in report.steps] == [
        ("new", "A", None), ("new", "B", None), ("prompt", "A", "B"), ("prompt", "A", None)], \
        report.steps
    assert report.cassette is not None
    if seed == 1:
        replays_failed_then_fixed(report.cassette, "shared-prompt-slot")


@pytest.mark.parametrize("protocol", ["1", "2"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reattach_during_another_sessions_turn_that_swaps_its_prompt_is_found_and_shrunk(
        seed: int, protocol: str, tmp_path: Path, no_orphans: object) -> None:
    bug = "reattach-swaps-running-prompt"
    result = run_campaign(reference(bug, protocol=protocol), CampaignSettings(
        cassette_dir=tmp_path, max_failures=1, seed=seed))
    assert result.reports, f"not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert "prompt.leak" in {f.oracle for f in report.findings if f.severity == "MUST"}
    shape = [(s["op"], s["session"], s.get("while")) for s in report.steps]
    # new A (P); new B (Q); B reattached while A's turn runs; A's next turn (a close of B
    # before the reattach goes when the agent reattaches an open session too).
    assert shape[:2] == [("new", "A", None), ("new", "B", None)], report.steps
    assert shape[-2][0] in ("load", "resume") and shape[-2][1:] == ("B", "A"), report.steps
    assert shape[-1] == ("prompt", "A", None) and len(shape) == 4, report.steps
    assert report.cassette is not None
    if seed == 1:
        replays_failed_then_fixed(report.cassette, bug)


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_the_correct_reference_agent_is_clean_under_a_reattach_during_another_turn(
        protocol: str, no_orphans: object) -> None:
    """B closed, then loaded (v2: resumed from the start) and resumed, each while A's model
    request is held: both answered after A's turn (one request at a time), and each
    session's next turn carries its own prompt."""
    spec = reference(protocol=protocol)
    steps: list[dict[str, Any]] = [{"op": "new", "session": h, "systemPrompt": {
        "mode": "append", "content": [{"type": "text", "text": f"Session {h}: review every "
                                                                "change for injection flaws."}]}}
        for h in "AB"]
    for op in ("load", "resume"):
        steps += [{"op": "close", "session": "B"},
                  {"op": op, "session": "B", "while": "A",
                   "systemPrompt": steps[1]["systemPrompt"]},
                  {"op": "prompt", "session": "A"}, {"op": "prompt", "session": "B"}]
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(spec, gateway=gateway)
        history, findings = run_steps(spec, steps, baseline=baseline, gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []
    verdicts = [e.data for e in history.events
                if e.kind == "verdict" and e.data.get("what") == "while-turn"]
    assert [(v["session"], v["held"], v["overlapped"], v["turn"]["stopReason"])
            for v in verdicts] == [("A", True, False, "end_turn")] * 2
    ties = [(x.session, x.turn) for _, x in history.model_exchanges()]
    assert ties == [("A", 1), ("A", 2), ("B", 1), ("A", 3), ("A", 4), ("B", 2)]


def test_the_correct_reference_agent_is_clean_with_two_turns_at_once(no_orphans: object) -> None:
    spec = reference()
    steps = [{"op": "new", "session": h, "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": f"Session {h}: review every change for injection flaws."}]}}
        for h in "AB"] + [{"op": "prompt", "session": "A", "with": "B"},
                          {"op": "prompt", "session": "A"}, {"op": "prompt", "session": "B"}]
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(spec, gateway=gateway)
        history, findings = run_steps(spec, steps, baseline=baseline, gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []
    (together,) = [e.data for e in history.events
                   if e.kind == "verdict" and e.data.get("what") == "together"]
    assert together["held"] and together["turn"]["stopReason"] == "end_turn"
    assert together["overlapped"] is False  # one turn at a time: B's waited for A's
    assert together["with"]["stopReason"] == "end_turn"
    ties = [(x.session, x.turn) for _, x in history.model_exchanges()]
    assert ties == [("A", 1), ("B", 1), ("A", 2), ("B", 2)]


@pytest.mark.parametrize("during", ["cancel", "close", "cancel-request"])
@pytest.mark.parametrize("protocol", ["1", "2"])
def test_a_turn_cancelled_during_it_is_not_owed_to_the_conversation(
        during: str, protocol: str, no_orphans: object) -> None:
    """An agent may drop a cancelled turn from the conversation (the reference agent does):
    after a resume, its absence is no ``session.history-lost``. A v2 campaign once reported
    one after a turn cancelled by a close while the model was thinking."""
    spec = reference(protocol=protocol)
    steps = [{"op": "new", "session": "A"}, {"op": "prompt", "session": "A"},
             {"op": "prompt", "session": "A", "during": during},
             {"op": "resume", "session": "A"}, {"op": "prompt", "session": "A"}]
    with Gateway(History()) as gateway:
        _, _, baseline = calibrate(spec, gateway=gateway)
        _, findings = run_steps(spec, steps, baseline=baseline, gateway=gateway)
    assert [f for f in findings if f.severity != "info"] == []


#: A scripted agent that answers requests while its turns wait on the model (one thread per
#: turn), as the real agents do; ``drop-on-load``: a load, slower than the old settle, drops
#: every other session's running turn (pi-acp 0.0.34's ``closeAllExcept``).
CONCURRENT = [sys.executable, str(Path(__file__).resolve().parents[1] / "hostile_agents"
                                  / "concurrent.py")]


def test_a_load_that_drops_a_running_turn_is_found_and_replays_the_same_every_time(
        tmp_path: Path, no_orphans: object) -> None:
    """Calibration learns that the agent answers requests during a turn, so a load sent while
    another session's turn runs keeps that turn's model request held until the load is
    answered: the load's drop of the turn is then the agent's doing at every run, not a race
    with a quarter-second settle it lost two times in three (pi-acp, docs/findings.md
    2026-12-06). Found as ``agent.hang`` (MUST), confirmed 3/3, shrunk to new A; new B; load
    B while A's turn runs, and the cassette replays FAILED 2/2, FIXED against the agent
    whose load drops nothing."""
    spec = dataclasses.replace(TargetSpec.from_command([*CONCURRENT, "drop-on-load"]),
                               request_timeout=TIMEOUT)
    result = run_campaign(spec, CampaignSettings(cassette_dir=tmp_path, max_failures=1,
                                                 seed=1))
    assert result.learned is not None and result.learned.concurrent is True
    assert result.reports, f"not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    assert [f.oracle for f in report.findings if f.severity == "MUST"] == ["agent.hang"]
    assert [(s["op"], s.get("while")) for s in report.steps] == [
        ("new", None), ("new", None), ("load", "A")], report.steps
    assert report.cassette is not None
    again = replay_cassette(report.cassette, target=[*CONCURRENT, "drop-on-load"], runs=2,
                            timeout=TIMEOUT)
    assert again.verdict == "FAILED" and again.reproduced == 2, again.line()
    assert replay_cassette(report.cassette, target=CONCURRENT).verdict == "FIXED"
