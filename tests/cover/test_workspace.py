"""Workspace instruction files (issue #33 §1): which of AGENTS.md, CLAUDE.md, GEMINI.md and
QWEN.md reach the model, per prompt mode, counted from the ``workspace`` verdicts the runner
records and the turn requests; facts for the report, never a verdict."""

from __future__ import annotations

from test_oracles import H, P, appended, sp

from acp_fuzz.core.oracles import evaluate
from acp_fuzz.core.workspace import (
    FILES,
    canary_for,
    facts_to_wire,
    file_text,
    kept_lines,
    workspace_facts,
)


def folder(h: H, handle: str, name: str | None = None) -> None:
    name = name or handle
    h.h.append("verdict", {"step": h.index - 1, "what": "workspace", "session": handle,
                           "folder": name, "files": {f: canary_for(name, f) for f in FILES}})


def test_each_file_is_counted_per_mode_by_its_folder_s_canary() -> None:
    h = H()
    h.new("A")
    folder(h, "A")
    h.prompt("A", system=[appended()[0] + "\n" + file_text("A", "AGENTS.md")])
    h.new("B", sp("override", P))
    folder(h, "B", "shared")
    # B holds its folder's CLAUDE.md, and A's AGENTS.md (not its own folder's: not counted)
    h.prompt("B", system=[P + file_text("shared", "CLAUDE.md") + file_text("A", "AGENTS.md")])
    facts = workspace_facts(h.h.snapshot())
    assert facts["none"]["AGENTS.md"] == [1, 1] and facts["none"]["CLAUDE.md"] == [0, 1]
    assert facts["override"]["CLAUDE.md"] == [1, 1] and facts["override"]["AGENTS.md"] == [0, 1]
    wire = facts_to_wire(facts)
    assert wire["files"] == ["AGENTS.md", "CLAUDE.md", "GEMINI.md", "QWEN.md"]
    assert wire["by_mode"]["override"]["CLAUDE.md"] == {"shown": 1, "turns": 1}
    assert "append" not in wire["by_mode"]
    assert kept_lines(facts) == ["none: AGENTS.md 1/1", "override: CLAUDE.md 1/1"]
    assert not [f for f in evaluate(h.h.snapshot()) if f.severity != "info"]


def test_canaries_are_per_folder_and_file_and_every_line_holds_one() -> None:
    assert canary_for("A", "AGENTS.md") != canary_for("B", "AGENTS.md")
    assert canary_for("A", "AGENTS.md") != canary_for("A", "CLAUDE.md")
    text = file_text("shared", "GEMINI.md")
    assert all(canary_for("shared", "GEMINI.md") in line for line in text.splitlines())
    assert kept_lines({"override": {"AGENTS.md": [0, 4]}}) == [
        "override: none of AGENTS.md, CLAUDE.md, GEMINI.md, QWEN.md"]
