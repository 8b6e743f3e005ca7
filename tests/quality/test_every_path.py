"""A planted bug for every report path that can fire (issue #31 §4): each ``--bug`` below
drives one ``report_as`` call site of an oracle in ``acp_fuzz/core/builtin/`` that no other
planted bug reaches, and a default campaign (``-x``, seed 0) finds it, confirms it 3/3 and
shrinks it to its known minimal length, naming the oracle, the rule and the severity (and
the message names the path).

``lifecycle.omitted-inconsistent`` is info (the agent's choice is recorded, never failed): a
campaign reports no info finding, so its bug is shown by its fixed minimal steps through
``run_steps``.

Slow like ``test_planted_bugs.py`` (a fresh agent per example); seeds come from
``ACP_FUZZ_QUALITY_SEEDS`` as there. Beside each bug: the example at which seed 0 found it
(a change to the covering examples or the strategy moves that number, not the minimum).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_fuzz.engine.campaign.search import CampaignResult, calibrate, run_steps
from tests.quality.test_planted_bugs import SEEDS, Track, first_failure, reference

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]


#: bug -> (oracle, severity, rule, shortest step sequence that shows it, a piece of the
#: finding's message that names the path). The comment above each names the report path it
#: drives and the minimal steps (each checked by running exactly those steps).
PATHS: dict[str, tuple[str, str, str, int, str]] = {
    # payload.py, payload.valid-rejected: new A (override P) is refused with -32602 (seed 0:
    # a covering example, the 6th example)
    "refuse-override": ("payload.valid-rejected", "MUST", "SP-AGENT-OVERRIDE-MUST", 1,
                        "got error -32602"),
    # turns.py _judge_defaults, append.replaced-default: new A (append P); prompt A -> P
    # alone, no defaults (seed 0: the 1st example)
    "append-drops-defaults": ("append.replaced-default", "MUST", "SP-AGENT-APPEND-ADDITIVE-DEF",
                              2, "append mode, yet only"),
    # protocol.py _answer, cancel.error (v1: the error answer): new A; cancel A -> -32603,
    # not "cancelled" (seed 0: the 1st example)
    "cancel-errors": ("cancel.error", "MUST", "CANCEL-AGENT-STOPREASON-MUST", 2,
                      "got an error instead of a stop reason"),
    # lifecycle.py _turn_answered, session.turn-failed: new A (P); prompt A (a turn works);
    # new B (a 65537+ character text), accepted; prompt B -> -32603 (seed 0: the 8th example)
    "turn-fails-on-64k": ("session.turn-failed", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST", 4,
                          "the first turn after the accepted prompt"),
    # turns.py _report_deferred, prompt.change-ignored after a cold load (an agent that
    # cannot be made to compact): new A (P); restart; resume A (Q); prompt A; prompt A -> P
    # (seed 0: a covering example, the 33rd)
    "cold-load-keeps-old": ("prompt.change-ignored", "SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD", 5,
                            "after the cold load"),
    # turns.py _report_missing, prompt.altered at SHOULD (escaped): new A (append a text
    # with <, > or "); prompt A (seed 0: the 57th example)
    "html-escapes-prompt": ("prompt.altered", "SHOULD", "ACPFUZZ-VERBATIM-SHOULD", 2,
                            "not in the request verbatim"),
    # turns.py _judge_vendor_also, prompt.altered at SHOULD (standard only): new A (append
    # P, _meta.systemPrompt V); prompt A -> P and V (seed 0: the 8th example)
    "vendor-meta-also": ("prompt.altered", "SHOULD", "ACPFUZZ-STANDARD-ONLY-SHOULD", 2,
                         "and so did the text of the vendor field"),
    # payload.py, payload.invalid-accepted, the block class: new A ([text, image]) accepted
    # (seed 0: a covering example, the 25th)
    "skip-unsupported-blocks": ("payload.invalid-accepted", "MUST",
                                "SP-AGENT-UNSUPPORTED-BLOCK-MUST", 1, "(block-not-text)"),
    # payload.py, payload.invalid-accepted, the shape class: new A (a bare string) accepted
    # (seed 0: a covering example, the 25th)
    "accept-draft-string": ("payload.invalid-accepted", "SHOULD", "ACPFUZZ-SCHEMA-SHAPE-SHOULD",
                            1, "(draft-string)"),
    # lifecycle.py _rejected_text, reject.side-effect on rejected text: new A (P); load A
    # (invalid, with text T), refused; prompt A -> T (seed 0: a covering example, the 26th)
    "rejected-text-applied": ("reject.side-effect", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
                              3, "reached the model"),
    # lifecycle.py _turn_answered, reject.side-effect on a refused reattach: new A; prompt
    # A; load A (invalid), refused; prompt A -> -32002 (seed 0: the 65th example)
    "refused-reattach-unloads": ("reject.side-effect", "MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST",
                                 4, "its turn fails after the refused request"),
    # isolation.py _mixed, prompt.leak through a request tied to no session: new A (P);
    # new B (Q) -> the digest request holds P and Q (seed 0: the 8th example)
    "untied-digest": ("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", 2,
                      "tied to no session"),
    # protocol.py _frame, protocol.malformed: new A; prompt A -> stopReason "endTurn"
    # (seed 0: the 1st example; tests/integration/test_malformed_in_the_quick_loop.py shows
    # it in the quick loop)
    "camelcase-stop-reason": ("protocol.malformed", "MUST", "FR-WIRE-NDJSON-MUST", 2,
                              "breaks the schema"),
}


def _cases() -> list[object]:
    return [pytest.param(bug, seed, id=f"{bug}-seed{seed}") for seed in SEEDS for bug in PATHS]


@pytest.mark.parametrize("bug, seed", _cases())
def test_every_report_path_has_a_planted_bug_found_and_shrunk(bug: str, seed: int,
                                                              tmp_path: Path,
                                                              no_orphans: Track) -> None:
    assert_found_and_shrunk(first_failure(reference(bug), tmp_path, seed=seed), bug, PATHS[bug])


def assert_found_and_shrunk(result: CampaignResult, bug: str,
                            path: tuple[str, str, str, int, str]) -> None:
    """``result`` (a ``-x`` campaign) found ``bug``, confirmed it 3/3 and shrunk it to its
    minimum, with a finding of the oracle, severity and rule of ``path`` whose message
    names its path."""
    oracle, severity, rule, minimum, names = path
    assert result.reports, f"{bug} not found in {result.examples_run} examples"
    report = result.reports[0]
    assert report.status == "failed" and report.reproduced == report.runs == 3
    found = [f for f in report.findings if f.oracle == oracle and names in f.message]
    assert found, [(f.oracle, f.message) for f in report.findings]
    assert (found[0].severity, found[0].rule) == (severity, rule)
    assert result.exit_code == (1 if severity == "MUST" else 0)
    assert len(report.steps) == minimum, report.steps


#: A prompt of the fixed sequences below.
P = {"mode": "append", "content": [{"type": "text", "text": "You are a code review specialist. "
                                    "Focus on security vulnerabilities."}]}
#: --bug omit-falls-back-when-talked: the first omitted resume of A keeps P (A has no
#: conversation yet), the second falls back to the defaults (A has one). Five steps: each
#: choice needs a turn to show it.
OMITTED = [{"op": "new", "session": "A", "cwd": "distinct", "systemPrompt": P},
           {"op": "resume", "session": "A"}, {"op": "prompt", "session": "A"},
           {"op": "resume", "session": "A"}, {"op": "prompt", "session": "A"}]


def test_an_inconsistent_choice_for_an_omitted_prompt_is_recorded(no_orphans: Track) -> None:
    """turns.py _report_choice, ``lifecycle.omitted-inconsistent``: info, so a campaign,
    which confirms and shrinks failures, never reports it; its fixed minimal steps show it."""
    spec = reference("omit-falls-back-when-talked")
    _, _, baseline = calibrate(spec)
    _, found = run_steps(spec, OMITTED, baseline=baseline)
    (f,) = [f for f in found if f.oracle == "lifecycle.omitted-inconsistent"]
    assert (f.severity, f.rule) == ("info", "SP-LIFECYCLE-OMIT-MAY")
    assert (f.evidence["first"]["choice"], f.evidence["now"]["choice"]) == ("kept", "default")
    assert [x for x in found if x.severity != "info"] == []
    _, clean = run_steps(reference(), OMITTED, baseline=baseline)
    assert "lifecycle.omitted-inconsistent" not in {x.oracle for x in clean}


#: --bug escape-changed-prompt (issue #31 §5): A has no prompt of its own, so the defaults
#: alone fit A's request, and the escaped new prompt read as "the old one still in use".
CHANGED = [{"op": "new", "session": "A", "cwd": "distinct"},
           {"op": "load", "session": "A", "systemPrompt": {"mode": "append", "content": [
               {"type": "text", "text": "Answer only in <b>French</b>, whatever the question."}]}},
           {"op": "prompt", "session": "A"}]


def test_a_changed_prompt_applied_escaped_is_altered_not_the_old_one_in_use(
        no_orphans: Track) -> None:
    """turns.py _report_missing by way of _altered_change: the finding says what happened
    to the new prompt, at the severity escaping has on session/new. A default campaign finds
    it on the same path (seed 0: the 63rd example, shrunk to new A (null); load A (override,
    an escaped text); prompt A); these fixed steps pin it without the search."""
    spec = reference("escape-changed-prompt")
    _, _, baseline = calibrate(spec)
    _, found = run_steps(spec, CHANGED, baseline=baseline)
    (f,) = [f for f in found if f.oracle == "prompt.altered"]
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-VERBATIM-SHOULD")
    assert [r["as"] for r in f.evidence["received"]] == ["escaped"]
    assert not {"prompt.change-deferred", "prompt.change-ignored"} & {x.oracle for x in found}


#: --bug load-erases-session (gemini-cli 0.61.0, issue #31 §3): the first load of A is
#: refused and has erased A's stored conversation; a later load succeeds, and what it
#: restores lacks the turn before the refusal while the turn after it is there.
DESTROYED = [{"op": "new", "session": "A", "cwd": "distinct"}, {"op": "prompt", "session": "A"},
             {"op": "load", "session": "A"}, {"op": "prompt", "session": "A"},
             {"op": "load", "session": "A"}, {"op": "prompt", "session": "A"}]


def test_a_refused_load_that_destroyed_the_conversation_is_its_own_finding(
        no_orphans: Track) -> None:
    """lifecycle.py _history, ``session.history-destroyed`` (MUST,
    ACPFUZZ-CONVERSATION-KEPT-MUST): the refused load named as the cause."""
    spec = reference("load-erases-session")
    _, _, baseline = calibrate(spec)
    _, found = run_steps(spec, DESTROYED, baseline=baseline)
    (f,) = [f for f in found if f.oracle.startswith("session.history")]
    assert (f.oracle, f.severity, f.rule) == ("session.history-destroyed", "MUST",
                                              "ACPFUZZ-CONVERSATION-KEPT-MUST")
    assert f.evidence["failed_reattach"] == ["3: session/load A (systemPrompt omitted)"]
    assert len(f.evidence["missing"]) == 1 and len(f.evidence["present"]) == 1
    _, clean = run_steps(reference(), DESTROYED, baseline=baseline)
    assert [x for x in clean if x.severity != "info"] == []
