"""``acp-fuzz matrix`` end to end on the reference agent: the table is written in both formats,
a correct agent has no fail cell, a planted bug fails exactly its rule with a cassette that
exists, and the time budget stops the search."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.engine.campaign import CampaignSettings, run_campaign
from acp_fuzz.engine.runner import TargetSpec
from acp_fuzz.reporting import result_to_json
from acp_fuzz.reporting.matrix import column_from_report

pytestmark = pytest.mark.integration


def test_matrix_of_the_reference_agent_has_no_fail_cell(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    proc = run_cli(tmp_path, "matrix", "-p", "reference", "-n", "4", "--markdown",
                   "docs/m.md", "--html", "docs/m.html", "--json", "r.json")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "docs" / "m.md").read_text()
    assert "acp-fuzz-reference-agent" in md
    table = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(table) >= 20
    assert not any("**FAIL**" in line or "**flaky**" in line for line in table)
    assert "| `SP-AGENT-APPLY-NEW-MUST` | a systemPrompt on session/new reaches the model | " \
           "pass: " in md
    assert "acp-fuzz matrix -p reference -n 4" in md  # says how it was made
    page = (tmp_path / "docs" / "m.html").read_text()
    assert page.startswith("<!doctype html>") and 'class="fail"' not in page
    assert '"reference"' in (tmp_path / "r.json").read_text()


def test_the_table_is_written_again_from_its_json_and_bad_json_is_one_line(
        tmp_path: Path) -> None:
    first = run_cli(tmp_path, "matrix", "-p", "reference", "-n", "2", "--json", "m.json")
    assert first.returncode == 0, first.stderr
    again = run_cli(tmp_path, "matrix", "--from-json", "m.json", "--markdown", "again.md",
                    "--html", "again.html")
    assert again.returncode == 0, again.stderr
    # The same table, naming the command that ran the campaigns.
    assert (tmp_path / "again.md").read_text() == (tmp_path / "matrix.md").read_text()
    assert "acp-fuzz matrix -p reference -n 2 --json m.json" in (tmp_path / "again.md").read_text()
    for bad in ("{", '{"acp_fuzz_matrix": 1, "agents": [{"profile": "x", "report": '
                     '{"findings": [3]}}]}', "[]"):
        (tmp_path / "bad.json").write_text(bad)
        proc = run_cli(tmp_path, "matrix", "--from-json", "bad.json", "--markdown", "bad.md")
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "bad.md").exists()


def test_matrix_rejects_an_unknown_profile_in_one_line(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "matrix", "-p", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "acp-fuzz: error: unknown profile 'nope' (known: claude-agent-acp, codex-acp, "
        "gemini-cli, reference, or a profile file: ./my-agent.toml)"]
    assert not (tmp_path / "matrix.md").exists()


def test_a_v2_matrix_says_so_in_its_column_and_a_bad_protocol_is_one_line(
        tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "matrix", "-p", "reference", "-n", "3", "--protocol", "2")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "matrix.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| `")]
    assert "acp-fuzz-reference-agent 0.1.0 (ACP v2)" in md
    assert table and not any("**FAIL**" in line for line in table)
    assert "--protocol 2" in md  # says how it was made
    bad = run_cli(tmp_path, "matrix", "-p", "reference", "--protocol", "v2")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "acp-fuzz: error: --protocol must be one of 1, 2, auto, not 'v2'"]


def test_an_agent_not_installed_is_a_column_that_says_so(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "matrix", "-p", "codex-acp",
                   env={"ACP_FUZZ_AGENT_CACHE": str(tmp_path / "empty")})
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "matrix.md").read_text()
    assert "not tested: not run: " in md and "pass:" not in md


@pytest.mark.slow
def test_a_planted_leak_fails_its_rule_with_a_cassette(tmp_path: Path) -> None:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent",
                                    "--bug", "leak"])
    result = run_campaign(spec, CampaignSettings(max_examples=30, max_failures=1,
                                                 cassette_dir=tmp_path, portable=True))
    col = column_from_report(result_to_json(result), profile="reference --bug leak")
    failed = {rule: c for rule, c in col.cells.items() if c.status == "fail"}
    assert set(failed) == {"ACPFUZZ-SESSION-ISOLATION-MUST"}, failed
    cell = failed["ACPFUZZ-SESSION-ISOLATION-MUST"]
    assert cell.text == "MUST: prompt.leak"
    assert cell.cassette is not None and Path(cell.cassette).is_file()
    # The matrix publishes its cassettes: no path of this machine in them.
    recorded = read_cassette(cell.cassette)
    assert recorded.header.target[0] == "python"
    assert sys.executable.encode() not in Path(cell.cassette).read_bytes()
    # The rules the example reached and the agent followed pass beside it.
    assert col.cells["SP-AGENT-APPLY-NEW-MUST"].status == "pass"


def test_the_time_budget_stops_generating_examples(tmp_path: Path) -> None:
    spec = TargetSpec.from_command([sys.executable, "-m", "acp_fuzz.reference_agent"])
    # A budget far below one example's cost: at most the example already started runs.
    result = run_campaign(spec, CampaignSettings(max_examples=50, time_budget=1e-6,
                                                 cassette_dir=tmp_path))
    assert result.out_of_time
    assert result.examples_run <= 1
    assert result.reports == []
