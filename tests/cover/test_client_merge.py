"""``acp-fuzz client --workers N``: the covering sets shared between the workers, and one
result from theirs (ClientCampaignResult.merge), field by field."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.engine.campaign.merging import COMMON
from acp_fuzz.engine.campaign.workers import worker_share
from acp_fuzz.engine.client.campaign import (
    _CLIENT_MERGERS,
    CLIENT_MERGE,
    ClientCampaignResult,
    ClientReport,
    ClientSettings,
    covering_share,
)

SCENARIO = Scenario(("client", "{agent}"))


def test_every_client_result_field_says_how_it_merges() -> None:
    """A field added to ClientCampaignResult without a merge policy fails here, not in a
    user's ``client --workers`` run."""
    assert sorted(f.name for f in dataclasses.fields(ClientCampaignResult)) == \
        sorted(CLIENT_MERGE)
    assert set(CLIENT_MERGE.values()) - set(COMMON) - set(_CLIENT_MERGERS) <= {
        "first", "given", "derived"}


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5])
def test_each_covering_set_runs_in_exactly_one_worker(workers: int) -> None:
    ran = [caps for i in range(workers)
           for caps in covering_share(worker_share((0, 1), i, workers))]
    assert sorted(ran, key=repr) == sorted(CapabilitySet.covering(), key=repr)
    assert covering_share((0, 1)) == CapabilitySet.covering()


def test_a_share_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="cover_share"):
        ClientSettings(cover_share=(2, 2))


def _report(*oracles: str) -> ClientReport:
    return ClientReport(status="failed", runs=3, reproduced=3, caps=CapabilitySet(),
                        findings=[Finding(o, "MUST", "RULE", "bad") for o in oracles])


def test_merge_sums_counts_and_reports_each_failure_once() -> None:
    cfg = ClientSettings(max_examples=10)
    hint = Finding("client.hint", "INFO", "RULE", "note")
    a = ClientCampaignResult(
        ClientSettings(seed=0), SCENARIO, examples_run=5, runs=8, timeouts=1,
        reports=[_report("client.a")], info=[hint],
        judged=Counter({("client.a", "R"): 2}), initialize=None, client_info=None)
    b = ClientCampaignResult(
        ClientSettings(seed=1), SCENARIO, examples_run=4, runs=6, interrupted=True,
        reports=[_report("client.a"), _report("client.b")], info=[hint],
        judged=Counter({("client.a", "R"): 1, ("client.b", "R"): 1}),
        initialize={"protocolVersion": 1}, client_info={"name": "c"})
    out = ClientCampaignResult.merge([a, b], cfg)
    assert out.settings is cfg and out.scenario == SCENARIO
    assert (out.examples_run, out.runs, out.timeouts) == (9, 14, 1)
    assert [r.oracles for r in out.reports] == [("client.a",), ("client.b",)]
    assert out.reports[0] is a.reports[0]
    assert out.info == [hint]
    assert out.judged == Counter({("client.a", "R"): 3, ("client.b", "R"): 1})
    assert (out.interrupted, out.out_of_time) == (True, False)
    assert (out.initialize, out.client_info) == ({"protocolVersion": 1}, {"name": "c"})
    assert out.exit_code == 130
