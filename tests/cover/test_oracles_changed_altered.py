"""A prompt changed on load, resume or fork and applied altered (issue #31 §5), on hand-built
histories: the altered new text is recognised as the new prompt and reported as
``prompt.altered`` with the difference, at the severity the alteration has on
``session/new``; never as the old prompt still in use (``prompt.change-deferred``, or
``prompt.change-ignored`` after a cold load), which sent the maintainer looking for the
wrong bug."""

from __future__ import annotations

import html

from test_oracles import DEFAULTS, H, P, Q, appended, ids, only, sp

#: A changed prompt whose HTML escaping shows.
TAGGED = "Answer only in <b>French</b>, whatever the question & its language."


def test_a_change_applied_escaped_over_the_defaults_is_altered_at_should() -> None:
    # Before: the defaults-only candidate (the session had no prompt) fit the request, so
    # the escaped new prompt read as "the old one is still in use".
    h = H()
    h.new("A")
    h.step("load", "A", systemPrompt=sp("append", TAGGED))
    h.prompt("A", system=appended(html.escape(TAGGED)))
    found = h.findings()
    f = only(found, "prompt.altered")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-VERBATIM-SHOULD")
    (received,) = f.evidence["received"]
    assert received["as"] == "escaped" and "&lt;b&gt;" in received["received"]
    assert "prompt.change-deferred" not in ids(found)


def test_after_a_cold_load_too_it_is_altered_not_change_ignored() -> None:
    h = H()
    h.new("A")
    h.step("restart")
    h.step("load", "A", systemPrompt=sp("append", TAGGED))
    h.prompt("A", system=appended(html.escape(TAGGED)))
    h.prompt("A", system=appended(html.escape(TAGGED)))
    found = h.findings()
    # Each turn shows it, as each turn shows a prompt altered on session/new.
    assert [f.severity for f in found if f.oracle == "prompt.altered"] == ["SHOULD", "SHOULD"]
    assert not {"prompt.change-ignored", "prompt.change-deferred"} & ids(found)


def test_a_change_with_its_whitespace_collapsed_is_info_as_on_new() -> None:
    h = H()
    h.new("A")
    spaced = "Answer only in French,\n\n   whatever the question."
    h.step("resume", "A", systemPrompt=sp("append", spaced))
    h.prompt("A", system=appended(" ".join(spaced.split())))
    f = only(h.findings(), "prompt.altered")
    assert (f.severity, f.rule) == ("info", "SP-AGENT-APPEND-FORMAT-DEF")


def test_a_change_whose_own_block_is_cut_short_is_must() -> None:
    # The old prompt (P) is a block of the new one too, so P alone fit: the new block, cut,
    # shows the new prompt is the one in use.
    long = "Cite file paths and line numbers in every answer. " * 20
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", P, long))
    h.prompt("A", system=appended(P, long[: len(long) * 2 // 3]))
    f = only(h.findings(), "prompt.altered")
    assert f.severity == "MUST"
    assert f.evidence["missing"] and "prompt.change-deferred" not in ids(h.findings())


def test_the_old_prompt_still_in_use_is_still_a_deferral() -> None:
    # Nothing of the new prompt's own text arrived, in any form: the change is deferred.
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A", systemPrompt=sp("append", P, Q))
    h.prompt("A", system=appended(P))
    h.new("B")
    h.step("load", "B", systemPrompt=sp("append", Q))
    h.prompt("B", system=[DEFAULTS + "\nWorking directory: /w/x"])
    found = h.findings()
    assert "prompt.altered" not in ids(found)
    assert [f.session for f in found if f.oracle == "prompt.change-deferred"] == ["A", "B"]


def test_a_deferral_whose_old_prompt_shares_the_new_ones_opening_stays_a_deferral() -> None:
    # Drawn texts repeat ("lorem ipsum ..."): an agent that defers the change (still the old
    # prompt, whose text begins as the new one does) was a false MUST prompt.altered "cut
    # short" (seen on the reference agent's --variant defer-then-apply, a fork's override).
    lorem = "lorem ipsum dolor sit amet " * 60
    old, new = lorem + "the old instructions", lorem[: len(lorem) // 2 + 40] + " new ending"
    h = H()
    h.new("A", sp("append", old))
    h.prompt("A", system=appended(old))
    h.step("resume", "A", systemPrompt=sp("append", new))
    h.prompt("A", system=appended(old))  # deferred: the old prompt, whole
    found = h.findings()
    assert "prompt.altered" not in ids(found), found
