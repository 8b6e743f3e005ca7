"""Dialect detection and encoding (pure)."""

from __future__ import annotations

import pytest

from acp_fuzz.core.dialects import (
    capabilities,
    detect,
    encode_meta,
    goose_params,
    not_honoured,
    resolve,
)

APPEND = {"mode": "append", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                      "text": "b"}]}
OVERRIDE = {"mode": "override", "content": [{"type": "text", "text": "only this"}]}


def init(caps: dict[str, object], name: str = "agent") -> dict[str, object]:
    return {"protocolVersion": 1, "agentCapabilities": caps, "agentInfo": {"name": name}}


def test_standard_wins_where_it_is_advertised() -> None:
    both = init({"sessionCapabilities": {"systemPrompt": {}}, "_meta": {"claudeCode": {}}})
    assert detect(both) == "standard"


@pytest.mark.parametrize("result, dialect", [
    (init({"_meta": {"piAcp": {"systemPrompt": {"replace": True}}}}), "pi-meta"),
    (init({"_meta": {"claudeCode": {}}}), "claude-meta"),
    (init({}, name="goose"), "goose"),
    (init({}), "standard"),
    (None, "standard"),
])
def test_detection(result: object, dialect: str) -> None:
    assert detect(result) == dialect


def test_resolve_forces_or_detects_and_rejects_unknown_names() -> None:
    assert resolve("claude-meta", init({})) == "claude-meta"
    assert resolve("auto", init({"_meta": {"claudeCode": {}}})) == "claude-meta"
    with pytest.raises(ValueError, match="unknown dialect"):
        resolve("klingon", init({}))


def test_meta_encoding_follows_the_legacy_semantics() -> None:
    assert encode_meta(OVERRIDE) == "only this"  # a string replaces
    assert encode_meta(APPEND) == {"append": "a\n\nb"}  # an object appends
    odd = {"mode": "prepend", "content": []}
    assert encode_meta(odd) is odd  # passed through as a probe


def test_goose_set_and_append() -> None:
    assert goose_params("s", OVERRIDE) == {"sessionId": "s", "mode": "set", "text": "only this"}
    assert goose_params("s", APPEND)["mode"] == "append"


def test_pi_override_follows_its_replace_capability() -> None:
    no_replace = init({"_meta": {"piAcp": {"systemPrompt": {"append": True}}}})
    assert capabilities("pi-meta", no_replace).override is False
    assert capabilities("claude-meta", init({})).system_prompt is True


def test_pi_meta_without_its_capability_is_not_honoured() -> None:
    """pi-acp 0.0.34 advertises no ``_meta.piAcp.systemPrompt``: a prompt forced into that
    dialect is a probe (info), and acp-fuzz says so, never a MUST for a prompt "lost"."""
    old_pi = init({"loadSession": True, "sessionCapabilities": {"list": {}, "delete": {}}})
    caps = capabilities("pi-meta", old_pi)
    assert (caps.system_prompt, caps.override) == (False, False)
    assert caps.load and caps.list and caps.delete  # the rest is read as for the standard field
    why = not_honoured("pi-meta", old_pi)
    assert why is not None and "agentCapabilities._meta.piAcp.systemPrompt" in why
    advertised = init({"_meta": {"piAcp": {"systemPrompt": {"append": True, "replace": True}}}})
    assert capabilities("pi-meta", advertised).override is True
    assert not_honoured("pi-meta", advertised) is None
    assert not_honoured("standard", old_pi) is None
