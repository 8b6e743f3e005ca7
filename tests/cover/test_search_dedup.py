"""The campaign's search reports each bug once: a failing example that a known reproduction
explains is not shrunk again, and an oracle whose failures keep shrinking into a known
reproduction stops costing a shrink, but only beside the bug it came with."""

from __future__ import annotations

from typing import Any, cast

import pytest

from acp_fuzz.core.minimize import shape_of
from acp_fuzz.engine.campaign.search import DUPLICATE_SHRINKS, SearchState, _Known

LEAK_SHAPE = shape_of([{"op": "new", "session": "A", "systemPrompt": {"mode": "append",
                                                                    "content": []}},
                       {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}])
#: An example that fails with the leak and more, in a shape the known reproduction is not in.
OTHER = [{"op": "new", "session": "A"}, {"op": "prompt", "session": "A"}]


def search(duplicates: dict[str, int]) -> SearchState:
    unused = cast(Any, None)  # explained() reads only what it found so far
    return SearchState(spec=unused, cfg=unused, baseline=unused, warm=unused, result=unused,
                       on_event=unused,
                       known=[_Known(LEAK_SHAPE, frozenset({"prompt.leak"}), None)],
                       duplicates=duplicates)


def test_a_known_oracle_is_shrunk_again_until_it_has_shrunk_into_known_ones() -> None:
    assert not search({"prompt.leak": DUPLICATE_SHRINKS - 1}).explained(OTHER, {"prompt.leak"})
    assert search({"prompt.leak": DUPLICATE_SHRINKS}).explained(OTHER, {"prompt.leak"})


def test_an_oracle_that_rode_along_with_a_known_bug_is_covered_beside_it() -> None:
    # The README's run: a global prompt leaks into B and is lost from A. Each failure with
    # both shrank to the leak's reproduction; before, every such failure was shrunk again.
    s = search({"prompt.leak": DUPLICATE_SHRINKS, "prompt.lost": DUPLICATE_SHRINKS})
    assert s.explained(OTHER, {"prompt.leak", "prompt.lost"})


def test_an_oracle_that_rode_along_is_not_covered_alone() -> None:
    # Failing without the known bug, it may be a bug of its own: shrink it.
    s = search({"prompt.leak": DUPLICATE_SHRINKS, "prompt.lost": DUPLICATE_SHRINKS})
    assert not s.explained(OTHER, {"prompt.lost"})
    assert not search({"prompt.leak": DUPLICATE_SHRINKS, "prompt.lost": DUPLICATE_SHRINKS - 1}
                      ).explained(OTHER, {"prompt.leak", "prompt.lost"})


def _refused(message: str, data: Any = None, oracle: str = "payload.valid-rejected") -> Any:
    from acp_fuzz.core.findings import Finding

    err: dict[str, Any] = {"code": -32602, "message": message}
    if data is not None:
        err["data"] = data
    return Finding(oracle, "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD", "got an error",
                   evidence={"error": err})


PERSISTED = "Invalid params: Changing systemPrompt requires a persisted session; create a new " \
    "session instead"


def test_the_same_specific_refusal_in_another_shape_is_the_same_bug() -> None:
    """codex-acp 2.6.0 answers a changed prompt on load and on resume, after a session made
    with or without a prompt, with one error: one bug, not three reports."""
    from acp_fuzz.engine.campaign.search import FindingReport

    load = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": []}},
            {"op": "load", "session": "A", "systemPrompt": {"mode": "append", "content": []}}]
    resume = [{"op": "new", "session": "A"},
              {"op": "resume", "session": "A", "systemPrompt": {"mode": "append",
                                                                "content": []}}]
    report = FindingReport(status="failed", runs=3, reproduced=3, findings=[_refused(PERSISTED)],
                           steps=load, requests=[])
    s = search({})
    s.known = [_Known(shape_of(load), frozenset({"payload.valid-rejected"}), report)]
    assert s.explained(resume, {"payload.valid-rejected"}, [_refused(PERSISTED)])
    # Another error, or one too generic to tell refusals apart, is shrunk on its own.
    assert not s.explained(resume, {"payload.valid-rejected"}, [_refused("Session not found")])
    assert not s.explained(resume, {"payload.valid-rejected"}, [_refused("Invalid params")])
    assert not s.explained(resume, {"payload.valid-rejected"},
                           [_refused(PERSISTED, oracle="session.reattach-failed")])


def test_generic_messages_count_only_with_their_data() -> None:
    from acp_fuzz.core.minimize import refusals

    gone = {"details": "No previous sessions found for this project."}
    assert refusals([_refused("Internal error")]) == set()
    assert refusals([_refused("Internal error", gone)]) == {
        ("payload.valid-rejected", -32602, 'Internal error {"details": "No previous sessions '
                                           'found for this project."}')}


# One rule for "the same bug" (minimize.same_bug), in its three callers: the search
# (SearchState.explained), after a shrink (campaign._settle) and the workers' merge.

SP_APPEND: dict[str, Any] = {"mode": "append", "content": []}
LEAK: list[dict[str, Any]] = [{"op": "new", "session": "A", "systemPrompt": SP_APPEND},
        {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}]
#: The same shape in other letters.
LEAK_XY: list[dict[str, Any]] = [{"op": "new", "session": "X", "systemPrompt": SP_APPEND},
           {"op": "new", "session": "Y"}, {"op": "prompt", "session": "Y"}]
#: The leak's reproduction after a step that shrinking could not drop.
LEAK_AFTER: list[dict[str, Any]] = [{"op": "new", "session": "C"}, *LEAK]
LOAD: list[dict[str, Any]] = [{"op": "new", "session": "A", "systemPrompt": SP_APPEND},
        {"op": "load", "session": "A", "systemPrompt": SP_APPEND}]
RESUME: list[dict[str, Any]] = [{"op": "new", "session": "A"},
          {"op": "resume", "session": "A", "systemPrompt": SP_APPEND}]


def _failed(*oracles: str) -> list[Any]:
    from acp_fuzz.core.findings import Finding

    return [Finding(o, "MUST", "SP-AGENT-APPLY-NEW-MUST", "failed") for o in oracles]


#: (known findings, known steps, new findings, new steps, the same bug?)
CASES: dict[str, tuple[list[Any], list[dict[str, Any]], list[Any], list[dict[str, Any]], bool]] = {
    "same oracle, same shape": (_failed("prompt.leak"), LEAK, _failed("prompt.leak"), LEAK_XY,
                                True),
    "overlapping oracles, same shape": (_failed("prompt.leak"), LEAK,
                                        _failed("prompt.leak", "prompt.lost"), LEAK_XY, True),
    "the known reproduction inside": (_failed("prompt.leak"), LEAK, _failed("prompt.leak"),
                                      LEAK_AFTER, True),
    "same refusal, other shape": ([_refused(PERSISTED)], LOAD, [_refused(PERSISTED)], RESUME,
                                  True),
    "same oracle, other shape": (_failed("prompt.leak"), LEAK, _failed("prompt.leak"),
                                 cast(list[dict[str, Any]], OTHER), False),
    "other oracle, same shape": (_failed("prompt.leak"), LEAK, _failed("prompt.lost"), LEAK_XY,
                                 False),
    "other refusal, other shape": ([_refused(PERSISTED)], LOAD,
                                   [_refused("Session not found for this project, sorry")],
                                   RESUME, False),
}


def _report(findings: list[Any], steps: list[dict[str, Any]]) -> Any:
    from acp_fuzz.engine.campaign.search import FindingReport

    return FindingReport(status="failed", runs=3, reproduced=3, findings=findings, steps=steps,
                         requests=[])


def _state(known_findings: list[Any], known_steps: list[dict[str, Any]],
           on_event: Any = None) -> SearchState:
    from acp_fuzz.engine.campaign.search import CampaignSettings

    unused = cast(Any, None)
    report = _report(known_findings, known_steps)
    return SearchState(spec=unused, cfg=CampaignSettings(), baseline=unused, warm=unused,
                       result=unused, on_event=on_event,
                       known=[_Known(shape_of(known_steps),
                                     frozenset(report.oracles), report)])


def _by_same_bug(kf: list[Any], ks: list[dict[str, Any]], nf: list[Any],
                 ns: list[dict[str, Any]]) -> bool:
    from acp_fuzz.core.minimize import refusals, same_bug

    known, new = _report(kf, ks), _report(nf, ns)
    return same_bug(known.oracles, shape_of(ks), refusals(kf), new.oracles, shape_of(ns),
                    refusals(nf))


def _by_settle(kf: list[Any], ks: list[dict[str, Any]], nf: list[Any],
               ns: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether ``_settle`` calls a failure that shrank to ``ns`` a known one (no agent runs:
    the shrink returns the failure as it is, and a new bug stops at its confirmation)."""
    from acp_fuzz.core.minimize import Failure
    from acp_fuzz.engine.campaign import search as campaign

    class NewBug(Exception):
        pass

    events: list[Any] = []

    def on_event(e: Any) -> None:
        if isinstance(e, campaign.Confirming):
            raise NewBug
        events.append(e)

    class Kept:  # the shrinker that keeps the failure as it is
        def __init__(self, failure: Any, run: Any, **kw: Any) -> None:
            self.failure = failure

        def shrink(self) -> Any:
            return self.failure

        def summary(self, before: int) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(campaign, "Shrinker", Kept)
    try:
        campaign._settle(_state(kf, ks, on_event), Failure(ns, [], nf), cast(Any, None), None,
                         flaky_hint=False)
    except NewBug:
        return False
    assert any(isinstance(e, campaign.ShrankToKnown) for e in events)
    return True


def _by_merge(kf: list[Any], ks: list[dict[str, Any]], nf: list[Any],
              ns: list[dict[str, Any]]) -> bool:
    """Whether the workers' merge keeps only the first of two workers' reports."""
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings
    from acp_fuzz.engine.campaign.workers import merge_results

    cfg = CampaignSettings()
    results = [CampaignResult(agent={}, initialize={}, caps=cast(Any, None), settings=cfg,
                              reports=[_report(f, s)]) for f, s in ((kf, ks), (nf, ns))]
    merged = merge_results(results, cfg)
    assert merged.reports[0] is results[0].reports[0]
    return len(merged.reports) == 1


def _by_report_merge(kf: list[Any], ks: list[dict[str, Any]], nf: list[Any],
                     ns: list[dict[str, Any]]) -> bool:
    """Whether ``acp-fuzz report merge`` keeps only the first of two shards' reports, as the
    JSON documents they wrote read them back."""
    from acp_fuzz.cli.report import _merge
    from acp_fuzz.core.payloads import Capabilities
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings
    from acp_fuzz.reporting.campaign import result_from_json, result_to_json

    docs = [result_to_json(CampaignResult(agent={}, initialize={}, caps=Capabilities(),
                                          settings=CampaignSettings(), reports=[_report(f, s)]))
            for f, s in ((kf, ks), (nf, ns))]
    merged = _merge([result_from_json(doc) for doc in docs])
    assert merged.reports[0].steps == ks
    return len(merged.reports) == 1


@pytest.mark.parametrize("case", CASES)
def test_the_search_the_shrink_and_the_workers_merge_agree(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the shrink asked for equal shapes and the merge for equal oracle sets too: a
    failure that shrank to the leak's reproduction with ``prompt.lost`` beside it was one bug
    in one worker and two reports across workers."""
    kf, ks, nf, ns, same = CASES[case]
    assert _by_same_bug(kf, ks, nf, ns) is same
    assert _by_settle(kf, ks, nf, ns, monkeypatch) is same
    assert _by_merge(kf, ks, nf, ns) is same
    assert _by_report_merge(kf, ks, nf, ns) is same
    new = set(_report(nf, ns).oracles)
    if new <= set(_report(kf, ks).oracles):
        # The search covers only the known bug's oracles: a failure with one more is shrunk.
        assert _state(kf, ks).explained(ns, new, nf) is same


def test_a_shape_embeds_itself() -> None:
    """Why ``same_bug`` needs no test of equality beside ``embeds``: every shape occurs in
    itself; only the empty one (no steps) does not, and equal shapes are compared first."""
    from acp_fuzz.core.minimize import embeds, same_bug

    for steps in (LEAK, LEAK_XY, LEAK_AFTER, LOAD, RESUME, cast(list[dict[str, Any]], OTHER)):
        assert embeds(shape_of(steps), shape_of(steps))
    assert not embeds((), ())
    assert same_bug({"agent.crash"}, (), set(), {"agent.crash"}, (), set())
