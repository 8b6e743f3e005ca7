"""The campaign's search reports each bug once: a failing example that a known reproduction
explains is not shrunk again, and an oracle whose failures keep shrinking into a known
reproduction stops costing a shrink, but only beside the bug it came with."""

from __future__ import annotations

from typing import Any, cast

from acp_fuzz.campaign import DUPLICATE_SHRINKS, SearchState, _Known
from acp_fuzz.minimize import shape_of

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
    from acp_fuzz.findings import Finding

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
    from acp_fuzz.campaign import FindingReport

    load = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": []}},
            {"op": "load", "session": "A", "systemPrompt": {"mode": "append", "content": []}}]
    resume = [{"op": "new", "session": "A"},
              {"op": "resume", "session": "A", "systemPrompt": {"mode": "append",
                                                                "content": []}}]
    report = FindingReport("failed", 3, 3, [_refused(PERSISTED)], load, [], None)
    s = search({})
    s.known = [_Known(shape_of(load), frozenset({"payload.valid-rejected"}), report)]
    assert s.explained(resume, {"payload.valid-rejected"}, [_refused(PERSISTED)])
    # Another error, or one too generic to tell refusals apart, is shrunk on its own.
    assert not s.explained(resume, {"payload.valid-rejected"}, [_refused("Session not found")])
    assert not s.explained(resume, {"payload.valid-rejected"}, [_refused("Invalid params")])
    assert not s.explained(resume, {"payload.valid-rejected"},
                           [_refused(PERSISTED, oracle="session.reattach-failed")])


def test_generic_messages_count_only_with_their_data() -> None:
    from acp_fuzz.minimize import refusals

    gone = {"details": "No previous sessions found for this project."}
    assert refusals([_refused("Internal error")]) == set()
    assert refusals([_refused("Internal error", gone)]) == {
        ("payload.valid-rejected", -32602, 'Internal error {"details": "No previous sessions '
                                           'found for this project."}')}
