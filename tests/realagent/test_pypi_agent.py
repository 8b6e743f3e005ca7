"""hermes-agent 0.19.0, the pinned PyPI agent (``[install] pypi``: a venv of its own), driven
end to end against the fake model gateway (offline).

It advertises no ``systemPrompt`` capability, and what it really does with the field is drop
it: ``session/new`` answers as usual, the turn reaches the model with hermes' own prompt in
the system slot (``messages[0]``, role ``system``, "You are Hermes Agent...") and the client's
text nowhere. Its title request (a background thread after the first exchange) quotes the
prompt, nonce and all, in its newest user message; the profile's side rule keeps it from
being tied as a second turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.realagent._support import FIXTURES, SESSION, installed_profile, run_session

pytestmark = pytest.mark.realagent

NAME = "hermes-agent"


@pytest.fixture(scope="module")
def appended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    profile, directory = installed_profile(NAME)
    assert (directory / "venv" / "bin" / "hermes-acp").exists()
    yield run_session(profile, tmp_path_factory.mktemp(NAME), "append", min_side=1)


def test_initialize_matches_fixture_and_advertises_no_system_prompt(
        appended: dict[str, Any]) -> None:
    init = appended["initialize"]
    assert init["outcome"] == "ok", (init, appended["stderr_tail"])
    caps = init["result"]["agentCapabilities"]
    assert "systemPrompt" not in caps["sessionCapabilities"]
    fixture = json.loads((FIXTURES / f"{NAME}.initialize.json").read_text(encoding="utf-8"))
    assert init["result"] == fixture


def test_the_client_prompt_is_dropped_and_its_own_fills_the_system_slot(
        appended: dict[str, Any]) -> None:
    assert appended["new"]["outcome"] == "ok", appended["new"]
    assert appended["prompt"]["outcome"] == "ok", (appended["prompt"], appended["stderr_tail"])
    assert appended["prompt"]["result"]["stopReason"] == "end_turn"
    assert "".join(appended["chunks"]).strip() == "ok"
    turns = [x for x in appended["exchanges"] if not x["side"]]
    assert len(turns) == 1, appended["exchanges"]
    (turn,) = turns
    assert (turn["api"], turn["path"], turn["model"]) == (
        "openai.chat", "/v1/chat/completions", "fake-model")
    assert (turn["session"], turn["turn"]) == (SESSION, 1)
    assert turn["nonce"] == [{"slot": "user", "path": "messages[1].content"}]
    # Its own instructions, one system message, and the client's text in no slot at all.
    assert [s["path"] for s in turn["system"]] == ["messages[0].content"]
    assert turn["system"][0]["text"].startswith("You are Hermes Agent")
    assert all(x["canary"] == [] for x in appended["exchanges"])


def test_the_title_request_quotes_the_prompt_and_is_a_side_request(
        appended: dict[str, Any]) -> None:
    titles = [x for x in appended["exchanges"] if x["side"] and x["api"] == "openai.chat"]
    assert titles, appended["exchanges"]
    for x in titles:
        assert x["system"][0]["text"].startswith("Generate a short, descriptive title")
        # The nonce is in its newest user message: only the side rule keeps it untied.
        assert x["nonce"] == [{"slot": "user", "path": "messages[1].content"}]
        assert x["canary"] == []
