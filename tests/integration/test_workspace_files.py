"""The runner writes AGENTS.md, CLAUDE.md, GEMINI.md and QWEN.md into every session's working
directory (issue #33 §1), and the facts say which reach the model per prompt mode: the
reference agent reads AGENTS.md into its defaults, so it shows without a prompt and under
append, and not under override (it keeps nothing); the other files never."""

from __future__ import annotations

import sys

import pytest

from acp_fuzz.core.baseline import Baseline
from acp_fuzz.core.workspace import FILES, canary_for, workspace_facts
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import run_steps

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

P = {"mode": "append", "content": [{"type": "text", "text": "Review for security first."}]}
OVERRIDE = {"mode": "override", "content": [{"type": "text", "text": "You review code, tersely."}]}


def test_the_files_are_written_per_folder_and_counted_per_mode(no_orphans: object) -> None:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
    history, found = run_steps(spec, [
        {"op": "new", "session": "A", "cwd": "distinct"}, {"op": "prompt", "session": "A"},
        {"op": "new", "session": "B", "cwd": "shared", "systemPrompt": P},
        {"op": "prompt", "session": "B"},
        {"op": "new", "session": "C", "cwd": "shared", "systemPrompt": OVERRIDE},
        {"op": "prompt", "session": "C"}], baseline=Baseline())
    written = [e.data for e in history.events if e.kind == "verdict"
               and e.data.get("what") == "workspace"]
    assert [(w["session"], w["folder"]) for w in written] == [("A", "A"), ("B", "shared"),
                                                             ("C", "shared")]
    assert written[1]["files"] == {f: canary_for("shared", f) for f in FILES}
    facts = workspace_facts(history.events)
    assert {m: {f: n for f, n in files.items() if n[0]} for m, files in facts.items()} == {
        "none": {"AGENTS.md": [1, 1]}, "append": {"AGENTS.md": [1, 1]}, "override": {}}
    assert [f for f in found if f.severity != "info"] == []
