"""``acp-fuzz matrix`` end to end on the reference agent: the table is written in both formats,
a correct agent has no fail cell, a planted bug fails exactly its rule with a cassette that
exists, the time budget stops the search, and each agent's corpus is replayed beside its
campaign (a failing cassette fails its rule, a fixed one is a note, another version's is
skipped)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import read_cassette, write_cassette
from acp_fuzz.engine.agents.profiles import PROFILES
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign
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
        f"acp-fuzz: error: unknown profile 'nope' (known: {', '.join(sorted(PROFILES))}, or a "
        "profile file: ./my-agent.toml)"]
    assert "claude-agent-acp, codex-acp" in proc.stderr
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


# Campaign-sized (a matrix of two agents with a corpus, 11 s): the long tier, which CI runs.
@pytest.mark.slow
def test_the_corpus_fails_its_rule_is_fixed_against_a_correct_agent_and_skips_other_versions(
        tmp_path: Path, no_orphans: object) -> None:
    # A profile file: the reference agent with a planted leak, its column named by its name.
    shown = run_cli(tmp_path, "profiles", "show", "reference")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.replace('name = "reference"', 'name = "reference-leak"').replace(
        '"acp_fuzz.reference_agent"]', '"acp_fuzz.reference_agent", "--bug", "leak"]')
    assert "--bug" in text and "reference-leak" in text
    (tmp_path / "leak.toml").write_text(text)
    # Its reviewed corpus: the cassette a campaign of that same profile recorded.
    leak_dir = tmp_path / "corpus" / "reference-leak"
    found = run_cli(tmp_path, "target", "--profile", "./leak.toml", "-n", "30", "-x",
                    "--cassette-dir", "corpus/reference-leak")
    assert found.returncode == 1, found.stderr
    [cassette] = sorted(leak_dir.glob("*.cassette"))
    # The same cassette in the correct agent's corpus replays FIXED; a copy that says it was
    # recorded from another version of the agent does not count at all.
    fixed_dir = tmp_path / "corpus" / "reference"
    fixed_dir.mkdir()
    shutil.copy(cassette, fixed_dir / cassette.name)
    recorded = read_cassette(cassette)
    init = dict(recorded.header.initialize or {})
    init["agentInfo"] = {**init["agentInfo"], "version": "0.0.1"}
    write_cassette(fixed_dir / "old.cassette",
                   dataclasses.replace(recorded.header, initialize=init), recorded.events)

    (tmp_path / "docs").mkdir()
    proc = run_cli(tmp_path, "matrix", "-p", "./leak.toml", "-p", "reference", "--corpus",
                   "corpus", "-n", "1", "--time-budget", "1", "--corpus-runs", "2",
                   "--json", "m.json", "--markdown", "docs/m.md", "--html", "docs/m.html")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "docs" / "m.md").read_text()
    row = next(line for line in md.splitlines()
               if line.startswith("| `ACPFUZZ-SESSION-ISOLATION-MUST`"))
    leak_cell, reference_cell = row.split(" | ")[2:4]
    link = f"[corpus cassette](../corpus/reference-leak/{cassette.name})"
    assert leak_cell.startswith("**FAIL**: MUST: prompt.leak") and link in leak_cell, row
    # Whether this one-example campaign drew the leak or not (today it does not).
    assert leak_cell.endswith(("(corpus)", "(campaign+corpus)")), row
    assert "FAIL" not in reference_cell and "corpus" not in reference_cell, row
    assert "\n  - corpus `corpus/reference-leak`: 1 cassette replayed against the profile's " \
           "agent (2 runs each): 1 failed.\n" in md
    assert f"\n  - fixed `corpus/reference/{cassette.name}`: no longer fails: MUST " \
           "prompt.leak (ACPFUZZ-SESSION-ISOLATION-MUST) (0/2 runs).\n" in md
    assert "\n  - skipped `corpus/reference/old.cassette`: recorded from version 0.0.1; the " \
           "agent reports 0.1.0.\n" in md
    assert "cassettes under `corpus/<profile>/`" in md  # the preamble says what the corpus is
    page = (tmp_path / "docs" / "m.html").read_text()
    assert f'href="../corpus/reference-leak/{cassette.name}">corpus cassette</a>' in page
    doc = json.loads((tmp_path / "m.json").read_text())
    leak, reference = doc["agents"]
    cell = leak["cells"]["ACPFUZZ-SESSION-ISOLATION-MUST"]
    assert cell["status"] == "fail" and cell["source"] in ("corpus", "campaign+corpus")
    assert cell["corpus"] == [f"corpus/reference-leak/{cassette.name}"]
    assert [r["verdict"] for r in leak["corpus"]["replayed"]] == ["FAILED"]
    assert [r["verdict"] for r in reference["corpus"]["replayed"]] == ["FIXED"]
    assert [s["cassette"] for s in reference["corpus"]["skipped"]] == [
        "corpus/reference/old.cassette"]

    # --from-json writes the same table again; a document from before the corpus (no
    # corpus, no cells) still renders, as the campaigns alone.
    again = run_cli(tmp_path, "matrix", "--from-json", "m.json", "--markdown", "docs/again.md",
                    "--html", "docs/again.html")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "docs" / "again.md").read_text() == md
    del doc["corpus_root"]
    for agent in doc["agents"]:
        del agent["corpus"], agent["cells"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = run_cli(tmp_path, "matrix", "--from-json", "old.json", "--markdown", "old.md")
    assert old.returncode == 0, old.stderr
    table = [line for line in (tmp_path / "old.md").read_text().splitlines()
             if not line.startswith("Made by")]  # the command it ran names --corpus
    assert not any("corpus" in line for line in table)
    assert any(line.startswith("| `ACPFUZZ-SESSION-ISOLATION-MUST`") for line in table)

    # A corpus that is not a folder, or both options: one line, nothing run.
    for args, message in ((["--corpus", "nope"], "--corpus nope: not a folder"),
                          (["--corpus", "corpus", "--no-corpus"],
                           "--corpus and --no-corpus: give one of them")):
        bad = run_cli(tmp_path, "matrix", "-p", "reference", *args, "--markdown", "bad.md")
        assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
            f"acp-fuzz: error: {message}"], bad.stderr
        assert not (tmp_path / "bad.md").exists()


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_a_kept_finding_without_a_cassette_for_the_version_refuses_the_table(
        tmp_path: Path) -> None:
    """kept.toml says which reviewed findings each agent version still owes a cassette, per
    ACP version (issue #31 §2): a table for a version a kept finding says nothing about is
    refused before any agent runs; one that says why there is none lists it under the
    agent; a kept cassette missing from the folder is an ERROR cell, never a pass."""
    corpus = tmp_path / "corpus"
    (corpus / "reference").mkdir(parents=True)
    kept = corpus / "kept.toml"
    entry = ('[[kept]]\nfinding = "reference 1"\nprofile = "reference"\nversion = "0.1.0"\n'
             'oracle = "prompt.leak"\nrule = "ACPFUZZ-SESSION-ISOLATION-MUST"\n')
    kept.write_text(entry + 'v1 = "reference/leak.cassette"\n')
    base = ["matrix", "-p", "reference", "--corpus", "corpus", "-n", "1", "--time-budget",
            "1", "--markdown", "m.md"]
    refused = run_cli(tmp_path, *base, "--protocol", "2")
    assert refused.returncode == 2 and not (tmp_path / "m.md").exists()
    assert refused.stderr.strip().splitlines() == [
        "acp-fuzz: error: kept finding reference 0.1.0 'reference 1' (prompt.leak, "
        "ACPFUZZ-SESSION-ISOLATION-MUST) has no cassette for ACP v2 and no reason there is "
        "none: record one, or write v2 = \"none: why\" in kept.toml"]
    kept.write_text(entry + 'v1 = "reference/leak.cassette"\n'
                            'v2 = "none: the leak needs session/load, which v2 has not"\n')
    missing = run_cli(tmp_path, *base, "--protocol", "1", "--corpus-runs", "1")
    assert missing.returncode == 0, missing.stderr
    md = (tmp_path / "m.md").read_text()
    row = next(line for line in md.splitlines()
               if line.startswith("| `ACPFUZZ-SESSION-ISOLATION-MUST`"))
    assert "**ERROR**: corpus replay failed: the kept cassette is missing" in row, row
    absent = run_cli(tmp_path, *base, "--protocol", "2", "--corpus-runs", "1")
    assert absent.returncode == 0, absent.stderr
    assert "reference 1 (prompt.leak, ACPFUZZ-SESSION-ISOLATION-MUST): no cassette in this " \
           "ACP version: the leak needs session/load, which v2 has not" in \
           (tmp_path / "m.md").read_text()
    kept.write_text('[[kept]]\nfinding = 1\n')
    bad = run_cli(tmp_path, *base)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("acp-fuzz: error: corpus/kept.toml: kept finding 1: 'finding' "
                                  "must be a non-empty string")


def _scenario(tmp_path: Path, name: str, *bug: str) -> str:
    command = [sys.executable, "-m", "acp_fuzz.reference_client", *bug]
    (tmp_path / name).write_text(f"command = {json.dumps(command)}\n")
    return name


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_client_columns_get_their_own_table_and_no_agent_runs(tmp_path: Path) -> None:
    """``--client TITLE=SCENARIO`` (#35): the client campaigns run with the matrix's examples
    and seed, and the client section has a column each: the correct reference client passes,
    the planted bug fails its rule with its cassette, a client that cannot start says so.
    No --profile: no agent table. The same table comes back from --json."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "gone.toml").write_text('command = ["/nonexistent/acp-client"]\n')
    proc = run_cli(
        tmp_path, "matrix", "-n", "6", "--markdown", "docs/m.md", "--html", "docs/m.html",
        "--json", "m.json",
        "--client", f"correct={_scenario(tmp_path, 'ok.toml')}",
        "--client",
        f"leaky | <b>={_scenario(tmp_path, 'bad.toml', '--bug', 'unadvertised-prompt')}",
        "--client", "gone=gone.toml")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "docs" / "m.md").read_text()
    assert "| Rule | What it asks |" not in md  # no agent ran
    assert "| Oracle | Severity | Rule | correct | leaky \\| \\<b\\> | gone |" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| `client.prompt-unadvertised`"))
    cells = row.split(" | ")[3:]
    assert cells[0].startswith("pass: ") and cells[1].startswith("**FAIL**: MUST ([cassette](")
    link = cells[1].split("](")[1].split(")")[0]
    assert (tmp_path / "docs" / link).resolve().is_file()
    rows = [ln.split(" | ") for ln in md.splitlines() if ln.startswith("| `client.")]
    assert not any("FAIL" in r[3] for r in rows)
    assert all(r[5] == "not run |" for r in rows)
    assert "- gone: not run: cannot start the client" in md
    page = (tmp_path / "docs" / "m.html").read_text()
    assert '<td class="fail">FAIL: MUST' in page and "<b>" not in page.split("<h2>")[1]
    again = run_cli(tmp_path, "matrix", "--from-json", "m.json", "--markdown", "docs/again.md")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "docs" / "again.md").read_text() == md


def test_a_bad_client_option_or_scenario_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("command = 3\n")
    for arg, says in (("no-equals", "give TITLE=SCENARIO"), ("t=missing.toml", "cannot be read"),
                      ("t=bad.toml", "command must be")):
        proc = run_cli(tmp_path, "matrix", "--client", arg)
        assert proc.returncode == 2, proc.stderr
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "matrix.md").exists()
