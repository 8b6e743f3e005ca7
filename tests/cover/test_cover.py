"""The covering examples (``acp_fuzz.strategies.cover``), pure: they send every lifecycle op an
agent supports and every invalid payload variant on every request that carries a prompt, each
example a short valid sequence of the machine's own steps; the same capabilities give the same
examples (no seed); and what a step covers is read back from the step alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from acp_fuzz.strategies.payloads import (
    INVALID_KINDS,
    MODE_SPELLINGS,
    invalid_payload,
    invalid_system_prompts,
    invalid_variant,
    invalid_variants,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_fuzz.core.lifecycle import HANDLES, Lifecycle, allowed
from acp_fuzz.core.payloads import DEFECTS, INVALID_REASONS, Capabilities, classify
from acp_fuzz.core.steps import validate_step
from acp_fuzz.strategies import cover_keys, covering_examples, step_keys

REFERENCE = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                         close=True, list=True, delete=True)
EVERYTHING = replace(REFERENCE, title=True, additional_directories=True, set_mode=True,
                     set_config_option=True)
V2 = replace(REFERENCE, load=False, replay=True, set_config_option=True)
CAPS = {
    "reference": REFERENCE,
    "everything": EVERYTHING,
    "v2": V2,
    "no override": replace(REFERENCE, override=False),
    "new and prompt only": Capabilities(system_prompt=True),
    "no systemPrompt": Capabilities(load=True, resume=True),
    "nothing": Capabilities(),
    "fork and directories, no load or resume": Capabilities(system_prompt=True, fork=True,
                                                           additional_directories=True),
    "directories, nothing to move": Capabilities(system_prompt=True,
                                                 additional_directories=True),
    "compacting": replace(REFERENCE, compact_command=True, compact_usage=True,
                          compact_overflow=True),
    "compacting by command, v2": replace(V2, compact_command=True),
    "compacting, nothing to reattach": Capabilities(system_prompt=True, compact_usage=True),
}


def _sent(examples: Any, caps: Capabilities) -> set[str]:
    return {k for ex in examples for i, s in enumerate(ex.steps)
            for k in step_keys(s, caps, ex.steps[:i])}


@pytest.mark.parametrize("name", sorted(CAPS))
@pytest.mark.parametrize("max_steps", [12, 4, 1])
@pytest.mark.parametrize("resend", [True, False])
def test_the_covering_examples_send_every_key_in_valid_short_sequences(
        name: str, max_steps: int, resend: bool) -> None:
    caps = CAPS[name]
    examples = covering_examples(caps, resend_on_lifecycle=resend, max_steps=max_steps)
    keys = cover_keys(caps, resend_on_lifecycle=resend)
    assert _sent(examples, caps) >= set(keys)
    assert {k for ex in examples for k in ex.keys} == _sent(examples, caps)
    # new A (P); restart; load A (P); fork A->B (Q); prompt B; prompt A (restart then fork),
    # or new A (P); prompt A; load A (Q); compact A; prompt A; prompt A.
    longest_unit = 6
    for ex in examples:
        steps = [validate_step(dict(s)) for s in ex.steps]  # steps the strategies could draw
        assert allowed(steps), steps
        assert len(steps) <= max(max_steps, longest_unit), steps
        life = Lifecycle()
        for s in steps:
            life.apply(s)
        assert len({s.get("new") or s.get("session") for s in steps} - {None}) <= len(HANDLES)
        if not resend:
            assert all("systemPrompt" not in s for s in steps if s["op"] != "new")
    # Deterministic: no seed, nothing random.
    assert covering_examples(caps, resend_on_lifecycle=resend, max_steps=max_steps) == examples


def test_every_invalid_variant_on_every_request_and_every_op_for_the_reference_agent() -> None:
    keys = cover_keys(REFERENCE)
    variants = invalid_variants(override=True)
    for request in ("new", "load", "resume", "fork"):
        assert {f"{request}:{v}" for v in variants} <= set(keys)
    assert {"new:content-empty", 'new:mode-spelling:"replace"',
            'fork:mode-spelling:"replace"', "resume:content-empty"} <= set(keys)
    for op in ("new", "prompt", "cancel", "list", "close", "load", "resume", "fork", "delete",
               "restart", "invalid"):
        assert f"op:{op}" in keys
    # The number docs/performance.md states as N ("Every payload kind at every seed"), and
    # its bound: 16 before the valid payloads, vendor carriers and pairs of ops (issue #36),
    # 32 before the faulted turns (one example of 9 steps, issue #32), 33 before a changed
    # prompt on the first reattach after a restart, 34 before the scope example and 35 before
    # the MCP example, 36 before a turn came before the rejected reattaches (issue #33), 37
    # before the turns with a cancel, a $/cancel_request and a close sent while the model is
    # thinking (one example of 5 steps, issue #32), 38 before two turns at once (5 steps).
    # 39 before the huge prompts (1 MiB, 8 MiB, near the line limit; issue #33 §3): one
    # example of 6 steps, the last. A second prompt sent during a turn is one more step of
    # the example of held turns (360 steps before it); a fork sent during a turn and a turn
    # of the copy are two more (361 before them), and a session/new with its
    # $/cancel_request one more (363 before it). A load, a resume and a fork with their
    # $/cancel_request, each with a turn after it, are six more (364 before them). 41 with
    # a delete sent during a turn (an example of 4 steps, 370 before it), 42 with a load and
    # a resume sent during another session's turn (one example of 10 steps). 43 and 388
    # since the reattaches after a close or a restart (re-sending the prompt, then bare) go
    # out early (issue #36), in three examples of their own.
    assert len(covering_examples(REFERENCE)) == 43
    assert sum(len(ex.steps) for ex in covering_examples(REFERENCE)) == 388
    assert {"during:cancel", "during:cancel-request", "during:close", "during:prompt",
            "during:fork", "during:delete", "cancel-request:new", "cancel-request:load",
            "cancel-request:resume", "cancel-request:fork", "together", "while:load",
            "while:resume"} <= set(keys)
    assert "during:set-mode" not in keys  # no modes to switch to


def test_a_mode_switch_during_a_turn_is_covered_where_the_agent_offers_modes() -> None:
    assert "during:set-mode" in cover_keys(EVERYTHING)
    (example,) = [ex for ex in covering_examples(EVERYTHING)
                  if any(s.get("during") == "set-mode" for s in ex.steps)]
    # new A (P), the cancel, the $/cancel_request, the switch, the second prompt, the fork
    # (and a turn of its copy B), a config switch, a session/new C with its
    # $/cancel_request, a plain turn, the close.
    assert [s.get("during") for s in example.steps] == [
        None, "cancel", "cancel-request", "set-mode", "prompt", "fork", None, "set-config",
        None, None, "close"]
    assert example.steps[8] == {"op": "new", "session": "C", "cancel_request": True}
    assert [(s["session"], s.get("new")) for s in example.steps[5:7]] == [("A", "B"),
                                                                          ("B", None)]


def test_a_fork_during_a_turn_is_covered_only_where_the_agent_forks() -> None:
    assert "during:fork" in cover_keys(REFERENCE)
    unforked = replace(REFERENCE, fork=False)
    assert "during:fork" not in cover_keys(unforked)
    assert not any(s.get("during") == "fork" for ex in covering_examples(unforked)
                   for s in ex.steps)


def test_the_ops_come_first_each_in_the_shortest_sequence_that_shows_its_effect() -> None:
    examples = covering_examples(REFERENCE)
    # Then the shapes of the reviewed real findings (issue #36): the valid payloads and
    # vendor carriers, the model faults, the reattaches after a close or a restart
    # (re-sending the prompt, then bare); then the rest, the invalid methods first.
    assert any(k.startswith("vendor:") for k in examples[6].keys)
    assert any(k.startswith("fault:") for k in examples[8].keys)
    assert {k for ex in examples[9:12] for k in ex.keys if k.endswith(":omitted")} == {
        k for k in cover_keys(REFERENCE) if k.endswith(":omitted")}
    shapes = [[(s["op"], s.get("session"), "systemPrompt" in s) for s in ex.steps]
              for ex in [*examples[:6], examples[12]]]
    cancelled = [(s["op"], s.get("new")) for ex in covering_examples(REFERENCE)[1:4]
                 for s in ex.steps if s.get("cancel_request")]
    assert cancelled == [("load", None), ("resume", None), ("fork", "C")]
    assert shapes == [
        [("new", "A", True), ("prompt", "A", False), ("new", "B", False),
         ("prompt", "B", False), ("cancel", "A", False), ("new", "C", True),
         ("list", None, False), ("close", "A", False)],
        # each reattach and fork, then again with its $/cancel_request right behind it
        [("new", "A", True), ("prompt", "A", False), ("load", "A", True), ("prompt", "A", False),
         ("load", "A", True), ("prompt", "A", False)],
        [("new", "A", True), ("prompt", "A", False), ("resume", "A", True),
         ("prompt", "A", False), ("resume", "A", True), ("prompt", "A", False)],
        [("new", "A", True), ("fork", "A", True), ("prompt", "B", False),
         ("prompt", "A", False), ("fork", "A", False), ("prompt", "A", False)],
        [("new", "A", True), ("delete", "A", False), ("prompt", "A", False),
         ("new", "B", False), ("prompt", "B", False)],
        [("new", "A", True), ("prompt", "A", False), ("restart", None, False),
         ("load", "A", True), ("prompt", "A", False),
         # loaded in a new process before its first turn, then listed (#38 §5)
         ("new", "B", True), ("restart", None, False), ("load", "B", True),
         ("list", None, False), ("prompt", "B", False)],
        [("invalid", None, False)] * 3,
    ]
    load = covering_examples(REFERENCE)[1].steps
    assert load[2]["systemPrompt"] == load[0]["systemPrompt"]  # the same prompt, re-sent
    fork = covering_examples(REFERENCE)[3].steps
    assert fork[1]["systemPrompt"] != fork[0]["systemPrompt"]  # the fork's own
    # The restart's prompt is an override where the agent offers it, else an append.
    restart = covering_examples(REFERENCE)[5].steps
    assert restart[0]["systemPrompt"]["mode"] == "override"
    assert restart[3]["systemPrompt"] == restart[0]["systemPrompt"]
    plain = replace(REFERENCE, override=False)
    modes = {s["systemPrompt"]["mode"] for ex in covering_examples(plain) for s in ex.steps
             if classify(s.get("systemPrompt"), plain).kind == "valid"}
    assert modes == {"append"}


def test_each_compaction_then_one_after_a_live_change_each_in_its_shortest_sequence() -> None:
    """Each way the agent can be made to compact, once, after a turn and before one; then a
    changed prompt on a live load, a compaction, and two turns (a deferred change must land
    at the compaction). An agent that cannot be made to compact gets none of them."""
    caps = CAPS["compacting"]
    compacting = [[(s["op"], s.get("by"), "systemPrompt" in s) for s in ex.steps]
                  for ex in covering_examples(caps) if any(s["op"] == "compact"
                                                           for s in ex.steps)][:4]
    assert compacting == [
        [("new", None, True), ("prompt", None, False), ("compact", by, False),
         ("prompt", None, False)] for by in ("command", "usage", "overflow")] + [
        [("new", None, True), ("prompt", None, False), ("load", None, True),
         ("compact", "command", False), ("prompt", None, False), ("prompt", None, False)]]
    (changed,) = [ex for ex in covering_examples(caps) if "compact:after-change" in ex.keys]
    assert changed.steps[2]["systemPrompt"] != changed.steps[0]["systemPrompt"]
    assert {"op:compact", "compact:command", "compact:usage", "compact:overflow",
            "compact:after-change"} <= set(cover_keys(caps))
    assert not any(k.startswith("compact") or k == "op:compact" for k in cover_keys(REFERENCE))
    # Without a load or resume to change the prompt on, no deferral example.
    assert "compact:after-change" not in cover_keys(CAPS["compacting, nothing to reattach"])


def test_a_compaction_covers_a_change_only_after_a_live_one_since_the_last() -> None:
    caps = CAPS["compacting"]
    p = {"mode": "append", "content": [{"type": "text", "text": "P"}]}
    q = {"mode": "append", "content": [{"type": "text", "text": "Q"}]}
    new, turn = {"op": "new", "session": "A", "systemPrompt": p}, {"op": "prompt", "session": "A"}
    compact = {"op": "compact", "session": "A", "by": "usage"}
    changed = {"op": "resume", "session": "A", "systemPrompt": q}
    same = {"op": "load", "session": "A", "systemPrompt": p}
    after = "compact:after-change"
    assert step_keys(compact, caps, [new, turn]) == ["op:compact", "compact:usage"]
    assert after in step_keys(compact, caps, [new, turn, changed])
    assert after not in step_keys(compact, caps, [new, turn, same])
    assert after not in step_keys(compact, caps, [new, turn, changed, compact])
    restart = {"op": "restart"}
    # A deferred change outlives the process; a change on a cold load is not a live one.
    assert after in step_keys(compact, caps, [new, turn, changed, restart, {**same, **changed}])
    assert after not in step_keys(compact, caps, [new, turn, restart, changed])
    assert after not in step_keys({**compact, "session": "B"}, caps, [new, turn, changed])


def test_a_payload_example_is_one_session_then_rejected_requests_then_a_turn() -> None:
    reopened = [ex for ex in covering_examples(REFERENCE)
                if any(k.split(":")[0] in ("load", "resume", "fork") for k in ex.keys)]
    assert len(reopened) == 8
    for ex in reopened:
        first, talk, *rejected, turn = ex.steps
        assert first["op"] == "new" and classify(first["systemPrompt"], REFERENCE).kind == "valid"
        assert talk == turn == {"op": "prompt", "session": "A"}
        for s in rejected:
            assert s["op"] in ("load", "resume", "fork") and s["session"] == "A"
            assert classify(s["systemPrompt"], REFERENCE).kind == "invalid"


def test_keys_select_only_the_examples_still_needed() -> None:
    wanted = ["resume:content-empty", 'fork:mode-spelling:"replace"', "op:delete"]
    examples = covering_examples(REFERENCE, keys=wanted)
    assert _sent(examples, REFERENCE) >= set(wanted)
    assert len(examples) == 2  # the delete example, and one of rejected requests
    assert [s["op"] for s in examples[1].steps] == ["new", "prompt", "resume", "fork", "prompt"]
    # A key every example covers takes one example, the first.
    (only,) = covering_examples(Capabilities(system_prompt=True), keys=["op:new"])
    assert only.steps[0]["op"] == "new"
    assert covering_examples(REFERENCE, keys=[]) == []


@pytest.mark.parametrize("override", [True, False])
def test_every_variant_is_invalid_and_reads_back_as_itself(override: bool) -> None:
    caps = replace(REFERENCE, override=override)
    variants = invalid_variants(override=override)
    assert ("override-not-advertised" in variants) is not override
    assert len(variants) == len(INVALID_KINDS) - 1 + len(MODE_SPELLINGS) - override
    reasons = {d.kind: d.reason for d in DEFECTS}
    for v in variants:
        payload = invalid_payload(v, "[acp-fuzz canary A1]")
        got = classify(payload, caps)
        # The classifier's reason is the defects table's for the kind drawn: one table.
        assert got.kind == "invalid" and got.reason == reasons[v.partition(":")[0]], v
        assert (got.severity, got.rule) == INVALID_REASONS[got.reason]
        assert invalid_variant(payload, override=override) == v
        assert step_keys({"op": "load", "session": "A", "systemPrompt": payload}, caps) == \
            ["op:load", f"load:{v}"]
    with pytest.raises(ValueError, match="unknown invalid payload variant"):
        invalid_payload("mode-imaginary", "x")


@settings(max_examples=300, database=None, derandomize=True)
@given(st.booleans(), st.data())
def test_every_drawn_invalid_payload_is_a_variant_the_covering_examples_send(
        override: bool, data: st.DataObject) -> None:
    payload = data.draw(invalid_system_prompts(override=override, canary="[c]"))
    assert invalid_variant(payload, override=override) in invalid_variants(override=override)


def test_what_a_step_covers() -> None:
    valid = {"mode": "append", "content": [{"type": "text", "text": "P"}]}
    assert step_keys({"op": "new", "session": "A", "systemPrompt": valid}, REFERENCE) == \
        ["op:new", "valid:append", "valid:one-block"]
    assert step_keys({"op": "new", "session": "A", "systemPrompt": None}, REFERENCE) == \
        ["op:new"]
    assert step_keys({"op": "resume", "session": "A", "cwd": "moved", "roots": 2, "busy": True,
                      "systemPrompt": {"mode": "replace", "content": []}}, REFERENCE) == \
        ["op:resume", "dirs:moved", "dirs:roots", "busy:resume", 'resume:mode-spelling:"replace"']
    # An agent that does not advertise systemPrompt: a payload is a probe, not a variant.
    assert step_keys({"op": "new", "session": "A", "systemPrompt": {"mode": "x"}},
                     Capabilities()) == ["op:new"]
    # A defect the strategies do not draw is named by its nearest kind.
    assert invalid_variant({"mode": "merge", "content": []}, override=True) == "mode-unknown"
    assert invalid_variant({"mode": "append", "content": [{"type": "video"}]},
                           override=True) == "block-unknown"
    assert invalid_variant(valid, override=True) is None


@pytest.mark.parametrize("name", sorted(CAPS))
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_the_shares_partition_the_keys_and_the_plans_examples(name: str, n: int) -> None:
    """``--workers`` and ``--shard``: campaign ``i`` of ``n`` runs the plan's examples ``i``,
    ``i + n``, ... (the campaign takes them from the plan as they are) and answers for the
    keys they are the first to send: the shares partition the keys, and each share is sent
    by its examples."""
    from acp_fuzz.strategies import cover_share

    caps = CAPS[name]
    plan = covering_examples(caps)
    shares = [cover_share(caps, i, n) for i in range(n)]
    assert sorted(k for share in shares for k in share) == sorted(cover_keys(caps))
    for i, share in enumerate(shares):
        assert set(share) <= {k for ex in plan[i::n] for k in ex.keys}


def test_a_workers_share_within_a_shard_is_one_class_of_the_plan() -> None:
    """Shards of ``n`` with ``w`` workers each: every plan example is run by exactly one
    worker of one shard, whatever ``w``."""
    from acp_fuzz.engine.campaign.workers import worker_share

    for n, w in ((1, 3), (3, 1), (3, 2), (2, 4)):
        owners = [[(k, i) for k in range(n) for i in range(w)
                   if p % worker_share((k, n), i, w)[1] == worker_share((k, n), i, w)[0]]
                  for p in range(40)]
        assert all(len(o) == 1 for o in owners)
        assert all(owners[p][0] == (p % n, (p // n) % w) for p in range(40))


def test_what_a_step_covers_of_the_surfaces_beside_the_model() -> None:
    """surface:update, a turn or reattach after another session's prompt; surface:error, a
    refused request after one; surface:replay, a load of a session with a prompt and a
    conversation (issue #33 §2). Each is sent by the reference agent's covering examples."""
    p = {"mode": "append", "content": [{"type": "text", "text": "Be a careful reviewer."}]}
    bad = invalid_payload("mode-unknown", "[canary C3]")
    new_a = {"op": "new", "session": "A", "systemPrompt": p}
    new_b = {"op": "new", "session": "B"}
    turn_a, turn_b = {"op": "prompt", "session": "A"}, {"op": "prompt", "session": "B"}

    def surfaces(step: dict[str, Any], before: list[dict[str, Any]]) -> list[str]:
        return [k for k in step_keys(step, REFERENCE, before) if k.startswith("surface:")]

    assert surfaces(turn_b, [new_a, new_b]) == ["surface:update"]
    assert surfaces(turn_a, [new_a]) == []  # its own prompt only
    assert surfaces({"op": "new", "session": "C", "systemPrompt": bad}, [new_a]) == \
        ["surface:error"]
    assert surfaces({"op": "new", "session": "A", "systemPrompt": bad}, []) == []
    load_a = {"op": "load", "session": "A", "systemPrompt": p}
    assert surfaces(load_a, [new_a, turn_a]) == ["surface:replay"]
    assert surfaces(load_a, [new_a]) == []  # nothing to replay
    assert {"surface:update", "surface:error", "surface:replay"} <= set(cover_keys(REFERENCE))
    assert "surface:replay" not in cover_keys(replace(REFERENCE, load=False))
    assert not [k for k in cover_keys(Capabilities(load=True)) if k.startswith("surface:")]
    first = covering_examples(REFERENCE)[0]
    assert {"surface:update", "surface:error"} <= set(first.keys)


def test_the_scope_example_compares_each_mode_with_a_session_without_a_prompt() -> None:
    """new A; prompt A; new B (append); prompt B; new C (override); prompt C: what a prompt
    must not change (issue #33 §1) is compared with A's, for each mode the agent offers."""
    scope = next(ex for ex in covering_examples(REFERENCE) if "scope:append" in ex.keys)
    assert [(s["op"], s.get("systemPrompt", {}).get("mode")) for s in scope.steps] == [
        ("new", None), ("prompt", None), ("new", "append"), ("prompt", None),
        ("new", "override"), ("prompt", None)]
    assert {"scope:append", "scope:override"} <= set(scope.keys)
    plain = replace(REFERENCE, override=False)
    assert "scope:override" not in cover_keys(plain) and "scope:append" in cover_keys(plain)
    new_b = {"op": "new", "session": "B", "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": "Be a careful reviewer."}]}}
    turn_b = {"op": "prompt", "session": "B"}
    plain_a = [{"op": "new", "session": "A"}, {"op": "prompt", "session": "A"}]
    assert "scope:append" in step_keys(turn_b, REFERENCE, [*plain_a, new_b])
    assert "scope:append" not in step_keys(turn_b, REFERENCE, [plain_a[0], new_b])  # no turn
    assert "scope:append" not in step_keys(turn_b, REFERENCE, [*plain_a, new_b, turn_b])


def test_the_mcp_example_names_the_server_in_each_mode_then_a_session_that_does_not() -> None:
    """new A (mcp); prompt A; new B (append, mcp); prompt B; new C (override, mcp); prompt C;
    new D; prompt D: each named server's tool must reach its session, and not D (#33 §1)."""
    mcp = next(ex for ex in covering_examples(REFERENCE) if "mcp:beside" in ex.keys)
    assert [(s["op"], s.get("systemPrompt", {}).get("mode"), s.get("mcp", False))
            for s in mcp.steps] == [
        ("new", None, True), ("prompt", None, False), ("new", "append", True),
        ("prompt", None, False), ("new", "override", True), ("prompt", None, False),
        ("new", None, False), ("prompt", None, False)]
    assert {"mcp:none", "mcp:append", "mcp:override", "mcp:beside"} <= set(mcp.keys)
    assert not [k for k in mcp.keys if k.startswith("scope:")]  # the scope example's own
    assert {"mcp:none", "mcp:beside"} <= set(cover_keys(Capabilities(load=True)))
    assert "mcp:append" not in cover_keys(Capabilities(load=True))
