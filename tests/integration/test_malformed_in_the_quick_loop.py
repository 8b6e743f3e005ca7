"""``protocol.malformed`` fires in the quick loop (issue #31 §4): the hostile agents that show
it (``tests/integration/test_hostile_target.py``) run whole campaigns, marked slow. Here one
fixed two-step run against the reference agent's ``--bug camelcase-stop-reason`` (a prompt
answered with the stop reason ``endTurn``, which the schema does not have) is judged by the
default oracles, and the correct agent's same run is clean."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from acp_fuzz.core.oracles import Baseline
from acp_fuzz.engine.campaign.runner import TargetSpec, run_steps

pytestmark = pytest.mark.integration

STEPS = [{"op": "new", "session": "A", "cwd": "distinct"}, {"op": "prompt", "session": "A"}]


def _malformed(*bug: str) -> list[tuple[str, str, str]]:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent", *bug])
    _, found = run_steps(spec, STEPS, baseline=Baseline())
    return [(f.severity, f.rule, f.message) for f in found if f.oracle == "protocol.malformed"]


def test_a_stop_reason_outside_the_schema_is_protocol_malformed(
        no_orphans: Callable[[int | None], None]) -> None:
    ((severity, rule, message),) = _malformed("--bug", "camelcase-stop-reason")
    assert (severity, rule) == ("MUST", "FR-WIRE-NDJSON-MUST")
    assert "breaks the schema" in message and "endTurn" in message
    assert _malformed() == []
