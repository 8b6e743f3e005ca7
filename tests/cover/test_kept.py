"""cassettes/real/kept.toml: the findings docs/findings.md keeps, per agent version and ACP
version, as the matrix reads them (issue #31 §2). The file is held to the cassettes (each
exists, was recorded from the kept agent version in its ACP version, and is judged offline
under the kept oracle and rule) and to the summary of docs/findings.md (every kept finding is
there, every cassette of the summary that is not withdrawn is kept)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.baseline import Baseline
from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.findings import is_reported
from acp_fuzz.core.oracles import evaluate
from acp_fuzz.core.protocol import agent_info, answered
from acp_fuzz.reporting.kept import KEPT_FILE, Kept, KeptError, load_kept, parse_kept, unaccounted

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "cassettes" / "real"
KEPT = load_kept(CORPUS / KEPT_FILE)
ONE = {"finding": "x 1", "profile": "x", "version": "1.0", "oracle": "prompt.lost",
       "rule": "SP-AGENT-APPLY-NEW-MUST"}


def _cases() -> list[Any]:
    return [pytest.param(k, v, path, id=f"{k.finding}-v{v}")
            for k in KEPT for v, path in sorted(k.cassettes.items())]


@pytest.mark.parametrize("kept, version, path", _cases())
def test_each_kept_cassette_shows_its_finding_offline(kept: Kept, version: int,
                                                      path: str) -> None:
    cassette = read_cassette(CORPUS / path)
    init = cassette.header.initialize
    assert agent_info(init).get("version") == kept.version
    assert answered(init) == version
    found = evaluate(cassette.events,
                     baseline=Baseline.from_wire(cassette.header.settings["baseline"]))
    assert any(f.oracle == kept.oracle and f.rule == kept.rule and is_reported(f.severity)
               for f in found), [(f.oracle, f.severity, f.rule) for f in found]


def test_every_kept_finding_is_in_the_findings_summary_and_the_other_way_round() -> None:
    doc = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    summary = doc.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in summary.splitlines() if r.startswith("| ") and "cassettes/real/" in r]
    kept_paths = {f"cassettes/real/{p}" for k in KEPT for p in k.cassettes.values()}
    for row in rows:
        if "withdrawn" in row or "/clients/" in row:
            continue  # withdrawn findings replay FIXED on purpose; clients have no matrix
        for path in re.findall(r"`(cassettes/real/[^`]+\.cassette)`", row):
            assert path in kept_paths, row
    for k in KEPT:
        assert any(f"cassettes/real/{p}" in summary for p in k.cassettes.values()), k.finding
    # Every version a pinned agent speaks is accounted for.
    assert [line for k in KEPT for v in (1, 2)
            for line in unaccounted(KEPT, k.profile, k.version, v)] == []


def test_the_parser_takes_a_cassette_or_a_reason_per_version() -> None:
    [k] = parse_kept({"kept": [{**ONE, "v1": "x/a.cassette", "v2": "none: x speaks v1 only",
                                "clock": "a minute boundary"}]})
    assert (dict(k.cassettes), dict(k.absent), k.clock) == (
        {1: "x/a.cassette"}, {2: "x speaks v1 only"}, "a minute boundary")
    assert k.applies("x", "1.0") and k.applies("x", None) and not k.applies("x", "2.0")
    assert unaccounted([k], "x", "1.0", 2) == []
    [bare] = parse_kept({"kept": [ONE]})
    assert unaccounted([bare], "x", "1.0", 1)[0].startswith(
        "kept finding x 1.0 'x 1' (prompt.lost, SP-AGENT-APPLY-NEW-MUST) has no cassette for "
        "ACP v1")
    assert unaccounted([bare], "y", "1.0", 1) == []


@pytest.mark.parametrize("doc, message", [
    ({"other": 1}, "unknown top-level key 'other'"),
    ({"kept": {}}, "'kept' must be an array of tables"),
    ({"kept": [1]}, "kept finding 1: not a table"),
    ({"kept": [{**ONE, "extra": 1}]}, "kept finding 1: unknown key 'extra'"),
    ({"kept": [{**ONE, "rule": ""}]}, "kept finding 1: 'rule' must be a non-empty string"),
    ({"kept": [{**ONE, "v1": 3}]}, "'v1' must be a cassette path"),
    ({"kept": [{**ONE, "v2": "none: no"}]}, "'v2' says none; say why in a sentence"),
    ({"kept": [{**ONE, "v1": "/etc/passwd"}]}, "'v1' must be a path inside the corpus root"),
    ({"kept": [{**ONE, "v1": "../../x.cassette"}]}, "must be a path inside the corpus root"),
    ({"kept": [{**ONE, "clock": ""}]}, "'clock' must say why"),
    ({"kept": [ONE, ONE]}, "finding 'x 1' of x 1.0 is kept twice"),
])
def test_a_bad_file_is_one_line_naming_the_entry(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(KeptError) as e:
        parse_kept(doc)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_broken_or_missing_file(tmp_path: Path) -> None:
    assert load_kept(tmp_path / KEPT_FILE) == []
    (tmp_path / KEPT_FILE).write_text("[[kept]\n")
    with pytest.raises(KeptError, match=r"kept\.toml"):
        load_kept(tmp_path / KEPT_FILE)
