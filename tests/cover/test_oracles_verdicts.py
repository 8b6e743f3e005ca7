"""The severity table of docs/oracles.md, one test per row, on hand-built histories.

Call OLD what a session sent to the model before a lifecycle request, NEW the prompt the
request carried and the agent accepted, and X what the next turn shows (issue #10):

* X is NEW: nothing. X is OLD: ``prompt.change-deferred`` (info) right after the change,
  ``prompt.change-ignored`` (SHOULD) after a cold load in a new process; never ``prompt.lost``.
* X is neither: ``prompt.lost`` (MUST), whether NEW was a change or the same prompt re-sent.
* Default checks take their severity from how the prompt arrived; formatting is never MUST;
  every finding cites a rule that states it; the baseline must be substantial to judge by.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_oracles import ALL_CAPS, BASE, DEFAULTS, H, P, Q, R, appended, ids, only, sp
from test_rules import level_error

from acp_fuzz.core.findings import CATALOG, HARNESS_RULES, Finding
from acp_fuzz.core.oracles import (
    MIN_BASELINE_CHARS,
    MIN_BASELINE_LINES,
    Baseline,
    evaluate,
    is_instruction,
    learn_baseline,
)
from acp_fuzz.core.payloads import INVALID_REASONS, OMIT, classify
from acp_fuzz.core.rules import by_id
from acp_fuzz.core.steps import nonce_for


def not_info(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity != "info"]


# -- X is NEW / OLD / neither ----------------------------------------------------------------


def test_x_is_old_right_after_a_warm_change_is_deferred_info() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-deferred")
    assert (f.severity, f.rule) == ("info", "SP-LIFECYCLE-DEFER-MAY")
    assert f.evidence["requested"] == Q and f.evidence["in_use"] == P
    assert not_info(h.findings()) == []


def test_a_deferred_change_applied_on_a_later_turn_is_no_finding_at_all() -> None:
    # Today (before issue #10) this was prompt.lost SHOULD citing SP-LIFECYCLE-OMIT-MAY.
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(Q))
    assert h.findings(strict=True) == []


def test_x_is_old_after_a_warm_change_then_restart_and_omitted_load_is_change_ignored() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(P))
    h.step("restart")
    h.step("load", "A")
    h.prompt("A", system=appended(P))
    h.prompt("A", system=appended(P))
    f = only(h.findings(), "prompt.change-ignored")
    assert (f.severity, f.rule) == ("SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD")
    assert any("restart" in line for line in f.evidence["steps"])
    assert "prompt.lost" not in ids(h.findings())


def test_an_agent_that_defers_every_change_until_a_cold_load_gives_no_must() -> None:
    # "defer-forever-correct": keeps the old prompt in a live process, applies the change when
    # it rebuilds the session after a restart (whether the load re-sends it or not).
    for resend in (True, False):
        h = H()
        h.new("A", sp("append", P))
        h.step("resume", "A", systemPrompt=sp("append", Q))
        h.prompt("A", system=appended(P))
        h.prompt("A", system=appended(P))
        h.step("restart")
        h.step("load", "A", **({"systemPrompt": sp("append", Q)} if resend else {}))
        h.prompt("A", system=appended(Q))
        found = h.findings()
        assert not_info(found) == [], found
        assert "prompt.lost" not in ids(found)
        assert "prompt.change-deferred" not in ids(found)  # withdrawn: the change showed


def test_x_is_neither_after_a_resent_prompt_is_lost_must() -> None:
    h = H()
    h.new("A", sp("override", P))
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("override", P))
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")
    assert [ln.split(": ", 1)[1] for ln in f.evidence["steps"]][:3] == [
        "session/new A (systemPrompt 'override', 1 block(s))", "restart the agent process",
        "session/load A (systemPrompt 'override', 1 block(s))"]


@pytest.mark.parametrize("restart", [False, True])
def test_x_is_neither_after_a_changed_prompt_is_lost_must(restart: bool) -> None:
    h = H()
    h.new("A", sp("append", P))
    if restart:
        h.step("restart")
    h.step("resume", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended())
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("MUST", "SP-AGENT-ERROR-NOSIDEEFFECT-MUST")
    assert f.evidence["expected"] == Q


def test_a_change_from_the_defaults_kept_back_is_a_deferral() -> None:
    # OLD may be the defaults: a session made without a prompt.
    h = H()
    h.new("A")
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended())
    assert only(h.findings(), "prompt.change-deferred").evidence["in_use"] \
        == "(the default instructions)"
    assert not_info(h.findings()) == []


def test_a_fork_with_a_changed_prompt_may_defer_and_must_not_lose() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="B", systemPrompt=sp("append", Q))
    h.prompt("B", system=appended(P))
    assert only(h.findings(), "prompt.change-deferred").session == "B"
    h.new("C", sp("append", P))
    h.step("fork", "C", new="D", systemPrompt=sp("append", R))
    h.prompt("D", system=appended())
    assert only(h.findings(), "prompt.lost").severity == "MUST"


def test_a_kept_prompt_that_vanishes_after_a_compaction_is_a_late_fallback_info() -> None:
    # The resume omitted the prompt, so falling back to the defaults is the agent's right
    # (SP-LIFECYCLE-OMIT-MAY), and it may land late, at the next rebuild: codex-acp and
    # claude-agent-acp keep the old prompt until their next compaction (v2 matrix,
    # 2026-12-02). Reported as the inconsistency the rule asks to check, at info; a MUST
    # here was a false alarm.
    from test_oracles_compaction import compact

    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A")
    h.prompt("A", system=appended(P))  # the agent kept it (its choice)
    compact(h, "A")
    h.prompt("A", system=appended())  # and fell back at the rebuild
    assert "prompt.lost" not in ids(h.findings())
    f = only(h.findings(), "lifecycle.omitted-inconsistent")
    assert (f.severity, f.rule) == ("info", "SP-LIFECYCLE-OMIT-MAY")
    assert "first kept the stored prompt (from step 1), then fell back" in f.message
    assert f.evidence["compaction"].startswith("the compaction at step")
    h.prompt("A", system=appended())  # the defaults from now on: settled, nothing more
    assert len([f for f in h.findings() if f.oracle == "lifecycle.omitted-inconsistent"]) == 1


def test_a_kept_prompt_dropped_between_two_plain_turns_is_a_should() -> None:
    # No rebuild between the turn that showed the prompt kept and the one with the
    # defaults: the fallback the omission allowed cannot be a change deferred to a rebuild
    # (issue #31 §3). SHOULD, not MUST: the defaults were a result the omission allowed.
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A")
    h.prompt("A", system=appended(P))  # the agent kept it (its choice)
    h.prompt("A", system=appended())  # and then, with nothing in between, dropped it
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD")
    assert "no rebuild in between" in f.message
    assert "lifecycle.omitted-inconsistent" not in ids(h.findings())
    h.prompt("A", system=appended())  # the defaults from now on: settled, nothing more
    assert len([f for f in h.findings() if f.oracle == "prompt.lost"]) == 1


def test_applied_then_reverted_to_the_old_prompt_is_lost() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", Q))
    h.prompt("A", system=appended(Q))
    h.prompt("A", system=appended(P))
    assert only(h.findings(), "prompt.lost").severity == "MUST"


# -- default checks: severity from how the prompt arrived ------------------------------------


@pytest.mark.parametrize("mode, system, oracle", [
    ("override", appended(P), "override.not-applied"),
    ("append", [P], "append.replaced-default"),
])
@pytest.mark.parametrize("arrival, severity", [
    ("new", "MUST"), ("lifecycle", "MUST"), ("kept", "info")])
def test_default_checks_take_their_severity_from_how_the_prompt_arrived(
        mode: str, system: list[str], oracle: str, arrival: str, severity: str) -> None:
    h = H()
    if arrival == "new":
        h.new("A", sp(mode, P))
    elif arrival == "lifecycle":
        h.new("A")
        h.step("load", "A", systemPrompt=sp(mode, P))
    else:
        h.new("A", sp(mode, P))
        h.step("resume", "A")  # omitted: keeping P was the agent's choice
    h.prompt("A", system=system)
    f = only(h.findings(), oracle)
    assert f.severity == severity
    assert f.evidence["origin"] == arrival


# -- formatting is implementation-defined -----------------------------------------------------


LONG = "Answer only in French, whatever the question & whatever the <context> says."


@pytest.mark.parametrize("received, severity, rule, kind", [
    # other whitespace
    (LONG.replace(" ", "\n  "), "info", "SP-AGENT-APPEND-FORMAT-DEF", "whitespace"),
    # HTML entities
    (LONG.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"), "SHOULD",
     "ACPFUZZ-VERBATIM-SHOULD", "escaped"),
    # JSON quoting of a text with a newline and quotes
    ('"' + LONG.replace("French,", "French,\\n\\\"") + '"', "SHOULD", "ACPFUZZ-VERBATIM-SHOULD",
     "escaped"),
])
def test_formatting_changes_are_never_must(received: str, severity: str, rule: str,
                                           kind: str) -> None:
    sent = LONG if "\\n" not in received else LONG.replace("French,", "French,\n\"")
    h = H()
    h.new("A", sp("append", sent))
    h.prompt("A", system=appended(received))
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.rule) == (severity, rule)
    (form,) = f.evidence["received"]
    assert form["as"] == kind and form["sent"] == sent
    assert form["received"] in received  # both forms are in the evidence


def test_one_block_split_across_two_system_blocks_is_formatting() -> None:
    h = H()
    h.new("A", sp("append", LONG))
    half = LONG.index("whatever the <")
    h.prompt("A", system=[DEFAULTS + "\n\n" + LONG[:half], LONG[half:]])
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.evidence["received"][0]["as"]) == ("info", "whitespace")
    assert " | " in f.evidence["received"][0]["received"]


def test_a_changed_word_is_not_formatting() -> None:
    h = H()
    h.new("A", sp("append", P, LONG))
    h.prompt("A", system=appended(P, LONG.replace("French", "German")))
    f = only(h.findings(), "prompt.altered")
    assert f.severity == "MUST" and "received" not in f.evidence


# -- rules --------------------------------------------------------------------------------------


def test_every_rule_cited_is_in_docs_rules_md_and_harness_rules_are_argued() -> None:
    # The table is the repository's own (acp_fuzz/core/rules.py, rendered as docs/rules.md);
    # tests/cover/test_rules.py checks its quotes and every id the code cites.
    known = set(by_id())
    cited = {o.rule for o in CATALOG.values()} | {r for _, r in INVALID_REASONS.values()}
    cited |= {"SP-AGENT-ERROR-NOSIDEEFFECT-MUST", "SP-AGENT-APPEND-FORMAT-DEF",
              "ACPFUZZ-VERBATIM-SHOULD", "SP-LIFECYCLE-CHANGE-SHOULD",
              "ACPFUZZ-KEPT-WHOLE-SHOULD"}
    assert cited - known == set()
    assert set(HARNESS_RULES) <= known
    doc = (Path(__file__).resolve().parents[2] / "docs" / "oracles.md").read_text()
    assert [r for r in HARNESS_RULES if f"`{r}`" not in doc] == []
    assert all(r.startswith("ACPFUZZ-") for r in HARNESS_RULES)


def test_no_catalog_severity_cites_a_rule_of_another_level() -> None:
    # The defaults; test_rules.py checks the findings themselves, at run time.
    pairs = [(o.id, o.severity, o.rule) for o in CATALOG.values()]
    pairs += [("payload.invalid-accepted", sev, rule) for sev, rule in INVALID_REASONS.values()]
    bad = [(oracle, sev, rule) for oracle, sev, rule in pairs
           if level_error(Finding(oracle, sev, rule, "")) is not None]
    assert bad == []


def test_duplicated_cites_no_client_rule_and_leak_has_its_own() -> None:
    assert "CLIENT" not in CATALOG["prompt.duplicated"].rule
    assert CATALOG["prompt.leak"].rule == "ACPFUZZ-SESSION-ISOLATION-MUST"
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A", systemPrompt=sp("append", P))
    h.prompt("A", system=appended(P, P))
    assert only(h.findings(), "prompt.duplicated").rule == "ACPFUZZ-PROMPT-ONCE-SHOULD"


@pytest.mark.parametrize("payload", ["a draft-era string", [{"type": "text", "text": P}], 42])
def test_draft_shapes_accepted_are_should_with_a_should_rule(payload: Any) -> None:
    h = H()
    h.new("A", payload)
    f = only(h.findings(), "payload.invalid-accepted")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-SCHEMA-SHAPE-SHOULD")


# -- lifecycle.omitted-inconsistent -------------------------------------------------------------


def test_one_session_keeps_and_another_falls_back_in_the_same_situation() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A")
    h.prompt("A", system=appended(P))  # kept
    h.new("B", sp("append", Q))
    h.step("resume", "B")
    h.prompt("B", system=appended())  # fell back
    f = only(h.findings(), "lifecycle.omitted-inconsistent")
    assert (f.severity, f.rule, f.session) == ("info", "SP-LIFECYCLE-OMIT-MAY", "B")
    assert (f.evidence["first"]["session"], f.evidence["first"]["choice"]) == ("A", "kept")
    assert (f.evidence["now"]["session"], f.evidence["now"]["choice"]) == ("B", "default")
    assert f.evidence["first"]["steps"][-1].endswith("session/resume A (systemPrompt omitted)")
    assert f.evidence["now"]["steps"][-1].endswith("session/resume B (systemPrompt omitted)")
    assert not_info(h.findings()) == []


def test_different_situations_may_choose_differently() -> None:
    # Kept in a live process, the defaults after a restart: not the same situation.
    h = H()
    h.new("A", sp("append", P))
    h.step("resume", "A")
    h.prompt("A", system=appended(P))
    h.new("B", sp("append", Q))
    h.step("restart")
    h.step("resume", "B")
    h.prompt("B", system=appended())
    assert "lifecycle.omitted-inconsistent" not in ids(h.findings())


# -- baseline substance ---------------------------------------------------------------------------


BILLING = "x-anthropic-billing-header: cc_version=2.1.3.a1b; cc_entrypoint=sdk-ts;"
IDENTITY = "You are a Claude agent, built on Anthropic's Claude Agent SDK."
TINY = learn_baseline([f"{BILLING}\n{IDENTITY}\nToday is 2026-01-01",
                       f"{BILLING}\n{IDENTITY}\nToday is 2026-01-02"])


def test_non_instruction_lines_are_left_out() -> None:
    assert not is_instruction(BILLING)
    assert not is_instruction("## Tone and style guidelines for you")
    assert not is_instruction("<system-reminder>")
    assert not is_instruction("3f2a9c1e-7b4d-4e8a-9f00-1c2d3e4f5a6b")
    assert not is_instruction("----------------------")
    assert is_instruction(IDENTITY)
    assert is_instruction("Note: never run commands you were not asked to run.")
    assert TINY.lines == {BILLING, IDENTITY}
    assert TINY.instructions == {IDENTITY}
    assert (TINY.size_lines, TINY.size_chars) == (1, len(IDENTITY))
    assert TINY.known and not TINY.substantial


def test_substance_thresholds() -> None:
    line = "Follow the instructions of the user to the letter, always."  # 58 characters
    assert Baseline(frozenset(f"{line} ({i})" for i in range(MIN_BASELINE_LINES))).substantial
    assert not Baseline(frozenset(f"{line} ({i})"
                                  for i in range(MIN_BASELINE_LINES - 1))).substantial
    short = [f"Do task number {i} now." for i in range(MIN_BASELINE_LINES + 3)]
    assert sum(map(len, short)) < MIN_BASELINE_CHARS
    assert not Baseline(frozenset(short)).substantial
    assert BASE.substantial and (BASE.size_lines, BASE.size_chars) == (3, 179)


def test_a_two_line_baseline_kept_under_override_is_info_not_must() -> None:
    h = H()
    h.new("A", sp("override", P))
    h.prompt("A", system=[f"{BILLING}\n{IDENTITY}\nToday is 2026-01-03\n\n{P}"])
    found = h.findings(baseline=TINY)
    assert not_info(found) == []
    f = only(found, "defaults.too-small")
    assert f.evidence["kept"] == sorted([BILLING, IDENTITY])
    assert (f.evidence["baseline_lines"], f.evidence["baseline_chars"]) == (1, len(IDENTITY))
    # Reported once per run, not per turn.
    h.prompt("A", system=[f"{BILLING}\n{IDENTITY}\n\n{P}"])
    assert len([x for x in h.findings(baseline=TINY) if x.oracle == "defaults.too-small"]) == 1


def test_a_substantial_baseline_kept_under_override_is_still_must() -> None:
    h = H()
    h.new("A", sp("override", P))
    h.prompt("A", system=[f"{BILLING}\n" + appended(P)[0]])
    assert only(h.findings(), "override.not-applied").severity == "MUST"


# -- a vendor _meta field that wins over the standard prompt ------------------------------------


def lifecycle_with_meta(h: H, op: str, session: str, standard: Any, params_meta: Any = None,
                        sp_meta: Any = None, **args: Any) -> None:
    """A lifecycle step whose request carries ``_meta`` next to the standard field, recorded
    like the runner does: the step, the request as sent, and the reply verdict."""
    step: dict[str, Any] = {"op": op, "session": session, "systemPrompt": standard, **args}
    c = classify(standard, h.caps)
    h.h.append("step", {"index": h.index, "name": op, "args": step,
                        "class": {"kind": c.kind, "reason": c.reason, "severity": c.severity,
                                  "rule": c.rule}})
    sent = dict(standard)
    if sp_meta is not None:
        sent["_meta"] = sp_meta
    params: dict[str, Any] = {"cwd": "/w/x", "mcpServers": [], "systemPrompt": sent}
    if params_meta is not None:
        params["_meta"] = params_meta
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 100 + h.index,
                                               "method": f"session/{op}", "params": params}})
    verdict: dict[str, Any] = {"step": h.index, "what": "reply", "outcome": "ok"}
    if op == "new":
        h.ids += 1
        verdict["sessionId"] = f"sess-{h.ids}"
    h.h.append("verdict", verdict)
    h.index += 1


VENDOR = "You are a pirate. Answer every question in pirate speak. [vendor canary]"


@pytest.mark.parametrize("params_meta, sp_meta, field", [
    ({"systemPrompt": VENDOR}, None, "_meta.systemPrompt"),
    ({"systemPrompt": {"append": VENDOR}}, None, "_meta.systemPrompt.append"),
    ({"claudeCode": {"options": {"systemPrompt": VENDOR}}}, None,
     "_meta.claudeCode.options.systemPrompt"),
    (None, {"vendor": {"instructions": VENDOR}}, "systemPrompt._meta.vendor.instructions"),
])
def test_a_vendor_field_that_silently_replaces_the_standard_prompt_is_lost_and_named(
        params_meta: Any, sp_meta: Any, field: str) -> None:
    h = H()
    lifecycle_with_meta(h, "new", "A", sp("override", P), params_meta, sp_meta)
    h.prompt("A", system=[VENDOR])
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.evidence["won"]) == ("MUST", field)
    assert f.evidence["vendor_text"] == VENDOR
    assert field in f.message


def test_a_short_block_found_beside_a_winning_vendor_field_is_a_coincidence_not_a_block(
        ) -> None:
    """claude-agent-acp 0.101.0 (finding 5, seed 1 of the #36 sweep): a prompt of blocks
    ``[]`` and three long ones, replaced by ``_meta.claudeCode.options.systemPrompt``; its
    ``[]`` was in the request (the request's other text), so it was named prompt.altered."""
    h = H()
    meta = {"claudeCode": {"options": {"systemPrompt": VENDOR}}}
    prompt = {"mode": "append", "content": [{"type": "text", "text": "[]"},
                                            {"type": "text", "text": P}]}
    lifecycle_with_meta(h, "new", "A", prompt, meta)
    h.prompt("A", system=[VENDOR, "tools: []"])
    f = only(h.findings(), "prompt.lost")
    assert (f.severity, f.evidence["won"]) == ("MUST", "_meta.claudeCode.options.systemPrompt")
    assert "prompt.altered" not in ids(h.findings())


def test_a_vendor_field_that_wins_on_load_is_lost_not_deferred() -> None:
    # Without the vendor text counted as the session's own, "defaults + vendor text" would
    # pass for the old state (a deferral).
    h = H()
    h.new("A")
    lifecycle_with_meta(h, "load", "A", sp("append", Q), {"systemPrompt": {"append": VENDOR}})
    h.prompt("A", system=appended(VENDOR))
    f = only(h.findings(), "prompt.lost")
    assert f.evidence["won"] == "_meta.systemPrompt.append"


def test_the_standard_prompt_winning_over_vendor_fields_is_fine() -> None:
    h = H()
    lifecycle_with_meta(h, "new", "A", sp("append", P), {"systemPrompt": VENDOR})
    h.prompt("A", system=appended(P))
    assert h.findings() == []


def test_a_vendor_field_used_besides_the_standard_prompt_is_altered_and_named() -> None:
    """Both texts reach the model (#22 §4): the standard prompt is there, and so is the
    legacy carrier's. SHOULD, not MUST: an agent may know its own legacy key."""
    h = H()
    lifecycle_with_meta(h, "new", "B", sp("append", Q), {"systemPrompt": {"append": VENDOR}})
    h.prompt("B", system=appended(Q, VENDOR))
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-STANDARD-ONLY-SHOULD")
    assert f.evidence["also"] == "_meta.systemPrompt.append" and f.evidence["vendor_text"] == VENDOR
    assert "_meta.systemPrompt.append" in f.message and f.session == "B"


def test_a_vendor_field_repeating_the_standard_text_is_not_counted_twice() -> None:
    h = H()
    lifecycle_with_meta(h, "new", "A", sp("append", P), {"systemPrompt": P})
    h.prompt("A", system=appended(P))
    assert h.findings() == []


def test_a_legacy_dialect_alone_is_no_conflict() -> None:
    # claude-meta: the prompt travels in _meta only; no standard field, nothing to weigh.
    h = H()
    h.h.append("step", {"index": 0, "name": "new", "args": {"op": "new", "session": "A"},
                        "class": {"kind": "omitted", "reason": "", "severity": "", "rule": ""}})
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                               "params": {"cwd": "/w", "mcpServers": [],
                                                          "_meta": {"systemPrompt": VENDOR}}}})
    h.h.append("verdict", {"step": 0, "what": "reply", "outcome": "ok", "sessionId": "s"})
    h.index = 1
    h.prompt("A", system=[VENDOR])
    assert h.findings() == []


def test_builder_sanity() -> None:
    # The helpers above record what the runner records (used by every test here).
    assert nonce_for("A", 1) != nonce_for("A", 2)
    assert ALL_CAPS.system_prompt and classify(OMIT, ALL_CAPS).kind == "omitted"


# -- offline replay re-judges: the classification is the oracles', not the recording's ----------


def test_offline_replay_reclassifies_instead_of_repeating_the_recorded_class(
        tmp_path: Path) -> None:
    import dataclasses

    from acp_fuzz.core.cassette import read_cassette, write_cassette
    from acp_fuzz.core.history import Event
    from acp_fuzz.engine.campaign.replay import offline_check

    root = Path(__file__).resolve().parents[2]
    c = read_cassette(root / "cassettes" / "reference" / "accept-unknown-mode.cassette")
    edited = []
    for e in c.events:
        if e.kind == "step" and "class" in e.data:
            # A hand edit (or an older classifier) says the unknown mode was valid.
            e = Event(e.seq, e.t, e.kind, {**e.data, "class": {
                "kind": "valid", "reason": "", "severity": "", "rule": ""}})
        edited.append(e)
    path = write_cassette(tmp_path / "edited.cassette", dataclasses.replace(c.header),
                          edited, c.attachments)
    result = offline_check(path)
    assert (result.verdict, result.oracles) == ("FAILED", ["payload.invalid-accepted"])
    (f,) = [f for f in result.findings[0] if f.oracle == "payload.invalid-accepted"]
    assert (f.severity, f.rule, f.evidence["reason"]) == (
        "MUST", "SP-AGENT-UNKNOWN-MODE-MUST", "mode-unknown")


def test_every_corpus_cassette_still_reads_and_gives_its_recorded_verdict_offline() -> None:
    from acp_fuzz.engine.campaign.replay import offline_check

    root = Path(__file__).resolve().parents[2] / "cassettes"
    clients = root / "real" / "clients"
    paths = sorted(p for p in root.rglob("*.cassette") if not p.is_relative_to(clients))
    assert len(paths) >= 11
    expected = {p: "FIXED" if p.relative_to(root).as_posix() in WITHDRAWN else "FAILED"
                for p in paths}
    assert {p: offline_check(p).verdict for p in paths} == expected


#: Corpus cassettes whose recorded finding a later rule withdrew, and why. Each still reads,
#: and its offline verdict is FIXED (the finding is gone), which this list makes deliberate.
#: Those a matrix run wrote are kept under cassettes/reviewed/ (a regenerated matrix writes
#: its cassettes afresh, and the evidence of a review must not go with the old ones).
WITHDRAWN = {
    # #22 §2: both agents advertise a `compact` command, so compaction, not a cold load, is
    # the rebuild that ends a deferral; one turn on the old prompt after a cold load is now
    # prompt.change-deferred (info). docs/findings.md findings 3 and 4, re-checked there.
    "real/codex-acp/prompt.change-ignored.cassette",
    "real/claude-agent-acp/prompt.change-ignored.cassette",
    "reviewed/matrix/codex-acp/prompt.change-ignored-seed0.cassette",
    "reviewed/matrix/claude-agent-acp/prompt.change-ignored-seed0.cassette",
    # The resume omitted the prompt, the agent kept it for a turn, then fell back to its
    # defaults at the next compaction: the late fallback SP-LIFECYCLE-OMIT-MAY allows
    # (lifecycle.omitted-inconsistent, info), reported MUST by the first v2 matrix run with
    # the compaction rows (2026-12-02), a false alarm caught in review.
    "reviewed/matrix-v2/codex-acp/prompt.lost-seed0.cassette",
    "reviewed/matrix-v2/claude-agent-acp/prompt.lost-seed0.cassette",
    # #33 §1: codex-acp offers its MCP resource tools to any session with an MCP server; the
    # first scope.tools-changed compared such a session (append) with a plain one without a
    # server (the #36 sweep, seed 1, 2026-12-04), a false alarm caught in review.
    "reviewed/matrix/codex-acp/scope.tools-changed-seed1.cassette",
}


def _withdrawn(oracle: str) -> list[tuple[str, list[Finding]]]:
    """Each withdrawn cassette that recorded ``oracle``, with what the oracles say of it now."""
    from acp_fuzz.core.cassette import read_cassette

    root = Path(__file__).resolve().parents[2] / "cassettes"
    out = []
    for rel in sorted(r for r in WITHDRAWN if oracle in r):
        c = read_cassette(root / rel)
        out.append((rel, evaluate(c.events,
                                  baseline=Baseline.from_wire(c.header.settings["baseline"]))))
    return out


def test_the_withdrawn_cold_load_findings_are_deferrals_of_an_agent_that_can_compact() -> None:
    for rel, found in _withdrawn("prompt.change-ignored"):
        assert "prompt.change-ignored" not in ids(found), rel
        f = only(found, "prompt.change-deferred")
        assert f.severity == "info" and "rebuilt_by" not in f.evidence, rel


def test_the_withdrawn_compaction_losses_are_late_fallbacks_after_an_omitted_prompt() -> None:
    for rel, found in _withdrawn("prompt.lost"):
        assert "prompt.lost" not in ids(found), rel
        f = only(found, "lifecycle.omitted-inconsistent")
        assert f.severity == "info" and f.evidence["compaction"].startswith(
            "the compaction at step"), rel
        assert [x.severity for x in found if x.severity != "info"] == [], rel


def test_the_withdrawn_tools_change_was_a_session_with_an_mcp_server() -> None:
    for rel, found in _withdrawn("scope.tools-changed"):
        assert "scope.tools-changed" not in ids(found), rel
        assert [x.severity for x in found if x.severity != "info"] == [], rel


def test_every_client_cassette_still_gives_its_recorded_findings() -> None:
    """cassettes/real/clients/: the client oracles, run again on the recorded frames, find
    what the cassette says was found (acpx's legacy _meta prompt)."""
    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.core.client_oracles import judge_client

    paths = sorted((Path(__file__).resolve().parents[2] / "cassettes" / "real" / "clients")
                   .rglob("*.cassette"))
    assert paths
    for p in paths:
        c = read_cassette(p)
        assert c.header.kind == "client-finding", p
        found = {f.oracle for f in judge_client(c.events).findings}
        recorded = {f["oracle"] for f in c.header.meta.get("findings", [])}
        assert recorded and recorded <= found, (p, recorded, found)


def test_the_real_agents_baselines_stay_substantial_and_lose_only_non_instructions() -> None:
    # The recorded baselines of codex-acp and claude-agent-acp: what the thresholds and the
    # instruction filter do to real default prompts (docs/findings.md gives the numbers).
    from acp_fuzz.core.cassette import read_cassette

    real = Path(__file__).resolve().parents[2] / "cassettes" / "real"
    sizes = {}
    for prof in ("codex-acp", "claude-agent-acp"):
        path = real / prof / "prompt.change-ignored.cassette"
        b = Baseline.from_wire(read_cassette(path).header.settings["baseline"])
        assert b.substantial
        left_out = b.lines - b.instructions
        assert all(not is_instruction(ln) for ln in left_out)
        assert not any(ln.startswith("You ") for ln in left_out), left_out
        sizes[prof] = (b.size_lines, b.size_chars)
    # codex's names its sandbox once: 13 characters fewer as <sandbox> (a portable cassette).
    assert sizes == {"codex-acp": (117, 18188), "claude-agent-acp": (24, 5244)}
