"""The lifecycle strategy draws every planted bug's shape within the default budget.

The planted-bug tests (test_planted_bugs.py) run real agents at two seeds: a minute or more per
case, so they cannot tell a lucky seed from a strong strategy. This runs the same Hypothesis
machine with the campaign's settings against ``benchmarks/search_power.py``'s pure-Python model
of each bug, at ten seeds, in seconds. A change to the rules or their weights that makes a bug
shape rare fails here before it shows as a flaky planted-bug test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.engine.campaign.search import CampaignSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import search_power

pytestmark = pytest.mark.quality

SEEDS = range(10)


#: How many of the ten seeds may miss a planted bug's shape. Not zero: a fixed seed does not fix
#: Hypothesis' draws across processes, since its generation also draws constants collected
#: from the modules imported so far (the misses measured are in docs/performance.md, "Search
#: power"). A rule change that makes a shape rare misses it at several seeds, which still
#: fails.
MAX_MISSES = 1


@pytest.mark.parametrize("bug", [*search_power.BUGS, *search_power.SWITCHES,
                                 *search_power.TITLES, *search_power.STATUS,
                                 *search_power.DIRECTORIES])
def test_bug_shape_drawn_at_nearly_every_seed(bug: str) -> None:
    defaults = CampaignSettings()
    misses = [s for s in SEEDS
              if search_power.first_hit(bug, s, defaults.max_examples, defaults.max_steps) is None]
    assert len(misses) <= MAX_MISSES, \
        f"{bug}: shape not drawn in {defaults.max_examples} examples at seeds {misses}"


def test_model_is_not_vacuous() -> None:
    """The model must not call every example a hit: the correct agent has no bug shape."""
    assert search_power.first_hit("none", 0, 50, 12) is None
    # and a planted bug is not found in its very first example at every seed
    assert {search_power.first_hit("fork-drops-prompt", s, 100, 12) for s in SEEDS} != {1}


@pytest.mark.parametrize("bug", search_power.CROSS_SESSION)
def test_a_bug_in_another_session_is_drawn_at_most_seeds(bug: str) -> None:
    """A fork that rewrites its source, a load that rewrites a same-directory sibling, a
    deleted session's prompt left for the next one: seen only in a turn on a session the
    request did not name. The strategy's turn on a fork's source, on a sibling and on a new
    session after a delete finds them at 7-10 of seeds 0-9 (without the first two: 3-8)."""
    defaults = CampaignSettings()
    hits = [s for s in SEEDS
            if search_power.first_hit(bug, s, defaults.max_examples, defaults.max_steps)]
    assert len(hits) >= 7, f"{bug}: drawn at seeds {hits} only"


@pytest.mark.parametrize("bug", sorted(search_power.MINIMUM))
def test_the_minimizer_reaches_each_models_minimum(bug: str) -> None:
    """Over bug models written for this measurement (not for tuning), every first failing
    example the search finds at seeds 0-4 shrinks to the model's known minimum."""
    defaults = CampaignSettings()
    for s in range(5):
        r = search_power.minimized(bug, s, defaults.max_examples, defaults.max_steps)
        if r is not None:
            assert r[1] == search_power.MINIMUM[bug], (bug, s, r)
