"""A campaign reaches compaction (issue #22 §1), end to end against the reference agent.

``--variant compacting`` advertises ``/compact`` and compacts by itself when the fake model
reports its context nearly full or answers with the context-length error (profile
``reference-compacting``); ``--variant defer-until-compaction`` also holds a changed prompt
back until then. A short campaign against each sends a ``compact`` step of every kind, the
agent's summary request is recorded as a compaction's side request tied to its session, and
the turn after it still carries the session's prompt in its system slot. Both agents are
correct: the campaign reports nothing that fails.

What the campaign's histories held is read by a check of the test's own (``acp_fuzz.check``),
which sees every event of every example as the oracles do, and reports nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_fuzz import CheckContext, check
from acp_fuzz.core.checks import unregister
from acp_fuzz.core.history import Event
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

ID = "test.compaction-seen"
#: What the campaign's histories held (see the module docs).
SEEN: Counter[str] = Counter()
#: Per history (check context) and session: a summary request was seen, and no turn since.
_COMPACTED: set[tuple[int, str]] = set()


@pytest.fixture
def recorded() -> Iterator[Counter[str]]:
    SEEN.clear()
    _COMPACTED.clear()

    @check(ID, severity="info", rule="ACPFUZZ-TEST", summary="what compaction did (a test's)")
    def seen(ctx: CheckContext, event: Event) -> None:
        if event.kind == "step" and event.data.get("args", {}).get("op") == "compact":
            SEEN[f"step:{event.data['args'].get('by')}"] += 1
        if event.kind != "model":
            return
        x = ctx.exchange(event)
        if x.session is None:
            return
        if x.side_kind == "compaction":
            SEEN["summary"] += 1
            _COMPACTED.add((id(ctx), x.session))
        elif not x.side and x.status == 200 and (id(ctx), x.session) in _COMPACTED:
            _COMPACTED.discard((id(ctx), x.session))
            blocks = ctx.client_blocks(x.session)
            if blocks:
                system = "\n".join(x.texts("system"))
                held = any(b in system for b in blocks)
                SEEN["turn after, prompt kept" if held else "turn after, prompt gone"] += 1

    yield SEEN
    unregister(ID)


def compacting(variant: str, protocol: str) -> TargetSpec:
    return TargetSpec.from_profile(
        "reference-compacting", protocol=protocol,
        command=[sys.executable, "-m", "acp_fuzz.reference_agent", "--variant", variant])


@pytest.mark.parametrize("protocol", ["1", "2"])
@pytest.mark.parametrize("variant", ["compacting", "defer-until-compaction"])
def test_a_short_campaign_compacts_every_way_and_keeps_the_prompt(
        variant: str, protocol: str, tmp_path: Path, recorded: Counter[str]) -> None:
    result = run_campaign(compacting(variant, protocol), CampaignSettings(
        cassette_dir=tmp_path / "cassettes", seed=0, max_examples=30))
    # Every kind of compaction, and one after a live change, within the covering examples.
    keys = ("compact:command", "compact:usage", "compact:overflow", "compact:after-change")
    assert all(k in result.coverage for k in keys), result.coverage
    assert max(result.coverage[k] for k in keys) <= result.covering_examples
    assert min(recorded[f"step:{by}"] for by in ("command", "usage", "overflow")) >= 1
    # Each compaction sent its summary, recognised by the profile's rule and tied.
    assert recorded["summary"] >= 3
    # The turns after a compaction carried the session's prompt (the covering examples' P).
    assert recorded["turn after, prompt kept"] >= 3, recorded
    # A correct agent: nothing fails.
    assert result.exit_code == 0 and not result.reports, [r.oracles for r in result.reports]
