"""The one table of lifecycle ops (:mod:`acp_fuzz.core.ops`): every part reads its families
from it, and the runner, the lifecycle model and the step checker know every row."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from acp_fuzz.core import ops
from acp_fuzz.core.lifecycle import Lifecycle
from acp_fuzz.core.ops import TABLE, Effect, Op, spec_of
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.steps import describe, validate_step
from acp_fuzz.engine.campaign.runner import Run


def test_the_families_are_the_rfds_words() -> None:
    assert ops.CARRIES_PROMPT == ("new", "load", "resume", "fork")
    assert ops.RESENDS == ("load", "resume", "fork")
    assert ops.REATTACHES == ("load", "resume")
    assert ops.CREATES == ("new", "fork")
    assert ops.ENDS == ("close", "delete")
    assert ops.SESSIONLESS == ("list", "restart", "invalid")
    assert ops.TURNS == ("prompt", "cancel", "compact")


def test_a_strangers_op_has_no_row() -> None:
    assert spec_of("new") is TABLE[Op.NEW]
    for odd in ("archive", "", None, 3, ["new"]):
        assert spec_of(odd) is None
        assert not Lifecycle().allows({"op": odd, "session": "A"})
        with pytest.raises(ValueError, match="unknown step op"):
            validate_step({"op": odd, "session": "A"})


@pytest.mark.parametrize("op", list(Op))
def test_the_runner_sends_every_op(op: Op) -> None:
    """A row the runner has no way to send would fail only when a campaign drew it."""
    do = getattr(Run, f"_do_{op}", None)
    if TABLE[op].plain:
        assert do is None, f"{op} is plain: its request is built from the table alone"
        assert TABLE[op].method.startswith("session/")
    else:
        assert do is not None and inspect.isfunction(do)


@pytest.mark.parametrize("op", [o for o in Op if "session" in TABLE[o].keys])
def test_every_op_on_a_session_is_described_and_validated(op: Op) -> None:
    step = {"op": str(op), "session": "A", **({"new": "B"} if "new" in TABLE[op].keys
                                               and op == Op.FORK else {}),
            **({"by": "command"} if op == Op.COMPACT else {})}
    assert validate_step(step) == step
    assert describe(step) != str(op)  # a line of its own, not the fallback


def test_the_lifecycle_follows_each_effect() -> None:
    life = Lifecycle()
    life.apply({"op": "new", "session": "A"})
    assert life.is_open("A")
    life.apply({"op": "fork", "session": "A", "new": "B"})
    assert life.is_open("B")
    for op in Op:
        if TABLE[op].effect is Effect.CLOSES:
            life.apply({"op": str(op), "session": "A"})
            assert life.exists("A") and not life.is_open("A")
        if TABLE[op].effect is Effect.REATTACHES:
            life.apply({"op": str(op), "session": "A"})
            assert life.is_open("A")
    life.apply({"op": "restart"})
    assert life.exists("B") and not life.is_open("B")
    life.apply({"op": "delete", "session": "B"}, accepted=False)
    assert life.exists("B")  # a refused delete changes nothing
    life.apply({"op": "delete", "session": "B"})
    assert not life.exists("B") and life.deleted("B")


def test_capability_refused_judges_every_advertised_gate_and_no_learned_one() -> None:
    """An op the agent advertises in ``initialize`` must not be answered "Method not found":
    ``capability.refused``'s table is read from the ops table, the flags learned at
    calibration or from the profile (modes, config options, compaction) left out, since an
    agent never promised those; v2's load is a resume that replays."""
    from acp_fuzz.core.builtin.capabilities import GATED

    assert GATED == {
        "session/list": ("list",), "session/close": ("close",), "session/load": ("load",),
        "session/resume": ("resume", "replay"), "session/fork": ("fork",),
        "session/delete": ("delete",), "session/set_title": ("title",),
        "session/status": ("status",)}
    learned = {f.name for f in fields(Capabilities)} - set(Capabilities.advertised_flags())
    assert learned == {"set_mode", "set_config_option", "compact_command", "compact_usage",
                       "compact_overflow"}
    assert not {f for flags in GATED.values() for f in flags} & learned


def test_a_new_gated_row_is_judged_without_touching_the_oracle() -> None:
    from acp_fuzz.core.ops import gated

    assert gated(("status", "load")) == {"session/load": ("load",),
                                         "session/status": ("status",)}
    assert gated(()) == {}
