"""Fill marks: megabytes of prompt written small, and back (acp_fuzz.core.fills)."""

from __future__ import annotations

import json

import pytest
from acp_fuzz.strategies.payloads import valid_classes, valid_payload

from acp_fuzz.core.fills import (
    CUT_MIN,
    LIMIT_SIZE,
    SIZES,
    compact,
    compact_value,
    cut_mark,
    expand,
    expand_value,
    expanded_length,
    filler,
    mark,
    marks_in,
)
from acp_fuzz.core.minimize import payload_kind
from acp_fuzz.core.steps import describe, validate_step, will_send

MiB = 1024 * 1024


def test_the_sizes_are_1_mib_8_mib_and_the_typescript_sdk_line_limit_less_64_kib() -> None:
    assert {"huge-1m": MiB, "huge-8m": 8 * MiB, "huge-limit": 32 * MiB - 64 * 1024} == SIZES
    assert 32 * MiB - 64 * 1024 == LIMIT_SIZE


@pytest.mark.parametrize("n", sorted(SIZES.values()))
def test_a_mark_expands_to_exactly_its_size_and_a_whole_filler_compacts_back(n: int) -> None:
    text = f"rules first\n\n{mark(n)} [acp-fuzz canary A1]"
    full = expand(text)
    assert len(full) == expanded_length(text) == n + len(text) - len(mark(n))
    assert full.isascii() and full.endswith(" [acp-fuzz canary A1]")
    assert compact(full) == text
    assert compact("system: " + full + " and more") == "system: " + text + " and more"


def test_a_filler_cut_short_is_a_cut_mark_that_holds_no_block_and_a_short_cut_stays_text(
        ) -> None:
    full = filler(MiB)
    block = f"{mark(MiB)} [canary]"
    cut = compact(full[:-1] + " [canary]")  # one character short
    assert cut == f"{cut_mark(MiB, MiB - 1)} [canary]" and block not in cut
    assert marks_in(cut) == [] and expand(cut) == cut  # never sent
    changed = full[:500_000] + "X" + full[500_001:]
    assert compact(changed) == f"{cut_mark(MiB, 500_000)}X" + full[500_001:]
    short = full[:CUT_MIN - 1]
    assert compact(short) == short
    assert compact(full + full) == mark(MiB) * 2  # twice in one text: both
    assert compact(filler(8 * MiB)[:3 * MiB]) == cut_mark(8 * MiB, 3 * MiB)


def test_a_mark_like_text_that_was_not_made_here_is_not_a_mark_when_recorded() -> None:
    forged = f"the agent says {mark(8 * MiB)}"
    recorded = compact(forged)
    assert marks_in(recorded) == [] and expand(recorded) == recorded


def test_only_known_sizes_have_marks_and_a_step_may_not_stand_for_more_than_one_limit() -> None:
    with pytest.raises(ValueError):
        mark(12345)
    odd = "\u27eaacp-fuzz fill 12345\u27eb"
    assert marks_in(odd) == [] and expand(odd) == odd
    one = {"op": "new", "session": "A", "systemPrompt": {
        "mode": "append", "content": [{"type": "text", "text": mark(LIMIT_SIZE)}]}}
    assert validate_step(one)["systemPrompt"] == one["systemPrompt"]
    two = {**one, "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": mark(LIMIT_SIZE)}, {"type": "text", "text": mark(MiB)}]}}
    with pytest.raises(ValueError, match="fill marks stand for"):
        validate_step(two)


def test_values_are_walked_and_left_alone_when_nothing_changes() -> None:
    params = {"cwd": "/x", "systemPrompt": {"mode": "append", "content": [
        {"type": "text", "text": mark(MiB) + " c"}]}, "mcpServers": []}
    wire = expand_value(params)
    assert wire is not params and len(json.dumps(wire)) > MiB
    assert compact_value(wire) == params
    plain = {"cwd": "/x", "mcpServers": [], "n": 3}
    assert expand_value(plain) is plain and compact_value(plain) is plain


def test_huge_payload_classes_are_named_sized_and_shaped() -> None:
    for cls, n in SIZES.items():
        sp = valid_payload(cls, "[canary]")
        assert valid_classes(sp) == ["append", "one-block", "long", cls]  # not "unicode"
        step = {"op": "new", "session": "A", "systemPrompt": sp}
        assert payload_kind(step).endswith("/long/huge")
        assert f"{n + len(' [canary]'):,} characters" in describe(step)
        sent = will_send(step)
        assert sent is not None and f"is sent as its filler, N characters: {n:,};" in sent
    assert "filler" not in (will_send({"op": "new", "session": "A"}) or "")
