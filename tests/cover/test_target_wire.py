"""A :class:`TargetSpec` reaches a worker process whole (``--workers N``): every field, hooks
and deadlines included, travels as JSON-plain data and comes back equal. Before, the copy was
made field by field and had drifted: ``--protocol 2`` and ``--sandbox-fs`` were dropped."""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
from typing import Any, cast

import pytest

from acp_fuzz.core.calibration import Learned
from acp_fuzz.engine.agents.profiles import base_env, get_profile, header
from acp_fuzz.engine.agents.setup import AgentSetup, Compaction
from acp_fuzz.engine.campaign.deadlines import Deadlines
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.workers import spec_from_wire, spec_to_wire
from acp_fuzz.engine.gateway.server import is_side_request


def _deadlines() -> Deadlines:
    d = Deadlines(12.0, {"session/new": 0.25, "session/prompt": 1.5})
    d.overran("session/prompt", None)  # a confirmed hang, one full wait
    d.overran("session/load", 3.125)  # slow, not hung
    return d


#: Every field away from its default: a field added to TargetSpec without a value here
#: fails test_every_field_here_differs_from_its_default.
EVERY_FIELD = TargetSpec(
    argv=("/opt/agent", "--acp"),
    # Any importable functions: what travels is their reference, not what they do.
    extra_env=base_env,  # type: ignore[arg-type]
    setup_home=header,  # type: ignore[arg-type]
    side_request=is_side_request,
    passthrough_env=("MY_PLAIN_VAR", "OTHER_VAR"),
    init_timeout=11.0,
    request_timeout=7.5,
    shutdown_grace=0.5,
    restart_grace=4.0,
    profile="codex-acp",
    deadlines=_deadlines(),
    dialect="claude-meta",
    sandbox_pid=False,
    protocol="2",
    sandbox_fs=True,
    read_only=("/srv/models", "/opt/tools"),
    # A profile file's setup: variables, directories, a templated file, side rules (one of
    # them a compaction's summary request), and what forces a compaction.
    setup=dataclasses.replace(
        get_profile("codex-acp").setup,
        side=get_profile("codex-acp").setup.side + get_profile("reference").setup.side,
        compaction=Compaction(by=("overflow", "usage"), usage_tokens=9_000,
                              context_window=10_000)),
    learned=Learned(compact_command="compact", modes=True, round_trip="error", waited=0.5,
                    exit="sigterm", restart_grace=0.0, grace_source="measured"),
)


def _through_the_wire(spec: TargetSpec) -> TargetSpec:
    wire = spec_to_wire(spec)
    text = json.dumps(wire)  # JSON-plain: no tuples, functions or objects
    assert json.loads(text) == wire
    return spec_from_wire(json.loads(json.dumps(pickle.loads(pickle.dumps(wire)))))


def _assert_same(back: TargetSpec, spec: TargetSpec) -> None:
    for f in dataclasses.fields(TargetSpec):
        got, want = getattr(back, f.name), getattr(spec, f.name)
        if isinstance(want, Deadlines):
            assert isinstance(got, Deadlines) and got.to_wire() == want.to_wire()
        elif callable(want):
            assert got is want, f.name
        else:
            assert got == want and type(got) is type(want), f.name
    assert back == spec


def test_every_field_here_differs_from_its_default() -> None:
    for f in dataclasses.fields(TargetSpec):
        value = getattr(EVERY_FIELD, f.name)
        if f.default is not dataclasses.MISSING:
            assert value != f.default, f"give TargetSpec.{f.name} a non-default value here"
        elif f.default_factory is not dataclasses.MISSING:
            assert value != f.default_factory(), f.name
        else:
            assert value, f.name  # a required field (argv)


def test_every_field_of_the_setup_here_differs_from_its_default() -> None:
    """The setup a profile file describes travels whole too: every field, every kind of side
    rule, and the ``[compaction]`` table."""
    assert EVERY_FIELD.setup is not None
    for f in dataclasses.fields(AgentSetup):
        value = getattr(EVERY_FIELD.setup, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        assert value != default, f"give AgentSetup.{f.name} a non-default value here"
    for f in dataclasses.fields(Compaction):
        assert getattr(EVERY_FIELD.setup.compaction, f.name) != f.default, f.name
    assert {r.kind for r in EVERY_FIELD.setup.side} == {"side", "compaction"}


def test_every_field_travels_to_a_worker() -> None:
    _assert_same(_through_the_wire(EVERY_FIELD), EVERY_FIELD)
    back = _through_the_wire(EVERY_FIELD)
    assert back.deadlines is not None
    assert back.deadlines.trusted("session/prompt") and not back.deadlines.trusted("session/new")
    assert back.deadlines.full_waits == 2


def test_the_defaults_travel_too() -> None:
    plain = TargetSpec(argv=("agent",))
    back = _through_the_wire(plain)
    _assert_same(back, plain)
    assert back.deadlines is None and back.extra_env is None


def test_a_profile_with_a_custom_command_keeps_its_command() -> None:
    """``--profile reference -- ./my-build``: the worker runs the build, not the pinned
    install, with the profile's hooks (the profile is not looked up again)."""
    command = [sys.executable, "-c", "pass"]
    spec = TargetSpec.from_profile("reference", command=command, protocol="2")
    assert list(spec.argv) != get_profile("reference").command()
    back = _through_the_wire(spec)
    _assert_same(back, spec)
    assert back.argv == tuple(command)
    assert back.extra_env is spec.extra_env and back.side_request is spec.side_request
    assert back.protocol == "2" and back.profile == "reference"


@pytest.mark.parametrize("hook", ["extra_env", "setup_home", "side_request"])
def test_a_hook_that_cannot_be_imported_back_is_refused(hook: str) -> None:
    def closure(*args: Any) -> Any:
        return None

    class Hooks:
        def method(self, *args: Any) -> Any:
            return None

    for fn in (lambda *a: None, closure, Hooks().method):
        spec = dataclasses.replace(EVERY_FIELD, **cast(dict[str, Any], {hook: fn}))
        with pytest.raises(ValueError, match=rf"^TargetSpec\.{hook} ") as e:
            spec_to_wire(spec)
        assert "\n" not in str(e.value)


def test_a_wire_form_with_a_key_missing_or_unknown_is_refused() -> None:
    wire = spec_to_wire(EVERY_FIELD)
    with pytest.raises(ValueError, match="missing"):
        spec_from_wire({k: v for k, v in wire.items() if k != "protocol"})
    with pytest.raises(ValueError, match="unknown"):
        spec_from_wire({**wire, "sandbox": True})


# -- CampaignResult.merge: the workers' results as one -------------------------------------------


def test_every_campaign_result_field_says_how_it_merges() -> None:
    """A field added to CampaignResult without a merge policy fails here, not in a user's
    ``--workers`` run (``deadlines`` and ``covering_seconds`` were once dropped)."""
    from acp_fuzz.engine.campaign.search import _MERGERS, MERGE, CampaignResult

    assert sorted(f.name for f in dataclasses.fields(CampaignResult)) == sorted(MERGE)
    assert {how for how in MERGE.values()} - set(_MERGERS) <= {"first", "given", "derived"}


def test_merge_sums_keeps_the_deadlines_and_reports_each_bug_once() -> None:
    from acp_fuzz.core.findings import Finding
    from acp_fuzz.core.payloads import Capabilities
    from acp_fuzz.engine.campaign.search import (
        CampaignResult,
        CampaignSettings,
        FindingReport,
    )

    steps = [{"op": "new", "session": "A"}, {"op": "prompt", "session": "A"}]
    leak = Finding("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", "leak", step=1)

    def result(deadlines: Deadlines, seconds: float, coverage: int) -> CampaignResult:
        return CampaignResult(
            agent={}, initialize={}, caps=Capabilities(), settings=CampaignSettings(),
            examples_run=10, steps_run=40, explained=1, model_requests={"turn": 3},
            reports=[FindingReport(status="failed", runs=3, reproduced=3, findings=[leak],
                                   steps=list(steps), requests=[])],
            deadlines=deadlines.to_wire(), judged={("prompt.leak", leak.rule): 2},
            cover_keys=["op:new"], coverage={"op:new": coverage}, covering_examples=2,
            covering_seconds=seconds, error_codes={"mode-unknown": {-32602: 2}},
            workspace={"override": {"AGENTS.md": [1, 3]}})

    slow = Deadlines(30.0, {"session/prompt": 2.0})
    slow.overran("session/prompt", None)
    merged = CampaignResult.merge(
        [result(_deadlines(), 4.0, 2), result(slow, 6.5, 1)], CampaignSettings(seed=7))
    assert (merged.examples_run, merged.steps_run, merged.explained) == (20, 80, 2)
    assert merged.model_requests == {"turn": 6}
    assert merged.judged == {("prompt.leak", leak.rule): 4}
    assert merged.error_codes == {"mode-unknown": {-32602: 4}}
    assert merged.workspace == {"override": {"AGENTS.md": [2, 6]}}
    assert merged.coverage == {"op:new": 1} and merged.cover_keys == ["op:new"]
    assert (merged.covering_examples, merged.covering_seconds) == (4, 10.5)
    assert len(merged.reports) == 1 and merged.settings.seed == 7
    d = merged.deadlines
    assert d["slowest"] == {"session/load": 3.125, "session/new": 0.25, "session/prompt": 2.0}
    assert d["hang_confirmed"] == ["session/prompt"] and d["full_waits"] == 3
