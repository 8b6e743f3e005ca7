"""The covering examples beyond one op and one invalid payload (issue #36 §1), pure: every
valid payload class, every vendor carrier beside the standard field, a changed prompt on a
reattach before any turn, and every pair of lifecycle ops, each in a short sequence that ends
in a turn where its effect shows; and what a step covers of them, read back from the steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from acp_fuzz.strategies.payloads import (
    VALID_CLASSES,
    VENDOR_CARRIERS,
    valid_classes,
    valid_payload,
    vendor_carrier,
    vendor_meta_of,
)

from acp_fuzz.core.payloads import Capabilities, blocks_of, classify
from acp_fuzz.strategies import cover_keys, covering_examples, step_keys

REFERENCE = Capabilities(system_prompt=True, override=True, load=True, resume=True, fork=True,
                         close=True, list=True, delete=True)
#: What claude-agent-acp 0.101.0 and codex-acp 2.6.0 advertise (and can be made to do).
CLAUDE = replace(REFERENCE, additional_directories=True, set_mode=True, set_config_option=True,
                 compact_command=True, compact_usage=True, compact_overflow=True)
CODEX = replace(CLAUDE, override=False, title=True, compact_overflow=False)

Step = Mapping[str, Any]


def _form(step: Step, before: Sequence[Step]) -> str:
    """How ``step`` carries a prompt: ``-`` none, ``same`` as its session's last one,
    ``other``, ``vendor`` (with a vendor carrier beside it)."""
    if step.get("systemPrompt") is None:
        return "-"
    if "_meta" in step:
        return "vendor"
    h = step.get("session")
    last = [s["systemPrompt"] for s in before
            if s.get("session") == h and s.get("op") in ("new", "load", "resume")
            and s.get("systemPrompt") is not None]
    return "same" if last and last[-1] == step["systemPrompt"] else "other"


def _shapes(caps: Capabilities) -> list[list[tuple[str, str]]]:
    """Each session of each covering example, as (op, prompt form) from its ``new`` on; a
    restart counts for every session that exists."""
    out = []
    for ex in covering_examples(caps):
        for h in {s["session"] for s in ex.steps if s["op"] == "new"}:
            start = next(i for i, s in enumerate(ex.steps)
                         if s["op"] == "new" and s["session"] == h)
            out.append([(s["op"], _form(s, ex.steps[:start + i]))
                        for i, s in enumerate(ex.steps[start:])
                        if s.get("session") == h or s["op"] == "restart"])
    return out


def _has(caps: Capabilities, shape: list[tuple[str, str]]) -> bool:
    """Whether a session of a covering example starts with ``shape`` (its own steps)."""
    return any(s[:len(shape)] == shape for s in _shapes(caps))


@pytest.mark.parametrize("cls", VALID_CLASSES)
def test_every_valid_class_is_valid_reads_back_and_ends_in_its_canary(cls: str) -> None:
    payload = valid_payload(cls, "[acp-fuzz canary A1]")
    assert classify(payload, REFERENCE).kind == "valid"
    assert cls in valid_classes(payload)
    assert [t for t in blocks_of(payload) if t.strip()][-1].endswith("[acp-fuzz canary A1]")
    with pytest.raises(ValueError, match="unknown valid payload class"):
        valid_payload("tiny", "x")


def test_each_vendor_carrier_reads_back_and_holds_another_text() -> None:
    for carrier in VENDOR_CARRIERS:
        meta = vendor_meta_of(carrier, "[c]")
        assert vendor_carrier(meta) == carrier
        assert "[c]-vendor" in str(meta)
    assert vendor_carrier({"other": 1}) is None and vendor_carrier(None) is None


@pytest.mark.parametrize("caps", [REFERENCE, CLAUDE, CODEX], ids=["reference", "claude", "codex"])
def test_each_payload_class_and_carrier_goes_out_on_a_new_session_then_a_turn(
        caps: Capabilities) -> None:
    keys = [k for k in cover_keys(caps) if k.split(":")[0] in ("valid", "vendor")]
    assert {f"vendor:{c}" for c in VENDOR_CARRIERS} <= set(keys)
    assert {f"valid:{c}" for c in VALID_CLASSES if caps.override or c != "override"} \
        == {k for k in keys if k.startswith("valid:")}
    for key in keys:
        shown = False
        for ex in covering_examples(caps):
            for i, s in enumerate(ex.steps[:-1]):
                if s["op"] == "new" and key in step_keys(s, caps, ex.steps[:i]):
                    shown = shown or ex.steps[i + 1] == {"op": "prompt", "session": s["session"]}
        assert shown, key
    # finding 5's shape, for each carrier: new A (P beside a vendor text); prompt A.
    assert _has(caps, [("new", "vendor"), ("prompt", "-")])
    # No vendor carrier where the run does not send the standard field (a legacy dialect).
    assert not any(k.startswith("vendor:") for k in cover_keys(caps, resend_on_lifecycle=False))


def test_a_changed_prompt_on_each_reattach_before_any_turn() -> None:
    for op in ("load", "resume"):
        assert f"change:{op}" in cover_keys(CODEX)
        # codex's SHOULD refusal: new A (P); load A (Q) before a turn.
        assert _has(CODEX, [("new", "other"), (op, "other"), ("prompt", "-")])
    p = {"mode": "append", "content": [{"type": "text", "text": "P"}]}
    q = {"mode": "append", "content": [{"type": "text", "text": "Q"}]}
    new = {"op": "new", "session": "A", "systemPrompt": p}
    load = {"op": "load", "session": "A", "systemPrompt": q}
    assert "change:load" in step_keys(load, REFERENCE, [new])
    assert "change:load" not in step_keys({**load, "systemPrompt": p}, REFERENCE, [new])
    assert "change:load" not in step_keys(load, REFERENCE, [new, {"op": "prompt",
                                                                   "session": "A"}])


def test_a_changed_prompt_on_the_first_reattach_after_a_restart() -> None:
    # --bug cold-load-keeps-old: the change is kept back past the rebuild the cold load is;
    # two turns after it show that (the first may still be deferred).
    for op in ("load", "resume"):
        assert f"change:cold-{op}" in cover_keys(REFERENCE)
        assert _has(REFERENCE, [("new", "other"), ("prompt", "-"), ("restart", "-"),
                                (op, "other"), ("prompt", "-"), ("prompt", "-")])
    p = {"mode": "append", "content": [{"type": "text", "text": "P"}]}
    q = {"mode": "append", "content": [{"type": "text", "text": "Q"}]}
    new, turn = {"op": "new", "session": "A", "systemPrompt": p}, {"op": "prompt", "session": "A"}
    load = {"op": "load", "session": "A", "systemPrompt": q}
    cold = [new, turn, {"op": "restart"}]
    assert "change:cold-load" in step_keys(load, REFERENCE, cold)
    assert "change:cold-load" not in step_keys(load, REFERENCE, [new, turn])  # live
    assert "change:cold-load" not in step_keys({**load, "systemPrompt": p}, REFERENCE, cold)
    assert "change:cold-load" not in step_keys({**load, "systemPrompt": None}, REFERENCE, cold)
    # Only the first reattach after the restart is cold.
    again = [*cold, {"op": "resume", "session": "A", "systemPrompt": p}]
    assert "change:cold-load" not in step_keys(load, REFERENCE, again)


def test_the_pairs_the_issue_names_are_sent_in_their_shortest_sequence() -> None:
    keys = set(cover_keys(REFERENCE))
    for pair in ("close+load", "fork+resume", "restart+fork", "delete+list", "cancel+close",
                 "close+load:omitted", "restart+resume:omitted"):
        assert f"pair:{pair}" in keys
    # codex's finding 1 (the same prompt refused on a load after a close) and finding 2 (a
    # turn after a close and a prompt-less load never answered), from a session's first step.
    assert _has(REFERENCE, [("new", "other"), ("close", "-"), ("load", "same")])
    assert _has(REFERENCE, [("new", "other"), ("close", "-"), ("load", "-"), ("prompt", "-")])
    assert _has(REFERENCE, [("new", "other"), ("fork", "other"), ("resume", "same"),
                            ("prompt", "-")])
    assert _has(REFERENCE, [("new", "other"), ("restart", "-"), ("load", "same"),
                            ("fork", "other")])
    # A cancel (a prompt with session/cancel right behind it) then each op.
    assert _has(REFERENCE, [("new", "other"), ("cancel", "-"), ("close", "-")])
    # Without a reattach, no op that needs the session open follows a close or a restart.
    bare = Capabilities(system_prompt=True, close=True, fork=True)
    assert not {"pair:close+fork", "pair:restart+fork"} & set(cover_keys(bare))
    assert "pair:close+restart" in cover_keys(bare)


@pytest.mark.parametrize("caps", [REFERENCE, CLAUDE, CODEX, Capabilities(),
                                  Capabilities(system_prompt=True, close=True, fork=True)],
                         ids=["reference", "claude", "codex", "nothing", "close and fork"])
def test_every_pair_key_is_sent_then_a_turn_where_the_session_is_still_open(
        caps: Capabilities) -> None:
    pairs = [k for k in cover_keys(caps) if k.startswith("pair:")]
    sent: dict[str, tuple[Step, ...]] = {}
    for ex in covering_examples(caps):
        for i, s in enumerate(ex.steps):
            for k in step_keys(s, caps, ex.steps[:i]):
                sent.setdefault(k, ex.steps)
    assert set(pairs) <= set(sent)
    # Every pair example ends in a turn, but one whose last op closed or deleted its session.
    for k in pairs:
        assert sent[k][-1]["op"] in ("prompt", "close", "list", "restart") or \
            k.endswith(("+close", "+delete")), (k, sent[k])


def test_what_a_step_covers_of_the_pairs() -> None:
    p = {"mode": "append", "content": [{"type": "text", "text": "P"}]}
    new = {"op": "new", "session": "A", "systemPrompt": p}
    close, turn = {"op": "close", "session": "A"}, {"op": "prompt", "session": "A"}
    load = {"op": "load", "session": "A", "systemPrompt": p}
    bare = {"op": "load", "session": "A"}
    fork = {"op": "fork", "session": "A", "new": "B"}

    def pairs(step: Step, before: list[Step]) -> list[str]:
        return [k for k in step_keys(step, REFERENCE, before) if k.startswith("pair:")]
    assert pairs(load, [new, close]) == ["pair:close+load"]
    assert pairs(bare, [new, close]) == ["pair:close+load", "pair:close+load:omitted"]
    assert pairs({**bare, "systemPrompt": None}, [new, close])[-1] == "pair:close+load:omitted"
    assert pairs(load, [new, close, turn]) == ["pair:close+load"]  # turns do not count
    assert pairs(load, [new]) == []  # nothing before it on A
    # Past a reopen right behind a restart, for an op that needs the session open.
    assert pairs(fork, [new, {"op": "restart"}, load]) == ["pair:load+fork", "pair:restart+fork"]
    assert pairs(load, [new, {"op": "restart"}, load]) == ["pair:load+load"]
    # A fork is its copy's first pair op; a restart before a session was made is not its.
    assert pairs({"op": "resume", "session": "B"}, [new, fork]) == ["pair:fork+resume"]
    assert pairs({"op": "close", "session": "B"},
                 [{"op": "restart"}, {**new, "session": "B"}]) == []
    # A restart or a list pairs with the last pair op of any session.
    delete = {"op": "delete", "session": "A"}
    assert pairs({"op": "list"}, [new, delete, {"op": "new", "session": "B"}]) == \
        ["pair:delete+list"]
    assert pairs({"op": "restart"}, [new]) == []


def test_the_covering_phase_stays_bounded() -> None:
    """The numbers docs/performance.md states (before issue #36: 16, 22 and 22; before the
    faulted turns of issue #32: 32, 44 and 44; before the cold changes: 33, 45 and 45; before
    the scope and MCP examples of issue #33: 34, 46 and 46; before a turn came first in the
    rejected reattaches: 36, 48 and 48; before the held turns of issue #32: 37, 49 and 48;
    before two turns at once: 38, 50 and 49; before the huge prompts of issue #33 §3: 39, 51
    and 50; before a delete sent during a turn: 40, 52 and 51; before a reattach sent
    during another session's turn, the last example: 41, 53 and 52; before the bare
    reattaches after a close or a restart went out early: 42, 54 and 53)."""
    assert [len(covering_examples(c)) for c in (REFERENCE, CLAUDE, CODEX)] == [43, 54, 53]
    assert all(len(ex.steps) <= 12 for c in (REFERENCE, CLAUDE, CODEX)
               for ex in covering_examples(c))
