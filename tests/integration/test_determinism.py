"""The same seed and the same agent give the same run: same examples, same steps, same
minimal reproduction (pre-spawning on or off)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import (
    CampaignEvent,
    CampaignSettings,
    ExampleDone,
    run_campaign,
)

pytestmark = pytest.mark.integration


def fingerprint(tmp: Path, *, prespawn: bool, seed: int = 3, cover: bool = True
                ) -> tuple[Any, ...]:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                    "--bug", "user-turn"])
    trail: list[int] = []  # steps run so far, after each example: the shape of the search

    def on_event(e: CampaignEvent) -> None:
        if isinstance(e, ExampleDone):
            trail.append(e.steps)

    r = run_campaign(spec, CampaignSettings(max_examples=20, seed=seed, shrink_examples=10,
                                            prespawn=prespawn, cassette_dir=tmp,
                                            cover=cover), on_event)
    return (r.examples_run, r.steps_run, trail,
            [(rep.status, rep.oracles, rep.steps) for rep in r.reports])


@pytest.mark.slow
def test_same_seed_same_run(tmp_path: Path, no_orphans: object) -> None:
    first = fingerprint(tmp_path / "a", prespawn=True)
    assert first[3], "the planted bug was not found"
    assert fingerprint(tmp_path / "b", prespawn=False) == first


@pytest.mark.slow
def test_another_seed_explores_differently(tmp_path: Path, no_orphans: object) -> None:
    # The seed is really used: a different one draws a different campaign.
    # (Comparing only the counts once failed by coincidence: 13 examples and 67 steps at both
    # seeds. The trail of steps per example does not coincide.)
    # Without the covering examples, which are the same at every seed by design (and now
    # outnumber these 20 examples): the search alone is what the seed draws.
    assert fingerprint(tmp_path / "a", prespawn=True, seed=3, cover=False)[2] != \
        fingerprint(tmp_path / "b", prespawn=True, seed=4, cover=False)[2]
