"""The fake model gateway serves only the agent under test.

Another local process could otherwise post model requests of its own to the gateway of a run
(its port is easy to find) and so forge findings ("the prompt reached the model twice") or
hide them. Each gateway makes a random token that the agent gets as its SDK keys; a request
without it is refused and recorded. The turn nonces in the prompts carry a per-run salt, so a
request that copies the public recipe of a prompt is not taken for the agent's turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import anthropic
import openai
import pytest

from acp_fuzz.core.cassette import Cassette, Header
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.timeline import render_timeline
from tests.security._isolation import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SPEC = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
SP = {"mode": "append", "content": [{"type": "text", "text": "Answer like a ship's captain."}]}
FORGED = "FORGED-SYSTEM-PROMPT-5c1e"


@pytest.fixture
def run(no_orphans: object) -> Iterator[Run]:
    """A live run of the reference agent that has made one turn of session A."""
    with Run(SPEC) as live:
        live.initialize()
        live.execute({"op": "new", "session": "A", "systemPrompt": SP})
        assert live.execute({"op": "prompt", "session": "A"}).outcome == "ok"
        yield live


def _refused(run: Run) -> list[int]:
    return [x.status for _, x in run.history.model_exchanges() if x.status == 401]


def test_request_without_the_token_is_refused_and_recorded(run: Run) -> None:
    assert run.gateway is not None
    url = run.gateway.url
    # The agent itself got through with the token its environment carries.
    assert [x.status for _, x in run.history.model_exchanges()] == [200]
    client = openai.OpenAI(base_url=url + "/v1", api_key="acp-fuzz-dummy-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": FORGED}, {"role": "user", "content": "hi"}])
    other = anthropic.Anthropic(base_url=url, api_key="guess", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        other.messages.create(model="m", max_tokens=8, system=FORGED,
                              messages=[{"role": "user", "content": "hi"}])
    assert _refused(run) == [401, 401]
    assert run.gateway.counts["refused"] == 2
    # Refused requests are evidence of an intruder, never model text to judge.
    dumped = json.dumps([e.to_wire() for e in run.history.snapshot()])
    assert FORGED not in dumped
    assert all(x.side and x.session is None
               for _, x in run.history.model_exchanges() if x.status == 401)
    # ... and `acp-fuzz show` says what they were.
    shown = "\n".join(render_timeline(Cassette(Header(target=[]), run.history.snapshot())))
    assert shown.count("HTTP 401 (refused: no gateway token)") == 2


def test_the_token_is_per_gateway_and_is_every_sdk_key(run: Run) -> None:
    assert run.gateway is not None
    token = getattr(run.gateway, "token", None)
    assert isinstance(token, str) and len(token) >= 32
    env = run.gateway.agent_env()
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        assert env[name] == token
    # Accepted the way each SDK sends it: bearer, x-api-key, x-goog-api-key, ?key=.
    ok = anthropic.Anthropic(base_url=run.gateway.url, api_key=token, max_retries=0)
    assert ok.messages.create(model="m", max_tokens=8,
                              messages=[{"role": "user", "content": "hi"}]).content
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    path = "/v1beta/models/m:generateContent"
    for query, headers in (("", {"x-goog-api-key": token}), (f"?key={token}", {}),
                           ("", {"x-goog-api-key": "wrong"})):
        req = urllib.request.Request(run.gateway.url + path + query, data=body,
                                     headers={"content-type": "application/json", **headers})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
        except urllib.error.HTTPError as err:
            assert err.code == 401 and headers == {"x-goog-api-key": "wrong"}
    assert _refused(run) == [401]


FORGER = r"""
import json, sys
import openai
from acp_fuzz.core.steps import prompt_text
url, token, forged = sys.argv[1:4]
client = openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0)
# The public recipe of the harness's first prompt of session A, under a system prompt of ours.
client.chat.completions.create(model="m", messages=[
    {"role": "system", "content": forged}, {"role": "user", "content": prompt_text("A", 1)}])
"""


def test_a_forged_turn_marker_from_another_process_is_not_tied_to_a_session(run: Run) -> None:
    assert run.gateway is not None
    # Even with the token (say it was read from the agent's environment), the forger cannot
    # compute this run's nonce: its request is not taken for turn 1 of session A.
    token = getattr(run.gateway, "token", "none")
    subprocess.run([sys.executable, "-c", FORGER, run.gateway.url, token, FORGED], cwd=REPO,
                   env={**os.environ}, check=True, timeout=60)
    forged = [x for _, x in run.history.model_exchanges() if FORGED in x.texts("system")]
    assert len(forged) == 1
    assert (forged[0].session, forged[0].turn) == (None, None)
    assert forged[0].side
    # The agent's own turn is still tied.
    assert [(x.session, x.turn) for _, x in run.history.model_exchanges()
            if FORGED not in x.texts("system")] == [("A", 1)]
