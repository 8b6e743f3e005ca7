"""A request with the standard systemPrompt and a legacy vendor carrier beside it (issue #10
§6): the runner sends and records exactly what the step says, and a correct agent (the
reference agent ignores ``_meta``) gives no finding."""

from __future__ import annotations

import sys

import pytest

from acp_fuzz.core.oracles import Baseline
from acp_fuzz.engine.campaign.runner import TargetSpec, run_steps
from acp_fuzz.engine.campaign.search import requests_of

pytestmark = pytest.mark.integration

SP = {"mode": "append", "content": [{"type": "text", "text": "Standard text [canary A1]",
                                     "annotations": {"priority": 1}}],
      "_meta": {"acpfuzz.dev/note": "decoration text that must change nothing [canary A1-meta]"}}
VENDOR = {"claudeCode": {"options": {"systemPrompt": "Vendor text [canary A1-vendor]"}}}


def test_vendor_meta_is_sent_and_recorded_and_a_correct_agent_passes(no_orphans: object
                                                                     ) -> None:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
    steps = [{"op": "new", "session": "A", "systemPrompt": SP, "_meta": VENDOR,
              "extra": {"systemPromptMode": "append"}},
             {"op": "prompt", "session": "A"}]
    history, findings = run_steps(spec, steps, baseline=Baseline())
    (new,) = [r for r in requests_of(history.snapshot()) if r["method"] == "session/new"]
    params = new["params"]
    assert params["_meta"] == VENDOR and params["systemPrompt"] == SP
    assert params["systemPromptMode"] == "append"
    # An extra param never replaces what the harness itself sends: a step that tries is
    # refused before anything is sent (steps.validate_step; tests/security/test_replay_steps).
    assert params["cwd"] != "/etc" and "sessionId" not in params
    with pytest.raises(ValueError, match="old draft fields"):
        run_steps(spec, [{**steps[0], "extra": {"cwd": "/etc", "sessionId": "x"}}],
                  baseline=Baseline())
    step = next(e for e in history.snapshot() if e.kind == "step")
    assert step.data["args"]["_meta"] == VENDOR
    assert step.data["args"]["extra"]["systemPromptMode"] == "append"
    assert [f for f in findings if f.severity != "info"] == []
    system = next(x.texts("system") for _, x in history.model_exchanges())
    assert any("Standard text" in t for t in system)
    assert not any("Vendor text" in t or "decoration text" in t for t in system)
