"""A campaign's draws depend on its seed alone, not on which modules the process loaded
(acp_fuzz.engine.campaign.literals): Hypothesis's draws of literals found in the loaded
modules' source are off while the search runs, and back after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis.internal.conjecture import providers

from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.literals import no_source_literals, replaceable

FULL = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                    close=True, list=True, delete=True)


def test_the_pinned_hypothesis_has_the_literal_draw_that_is_turned_off() -> None:
    # If a release drops or renames it, the switch does nothing: this says so.
    assert replaceable()


def test_the_literal_draw_is_put_back_after_the_block() -> None:
    before = providers.HypothesisProvider.__dict__["_maybe_draw_constant"]
    with no_source_literals():
        assert providers.HypothesisProvider.__dict__["_maybe_draw_constant"] is not before
        with no_source_literals():  # nested: the outer block still restores the original
            pass
    assert providers.HypothesisProvider.__dict__["_maybe_draw_constant"] is before


def test_the_machine_draws_the_same_examples_after_more_modules_are_loaded() -> None:
    """In a fresh process (in this one the cover tier has loaded them already): the
    machine's draws, then the same after importing the cover tier's test_c* modules, whose
    literals Hypothesis would otherwise draw from (without the switch the two differ)."""
    here = Path(__file__).parent
    code = (
        "import glob, importlib, os\n"
        "from test_strategies_breadth import _examples\n"
        "from test_literals import FULL\n"
        "before = _examples(FULL, n=15)\n"
        f"for f in sorted(glob.glob(os.path.join({str(here)!r}, 'test_c*.py'))):\n"
        "    importlib.import_module(os.path.basename(f)[:-3])\n"
        "print(_examples(FULL, n=15) == before)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1])])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
