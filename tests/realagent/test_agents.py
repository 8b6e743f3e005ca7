"""Pinned real agents, driven end to end against the fake model gateway (offline)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from acp_fuzz.engine.agents.profiles import get_profile
from tests.realagent._support import CANARY, FIXTURES, SESSION, installed_profile, run_session

pytestmark = pytest.mark.realagent

#: (profile, expected sessionCapabilities.systemPrompt, path of the client text in turn requests)
EXPECTED: dict[str, tuple[dict[str, Any], str]] = {
    "codex-acp": ({}, "input[1].content[0].text"),
    "claude-agent-acp": ({"mode": {"override": {}}}, "system[2].text"),
}


def _session(name: str, tmp_path_factory: pytest.TempPathFactory, mode: str) -> dict[str, Any]:
    profile, _ = installed_profile(name)
    return run_session(profile, tmp_path_factory.mktemp(f"{name}-{mode}"), mode, min_side=1)


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def appended(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield _session(request.param, tmp_path_factory, "append")


def test_initialize_matches_fixture_and_advertises_system_prompt(appended: dict[str, Any]) -> None:
    name = appended["profile"]
    init = appended["initialize"]
    assert init["outcome"] == "ok", init
    caps = init["result"]["agentCapabilities"]["sessionCapabilities"]
    assert caps["systemPrompt"] == EXPECTED[name][0]
    fixture = json.loads((FIXTURES / f"{name}.initialize.json").read_text(encoding="utf-8"))
    assert init["result"] == fixture


def test_append_prompt_lands_in_system_slot_of_every_turn_request(
        appended: dict[str, Any]) -> None:
    name = appended["profile"]
    assert appended["new"]["outcome"] == "ok", appended["new"]
    assert appended["prompt"]["outcome"] == "ok", (appended["prompt"], appended["stderr_tail"])
    assert appended["prompt"]["result"]["stopReason"] == "end_turn"
    turns = [x for x in appended["exchanges"] if not x["side"]]
    assert turns, appended["exchanges"]
    for x in turns:
        # Tied to the harness session through the nonce in the newest user turn.
        assert (x["session"], x["turn"]) == (SESSION, 1)
        assert x["nonce"][-1]["slot"] == "user"
        # The client text sits in the system slot, exactly once, where we measured it.
        assert [(c["slot"], c["path"]) for c in x["canary"]] == [("system", EXPECTED[name][1])]
    if name == "claude-agent-acp":
        # append keeps Claude Code's preset and adds our text after it
        text = turns[0]["canary"][0]["text"]
        assert text.rstrip().endswith(CANARY) and len(text) > 2 * len(CANARY)
    else:
        assert turns[0]["canary"][0]["text"] == CANARY  # its own input_text part


def test_side_requests_are_flagged_and_info_chunks_recognised(appended: dict[str, Any]) -> None:
    profile = get_profile(appended["profile"])
    side = [x for x in appended["exchanges"] if x["side"]]
    assert side, "expected a title request on the first turn of a new session"
    for x in side:
        assert x["canary"] == [], "the title request should not carry the client prompt"
    replies = [c for c in appended["chunks"] if not profile.info_message(c)]
    infos = [c for c in appended["chunks"] if profile.info_message(c)]
    assert "".join(replies).strip() == "ok"
    assert infos, appended["chunks"]


def test_claude_override_replaces_the_preset(tmp_path_factory: pytest.TempPathFactory) -> None:
    summary = _session("claude-agent-acp", tmp_path_factory, "override")
    assert summary["prompt"]["outcome"] == "ok", summary["prompt"]
    turns = [x for x in summary["exchanges"] if not x["side"]]
    assert turns
    for x in turns:
        assert [(c["path"], c["text"]) for c in x["canary"]] == [("system[2].text", CANARY)]


def test_gemini_without_capability_ignores_system_prompt(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    summary = _session("gemini-cli", tmp_path_factory, "append")
    caps = summary["initialize"]["result"]["agentCapabilities"]
    assert "sessionCapabilities" not in caps
    fixture = json.loads((FIXTURES / "gemini-cli.initialize.json").read_text(encoding="utf-8"))
    assert summary["initialize"]["result"] == fixture
    # Not advertised: the field is dropped silently and the session still works.
    assert summary["new"]["outcome"] == "ok"
    assert summary["prompt"]["outcome"] == "ok", summary["prompt"]
    assert all(x["canary"] == [] for x in summary["exchanges"])
    assert [x["side"] for x in summary["exchanges"]].count(False) >= 1

