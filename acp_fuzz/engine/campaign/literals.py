"""Draws that depend on the seed alone, not on the modules the process has loaded.

Hypothesis (6.131 and later) now and then replaces a drawn number or string with a literal
("constant") found in the source of the modules loaded in the process: every module outside
site-packages, so an editable acp-fuzz, the tests, a user's ``--plugin`` file and whatever
their working directory holds. The pool of those literals is a set (its order follows the
process's hash seed for strings) and grows with every module imported. The same seed then
drew other examples in ``acp-fuzz target``, under the pytest plugin, and after a test that
imported more modules (measured: 47 examples of 1,270 steps alone, 50 of 1,181 after any
other cover-tier file, for the same seed and settings). A literal of acp-fuzz's own code, or
of its tests, says nothing about the agent or client under test, so the search runs without
them (:func:`no_source_literals`).

Hypothesis has no setting for this; the switch is its provider's private
``_maybe_draw_constant``, replaced while a campaign draws and put back after (a user's own
Hypothesis tests in the same process keep the feature). Where a Hypothesis release has no
such method, nothing is replaced, and ``tests/cover/test_literals.py`` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["no_source_literals", "replaceable"]

_METHOD = "_maybe_draw_constant"


def replaceable() -> bool:
    """Whether this Hypothesis has the literal draw that :func:`no_source_literals` turns off."""
    return callable(getattr(_provider(), _METHOD, None))


def _provider() -> type:
    # Imported here: the commands that draw nothing (report, offline replay) load no
    # Hypothesis (tests/cover/test_public_api.py).
    from hypothesis.internal.conjecture.providers import HypothesisProvider
    return HypothesisProvider


def _never(self: Any, *args: Any, **kwargs: Any) -> None:
    """A provider's literal draw that never draws one: the seed's own draw stands."""
    return None


@contextmanager
def no_source_literals() -> Iterator[None]:
    """Within the block, Hypothesis draws no literal of the loaded modules' source (nor its
    built-in edge values): what a seed draws is the same in every process."""
    if not replaceable():
        yield
        return
    cls = _provider()
    saved = cls.__dict__.get(_METHOD)
    setattr(cls, _METHOD, _never)
    try:
        yield
    finally:
        if saved is None:
            delattr(cls, _METHOD)
        else:
            setattr(cls, _METHOD, saved)
