"""docs/rules.md and acp_fuzz/core/rules.py: every rule acp-fuzz cites, quoted verbatim from
the RFD or the schema in the repository, and every finding at the level of its rule (#31 §1).
Reads nothing outside the checkout and never skips."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_oracles import H, P, Q, appended, only, sp

from acp_fuzz.core.client_oracles import CLIENT_CATALOG, judge_client
from acp_fuzz.core.findings import CATALOG, HARNESS_RULES, Finding
from acp_fuzz.core.payloads import INVALID_REASONS
from acp_fuzz.core.rules import DOCS, LEVELS, RFD, RULES, SCHEMA, by_id, render
from acp_fuzz.reference_agent.agent import BUGS, VARIANTS
from acp_fuzz.reference_client.client import BUGS as CLIENT_BUGS

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CITED = re.compile(r"\b[A-Z]+(?:-[A-Z0-9]+)+-(?:MUST|MUSTNOT|SHOULD|MAY|DEF)\b")


def squash(text: str) -> str:
    return " ".join(text.split())


def descriptions(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "description" and isinstance(v, str):
                yield squash(v)
            else:
                yield from descriptions(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from descriptions(v)


def schema_text() -> list[str]:
    out: list[str] = []
    for path in sorted((FIXTURES / "acp-schema").rglob("*.json")):
        out += descriptions(json.loads(path.read_text()))
    return out


def cited_in_code() -> set[str]:
    found: set[str] = set()
    for path in [*(ROOT / "acp_fuzz").rglob("*.py"), *(ROOT / "docs").glob("*.md")]:
        if path.name not in ("rules.py", "rules.md"):
            found |= set(CITED.findall(path.read_text()))
    return found


# -- the table ----------------------------------------------------------------------------------


def test_every_rule_cited_in_the_code_and_docs_is_listed_and_every_listed_is_cited() -> None:
    listed = [r.id for r in RULES]
    assert len(listed) == len(set(listed))
    assert cited_in_code() - set(listed) == set()
    assert set(listed) - cited_in_code() == set()


def test_docs_rules_md_is_generated_from_the_table() -> None:
    assert (ROOT / "docs" / "rules.md").read_text() == render(), \
        "regenerate: python -m acp_fuzz.core.rules > docs/rules.md"


def test_every_quote_is_verbatim_in_the_rfd_or_a_schema_description() -> None:
    rfd = squash((FIXTURES / "rfd-system-prompt.txt").read_text())
    schema = schema_text()
    for r in RULES:
        assert r.level in LEVELS and r.source in (RFD, SCHEMA, DOCS), r.id
        if r.source == RFD:
            assert squash(r.quote) in rfd, r.id
        elif r.source == SCHEMA:
            assert any(squash(r.quote) in d for d in schema), r.id
        else:  # no words in the repository to quote: say so, and quote nothing
            assert r.quote == "", r.id


def test_the_rfd_copy_has_the_corrected_deferral_words() -> None:
    rfd = squash((FIXTURES / "rfd-system-prompt.txt").read_text())
    assert "(for example, after compaction)" in rfd
    assert "for example at compaction" not in rfd
    for doc in (ROOT / "docs").glob("*.md"):
        assert "for example at compaction" not in doc.read_text(), doc.name


def test_the_harness_rules_are_listed_argued_and_acp_fuzz_s() -> None:
    rules = by_id()
    for rid in HARNESS_RULES:
        assert rid.startswith("ACPFUZZ-") and rid in rules
        assert "acp-fuzz's reading" in rules[rid].reading, rid
        assert rules[rid].source in (RFD, SCHEMA), rid


def _proof_ok(proof: str) -> bool:
    kind, _, rest = proof.partition(":")
    name = rest.split()[0] if rest.split() else ""
    if kind == "bug":
        return name in BUGS
    if kind == "client-bug":
        return name in CLIENT_BUGS
    if kind == "variant":
        return name in VARIANTS
    return kind.startswith("none") and len(rest.strip()) > 20


def test_every_oracle_is_listed_under_its_rules_with_a_bug_or_why_none() -> None:
    catalogs = {**CATALOG, **CLIENT_CATALOG}
    listed = {(o, r.id): proof for r in RULES for o, proof in r.oracles}
    for (oracle, rule), proof in listed.items():
        assert oracle in catalogs, (oracle, rule)
        assert _proof_ok(proof), (oracle, rule, proof)
    for o in catalogs.values():
        assert (o.id, o.rule) in listed, o.id
    for _, rule in INVALID_REASONS.values():
        assert ("payload.invalid-accepted", rule) in listed, rule
    quality = "\n".join(p.read_text() for p in (ROOT / "tests" / "quality").glob("*.py"))
    for (oracle, _), proof in listed.items():
        if proof.startswith(("bug:", "client-bug:")):
            bug = proof.split(":", 1)[1].split()[0]
            assert f'"{bug}"' in quality and oracle in quality, (oracle, bug)



def _literal(path: Path, name: str) -> Any:
    """The literal a quality test assigns to ``name`` (read, not imported: those modules
    start campaigns)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                assert node.value is not None
                return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in {path}")


#: The rule each known-shape bug's finding cites (test_known_shapes names the oracle only).
_KNOWN_RULE = {"sdk-options-win": "SP-AGENT-APPLY-NEW-MUST",
               "unstored-before-turn": "ACPFUZZ-RESEND-ACCEPTED-SHOULD",
               "load-erases-session": "ACPFUZZ-REATTACH-ADVERTISED-SHOULD",
               "cancel-errors": "CANCEL-AGENT-STOPREASON-MUST",
               "fault-ends-silently": "ACPFUZZ-FAILURE-VISIBLE-SHOULD"}


def test_no_proof_says_none_planted_where_a_quality_test_plants_the_bug() -> None:
    """A proof "none planted" goes stale when a planted bug comes to drive that oracle under
    that rule (eight did, issue #31): each bug the quality tests find under an (oracle, rule)
    must be the proof docs/rules.md gives for it, or another planted bug."""
    quality = ROOT / "tests" / "quality"
    planted = {(o, rule): bug for bug, (o, _, rule, _, _) in
               _literal(quality / "test_every_path.py", "PATHS").items()}
    for bug, _, oracle, _, _ in _literal(quality / "test_known_shapes.py", "FINDINGS").values():
        planted.setdefault((oracle, _KNOWN_RULE[bug]), bug)
    listed: dict[tuple[str, str], list[str]] = {}
    for r in RULES:
        for o, proof in r.oracles:
            listed.setdefault((o, r.id), []).append(proof)
    # A rule may list an oracle more than once (a planted bug per surface, and surfaces
    # judged on hand-built histories only): one planted bug among them is the proof.
    stale = {key: (bug, listed.get(key)) for key, bug in planted.items()
             if not any(p.startswith("bug:") for p in listed.get(key, []))}
    assert stale == {}


# -- levels at run time -------------------------------------------------------------------------


def level_error(f: Finding) -> str | None:
    """Why a finding's severity is not its rule's level (None: it is)."""
    rule = by_id().get(f.rule)
    if rule is None:
        return f"{f.oracle} cites {f.rule}, which docs/rules.md does not list"
    level = rule.level
    if f.severity == "SHOULD" or level == "SHOULD":
        ok = f.severity == level
    elif level == "MAY":
        ok = f.severity == "info"
    elif level == "DEF":
        # A definition: at info, or at MUST where it spells out a MUST rule it names.
        ok = f.severity == "info" or any(
            r.level in ("MUST", "MUSTNOT") and r.id in rule.reading for r in RULES)
    else:  # MUST, MUSTNOT: MUST, or info for a case acp-fuzz records and does not score
        ok = f.severity in ("MUST", "info")
    return None if ok else f"{f.oracle} {f.severity} cites {f.rule} ({LEVELS[level]})"


def level_errors(found: Iterable[Finding]) -> list[str]:
    return sorted({e for f in found if (e := level_error(f)) is not None})


def test_the_level_check_rejects_what_the_issue_names() -> None:
    assert level_error(Finding("prompt.altered", "SHOULD", "SP-LIFECYCLE-OMIT-MAY", "")) \
        is not None
    assert level_error(Finding("prompt.change-deferred", "SHOULD", "SP-LIFECYCLE-DEFER-MAY",
                               "")) is not None
    assert level_error(Finding("prompt.lost", "MUST", "SP-LIFECYCLE-CHANGE-SHOULD", ""))
    assert level_error(Finding("prompt.change-deferred", "info", "SP-LIFECYCLE-DEFER-MAY",
                               "")) is None


def test_a_kept_prompt_with_a_block_dropped_is_a_should_of_a_should_rule() -> None:
    h = H()
    h.new("A", sp("append", P, Q))
    h.step("resume", "A")  # omitted: keeping the stored prompt is the agent's choice
    h.prompt("A", system=appended(P))  # kept, but without Q
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-KEPT-WHOLE-SHOULD")
    assert level_errors(h.findings()) == []


def test_strict_reports_a_deferral_under_the_should_it_defers() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    assert only(h.findings(), "prompt.change-deferred").rule == "SP-LIFECYCLE-DEFER-MAY"
    f = only(h.findings(strict=True), "prompt.change-deferred")
    assert (f.severity, f.rule) == ("SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")
    assert level_errors(h.findings(strict=True)) == []


def _corpus() -> list[Path]:
    return sorted((ROOT / "cassettes").rglob("*.cassette"))


@pytest.mark.parametrize("strict", [False, True])
def test_no_finding_on_the_corpus_cites_a_rule_of_another_level(strict: bool) -> None:
    from acp_fuzz.core.baseline import Baseline
    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.core.oracles import evaluate

    found: list[Finding] = []
    for path in _corpus():
        c = read_cassette(path)
        if c.header.kind == "client-finding":
            found += judge_client(c.events).findings
            continue
        wire = c.header.settings.get("baseline")
        found += evaluate(c.events, baseline=Baseline.from_wire(wire) if wire else None,
                          strict=strict)
    assert len(found) > 20
    assert level_errors(found) == []
