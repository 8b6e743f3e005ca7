"""Every shell block of README.md and docs/*.md is decided: runnable (tests/integration/
test_docs_commands.py runs it, in the slow tier) or listed with the reason no test runs it
(``tests._docblocks.NOT_RUN``). And the CI workflows the docs show (YAML) parse, and each
acp-fuzz command in them is one the command line takes (its options exist), without running
anything: the quick loop catches a renamed option in a workflow too."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import typer.main
import yaml

from acp_fuzz.cli import app
from tests._docblocks import NOT_RUN, ROOT, blocks, pages, shell_blocks


def test_every_shell_block_is_runnable_or_says_why_not() -> None:
    undecided = [f"{b.page}:{b.line}: {b.first}" for b in shell_blocks()
                 if b.marker != "runnable" and (b.page, b.first) not in NOT_RUN]
    assert undecided == [], "mark them <!-- runnable --> or add them to NOT_RUN with a reason"
    unmarked = {(b.page, b.first) for b in shell_blocks() if b.marker != "runnable"}
    assert set(NOT_RUN) <= unmarked, set(NOT_RUN) - unmarked  # no stale or runnable entry
    assert all(len(reason) > 20 for reason in NOT_RUN.values())


def test_the_markers_are_on_blocks_they_fit() -> None:
    for page in pages():
        for b in blocks(page):
            if b.marker == "runnable":
                assert b.lang in ("sh", "console") and b.commands, (b.page, b.line)
            elif b.marker is not None:
                assert b.lang not in ("sh", "console"), (b.page, b.line)  # a file to save


def _acp_fuzz_commands(script: str) -> list[list[str]]:
    """The acp-fuzz command lines of a workflow's ``run:`` or ``script:`` text, as argv:
    expressions (``${{ ... }}``) and variables stand for one word."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "X", script.replace("\\\n", " "))
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True) if "acp-fuzz " in line else []
        if words[:1] == ["acp-fuzz"]:
            out.append([w for w in words[1:] if not w.startswith("||")][:200])
    return out


def _scripts(node: Any) -> list[str]:
    """Every ``run:`` and ``script:`` text of a workflow, and an action's ``args`` input as a
    ``target`` command line."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("run", "script"):
                found += value if isinstance(value, list) else [value]
            elif key == "with" and isinstance(value, dict) and "args" in value:
                found.append(f"acp-fuzz target {value['args']} -- agent")
            found += _scripts(value)
    elif isinstance(node, list):
        for item in node:
            found += _scripts(item)
    return [s for s in found if isinstance(s, str)]


def _parses(argv: list[str]) -> None:
    """Parse ``argv`` the way ``acp-fuzz`` would, down to its command (``report merge``: a
    command of a group), without running it: an unknown option or command raises."""
    command: Any = typer.main.get_command(app)
    name, words = "acp-fuzz", list(argv)
    while hasattr(command, "commands"):
        assert words and words[0] in command.commands, (argv, sorted(command.commands))
        name, words = words[0], words[1:]
        command = command.commands[name]
    command.make_context(name, words, resilient_parsing=False)


YAML = [(b.page, b.line, b.body) for page in pages() for b in blocks(page) if b.lang == "yaml"]


@pytest.mark.parametrize("page, line, body", YAML, ids=[f"{p}:{n}" for p, n, _ in YAML])
def test_a_workflow_in_the_docs_parses_and_its_acp_fuzz_commands_do(
        page: str, line: int, body: str) -> None:
    doc = yaml.safe_load(body)
    for script in _scripts(doc):
        for argv in _acp_fuzz_commands(script):
            _parses(argv)


def test_the_sharded_workflows_run_every_shard() -> None:
    """docs/scaling.md: the GitHub matrix lists the shards 1..N that its --shard K/N names,
    and GitLab's parallel count is N; each workflow merges the shards' reports."""
    text = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    github, gitlab = (yaml.safe_load(b.body) for b in blocks(ROOT / "docs" / "scaling.md")
                      if b.lang == "yaml")
    fuzz = github["jobs"]["fuzz"]
    (use,) = [s for s in fuzz["steps"] if str(s.get("uses", "")).endswith("/acp-fuzz@v1")]
    n = int(re.fullmatch(r"--shard \$\{\{ matrix\.shard \}\}/(\d+)", use["with"]["args"])[1])
    assert fuzz["strategy"]["matrix"]["shard"] == list(range(1, n + 1))
    assert "report merge shards/*/report.json" in str(github["jobs"]["merge"]["steps"])
    assert gitlab["acp-fuzz"]["parallel"] >= 2
    assert '--shard "$CI_NODE_INDEX/$CI_NODE_TOTAL"' in " ".join(gitlab["acp-fuzz"]["script"])
    assert "report merge report-*.json" in " ".join(gitlab["acp-fuzz-merge"]["script"])
    assert text.count("```yaml") == 2
