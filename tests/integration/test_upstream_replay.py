"""A campaign against a real model upstream replays offline from its cassette.

The "real provider" is a second, real Gateway with a reply text of its own. The campaign
forwards to it (``model_upstream``) and vcrpy records the calls into the finding cassette;
the replay then runs with the provider stopped and must see the same replies.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign.replay import replay_cassette
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign
from acp_fuzz.engine.gateway import Gateway

pytestmark = pytest.mark.integration

REPLY = "REAL-PROVIDER-REPLY-7f3a"
BUGGY = [sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "user-turn"]


@pytest.mark.slow
def test_upstream_calls_are_recorded_and_replayed_offline(tmp_path: Path,
                                                          no_orphans: object) -> None:
    # A stand-in for a real provider: it gets the front gateway's token, not its own.
    with Gateway(None, reply_text=REPLY, require_token=False) as provider:
        result = run_campaign(TargetSpec.from_command(BUGGY), CampaignSettings(
            max_examples=30, cassette_dir=tmp_path, model_upstream=provider.url))
    assert result.reports, "user-turn not found"
    cassette = result.reports[0].cassette
    assert cassette is not None
    c = read_cassette(cassette)
    assert "vcr" in c.attachments
    # The cassette's model events are upstream exchanges that carried the provider's reply.
    replies = [e.data["reply_text"] for e in c.events if e.kind == "model"]
    assert replies and all(REPLY in r for r in replies)
    assert all(e.data["upstream"] for e in c.events if e.kind == "model")
    # The provider is gone now: the replay is served from the recording alone, once the
    # user opts in to the recorded replies.
    res = replay_cassette(cassette, target=BUGGY, recorded_model_replies=True)
    assert res.verdict == "FAILED", res.line()
    seen = json.dumps([[*s.ordered, *s.unordered] for t in res.transcripts for s in t])
    assert REPLY in seen
