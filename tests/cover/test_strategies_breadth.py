"""Payload breadth (issue #10 §6), pure: the strategies draw vendor carriers beside the standard
prompt, decorations that must change nothing, and more invalid shapes, and the classifier
files each one where the oracles expect it."""

from __future__ import annotations

from typing import Any

from acp_fuzz.strategies.lifecycle import TITLES
from acp_fuzz.strategies.payloads import (
    MODE_SPELLINGS,
    VENDOR_CARRIERS,
    decorated,
    invalid_system_prompts,
    valid_system_prompts,
    vendor_meta,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_fuzz.core.lifecycle import Lifecycle
from acp_fuzz.core.payloads import OMIT, Capabilities, blocks_of, classify
from acp_fuzz.core.steps import validate_step

CAPS = Capabilities(system_prompt=True, override=True)
CANARY = "[acp-fuzz canary A1]"


def _all(strategy: st.SearchStrategy[Any], n: int = 400) -> list[Any]:
    out: list[Any] = []

    @settings(max_examples=n, database=None, derandomize=True)
    @given(strategy)
    def collect(v: Any) -> None:
        out.append(v)

    collect()
    return out


def test_every_vendor_carrier_is_drawn_with_a_text_of_its_own() -> None:
    metas = _all(vendor_meta(CANARY), 60)
    carriers = set()
    for m in metas:
        if isinstance(m.get("systemPrompt"), str):
            carriers.add("systemPrompt")
            text = m["systemPrompt"]
        elif isinstance(m.get("systemPrompt"), dict):
            carriers.add("systemPrompt.append")
            text = m["systemPrompt"]["append"]
        else:
            carriers.add("claudeCode.options.systemPrompt")
            text = m["claudeCode"]["options"]["systemPrompt"]
        assert CANARY in text and "vendor" in text
    assert carriers == set(VENDOR_CARRIERS)


def test_decorations_keep_a_prompt_valid_and_its_blocks_unchanged() -> None:
    base = {"mode": "append", "content": [{"type": "text", "text": f"Be brief. {CANARY}"}]}
    seen = set()
    for sp in _all(decorated(base, CANARY), 60):
        assert classify(sp, CAPS).kind == "valid", sp
        assert blocks_of(sp) == blocks_of(base)
        seen.add(frozenset(sp) | frozenset(sp["content"][-1]))
    assert any("_meta" in k for k in seen) and any("annotations" in k for k in seen)


def test_the_new_invalid_shapes_are_drawn_and_classified_invalid() -> None:
    reasons = set()
    for sp in _all(invalid_system_prompts(override=True, canary=CANARY), 600):
        c = classify(sp, CAPS)
        assert c.kind == "invalid", sp
        reasons.add(c.reason)
        if isinstance(sp, dict) and sp.get("mode") in MODE_SPELLINGS:
            assert c.reason == "mode-unknown"
    assert {"block-not-object", "not-object", "mode-unknown"} <= reasons


def test_the_valid_strategy_is_unchanged_by_breadth() -> None:
    for sp in _all(valid_system_prompts(override=True, canary=CANARY, long=False), 50):
        assert set(sp) == {"mode", "content"}


def _drawn(caps: Capabilities, n: int = 40) -> list[dict[str, Any]]:
    return [step for example in _examples(caps, n) for step in example]


def _examples(caps: Capabilities, n: int = 40) -> list[list[dict[str, Any]]]:
    """What the lifecycle machine draws for ``caps``: ``n`` examples, each its steps."""
    from hypothesis import HealthCheck
    from hypothesis.stateful import run_state_machine_as_test

    from acp_fuzz.engine.campaign.literals import no_source_literals
    from acp_fuzz.strategies import LifecycleMachine

    seen: list[list[dict[str, Any]]] = []

    class Recorder(LifecycleMachine):
        def __init__(self) -> None:
            super().__init__()
            seen.append([])

        def execute(self, step: dict[str, Any]) -> None:
            seen[-1].append(step)

    Recorder.caps = caps
    Recorder.long_texts = False  # the ops are what is looked at, not 64 KiB texts
    with no_source_literals():  # as a campaign draws: the same in every process
        run_state_machine_as_test(Recorder, settings=settings(
            max_examples=n, stateful_step_count=25, derandomize=True, database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck)))
    return seen


def test_switches_are_drawn_only_for_an_agent_that_offers_them_and_a_turn_follows() -> None:
    full = dict(system_prompt=True, load=True, resume=True, close=True, list=True)
    drawn = _drawn(Capabilities(**full, set_mode=True, set_config_option=True))
    switches = [i for i, s in enumerate(drawn) if s["op"] in ("set_mode", "set_config_option")]
    assert {drawn[i]["op"] for i in switches} == {"set_mode", "set_config_option"}
    for i in switches:
        assert drawn[i + 1] == {"op": "prompt", "session": drawn[i]["session"]}
    # Some mode switches go out while a turn runs (its model request held), a turn after.
    held = [i for i, s in enumerate(drawn) if s.get("during") == "set-mode"]
    assert held
    for i in held:
        assert drawn[i + 1] == {"op": "prompt", "session": drawn[i]["session"]}
        assert 0 <= drawn[i]["pick"] <= 3
    assert not any(s["op"] in ("set_mode", "set_config_option") or s.get("during") == "set-mode"
                   for s in _drawn(Capabilities(**full)))


def test_other_directories_are_drawn_only_for_an_agent_that_advertises_them() -> None:
    """Loads, resumes and forks in a new directory or with extra roots, for an agent with
    ``additionalDirectories``; none for one without (it draws exactly as before)."""
    full = dict(system_prompt=True, load=True, resume=True, fork=True, close=True, list=True)
    plain = _drawn(Capabilities(**full))
    assert not any("roots" in s or s.get("cwd") == "moved" for s in plain)
    # 50: one new session in four names the MCP server (a draw more), and at 40 no fork went
    # to another directory.
    drawn = _drawn(Capabilities(**full, additional_directories=True), 50)
    moved = {s["op"] for s in drawn if s.get("cwd") == "moved"}
    rooted = {s["op"] for s in drawn if s.get("roots")}
    assert moved == rooted == {"load", "resume", "fork"}, (moved, rooted)
    assert {s["roots"] for s in drawn if "roots" in s} == {1, 2}
    for s in drawn:  # every drawn step is one the runner accepts
        validate_step(s)


def test_retitles_are_drawn_only_for_an_agent_that_advertises_titles() -> None:
    """A retitle names any session that exists, open or not, and is followed by a turn on it
    when it is open: what it did to the prompt shows there."""
    full = dict(system_prompt=True, load=True, resume=True, close=True, list=True)
    assert not any(s["op"] == "set_title" for s in _drawn(Capabilities(**full)))
    retitled = {"open": 0, "not open": 0}
    caps = Capabilities(**full, title=True)
    for drawn in _examples(caps):
        life = Lifecycle()
        for i, step in enumerate(drawn):
            if step["op"] == "set_title":
                assert step["title"] in TITLES
                assert life.exists(step["session"])
                if life.is_open(step["session"]):
                    retitled["open"] += 1
                    assert drawn[i + 1] == {"op": "prompt", "session": step["session"]}
                else:
                    retitled["not open"] += 1
            # As the machine does: a request with an invalid prompt is refused.
            life.apply(step, accepted=classify(step.get("systemPrompt", OMIT), caps,
                                               extra_params=step.get("extra")).kind != "invalid")
    assert retitled["open"] and retitled["not open"], retitled



def test_a_turn_at_once_is_another_sessions_or_the_sessions_own_next_one() -> None:
    """Where another session is open, a turn may go out with another session's turn at once
    (``with``), or with a second prompt of its own session (``during: prompt``), the choice
    among ``[*others, handle]``; each is followed by a turn of every session it involved."""
    from acp_fuzz.strategies import LifecycleMachine

    class Pick:
        def __init__(self, choice: str) -> None:
            self.choice = choice
            self.offered: list[Any] = []

        def draw(self, strategy: Any, label: str = "") -> Any:
            self.offered = list(strategy.elements)
            return self.choice

    for choice, expected in (("B", [{"op": "prompt", "session": "A", "with": "B"},
                                     {"op": "prompt", "session": "A"},
                                     {"op": "prompt", "session": "B"}]),
                             ("A", [{"op": "prompt", "session": "A", "during": "prompt"},
                                    {"op": "prompt", "session": "A"}])):
        sent: list[dict[str, Any]] = []
        machine = LifecycleMachine.__new__(LifecycleMachine)
        machine._send = sent.append  # type: ignore[method-assign,assignment]
        data = Pick(choice)
        machine._together(data, "A", ["B"])  # type: ignore[arg-type]
        assert data.offered == ["B", "A"]
        assert sent == expected


def test_a_new_load_resume_or_fork_is_now_and_then_drawn_with_its_cancel_request() -> None:
    """One new, load, resume or fork in CANCEL_REQUEST_EVERY goes out with its
    ``$/cancel_request`` right behind it (never a busy reattach); a turn follows a cancelled
    reattach of an open session and a cancelled fork (of its source)."""
    full = dict(system_prompt=True, load=True, resume=True, fork=True, close=True, list=True)
    drawn = _drawn(Capabilities(**full), 100)
    cancelled = [i for i, s in enumerate(drawn) if s.get("cancel_request")]
    assert {drawn[i]["op"] for i in cancelled} == {"new", "load", "resume", "fork"}
    assert len(cancelled) < len([s for s in drawn if s["op"] in ("new", "load", "resume",
                                                                 "fork")]) / 6
    for i in cancelled:
        validate_step(drawn[i])
        if drawn[i]["op"] == "fork":
            assert drawn[i + 1] == {"op": "prompt", "session": drawn[i]["session"]}
