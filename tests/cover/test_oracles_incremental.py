"""The incremental Evaluator gives exactly the findings of evaluate() on the whole history."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from test_oracles_verdicts import WITHDRAWN

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.oracles import Baseline, Evaluator, evaluate

ROOT = Path(__file__).resolve().parents[2] / "cassettes"
CORPUS = sorted(ROOT.rglob("*.cassette"))
# The agent corpus: a client's cassette (acp-fuzz client) is judged by the client oracles.
PAIRS = [(p, c) for p, c in zip(CORPUS, map(read_cassette, CORPUS), strict=True)
         if c.header.kind != "client-finding"]
CASSETTES = [c for _, c in PAIRS]
#: A withdrawn false alarm (test_oracles_verdicts.WITHDRAWN, paths under cassettes/) may have
#: no finding left at all: the codex-acp tools change of a session with an MCP server.


def test_there_is_something_to_compare() -> None:
    assert len(CASSETTES) >= 7


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(CASSETTES) - 1), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_feeding_in_chunks_equals_evaluating_whole(which: int, cuts: list[int]) -> None:
    c = CASSETTES[which]
    baseline = Baseline.from_wire(c.header.settings.get("baseline"))
    events = c.events
    whole = evaluate(events, baseline=baseline)
    judge = Evaluator(baseline=baseline)
    start = 0
    for cut in sorted(min(x, len(events)) for x in cuts):
        judge.feed(events[start:cut])
        start = max(start, cut)
    judge.feed(events)  # the whole history again: what was judged is skipped
    assert judge.findings() == whole
    full = Evaluator(baseline=baseline)
    full.feed(events)
    assert judge.judged() == full.judged()
    rel = PAIRS[which][0].relative_to(ROOT).as_posix()
    assert whole or rel in WITHDRAWN, "every corpus cassette records a failure"
