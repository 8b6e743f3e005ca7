"""The Markdown escaping (acp_fuzz.core.escaping) is linear in the text's length, so a
stranger's 30,000-character agent name or finding message cannot stall ``acp-fuzz report`` or
``acp-fuzz matrix``; and it escapes exactly as the pattern it replaced did.

No clock: each big input is one the quadratic version cannot finish within the test's
timeout (a 200,000-character word: it took 11 s for 20,000 characters, and four times as
long for each doubling, so some 20 minutes for this), and the rewrite is checked against that
version on short texts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from acp_fuzz.core.escaping import clip, md_code, md_text, terminal

N = 200_000

# The escaping as it was written before (quadratic: the pattern rescans a long word from
# each of its characters), kept as the reference on short texts.
_OLD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&!])")
_OLD_LINKISH = re.compile(r"(?i)\S*(?:://|www\.|@|mailto:)\S*")


def _old_terminal(s: str) -> str:
    return "".join(c if c.isprintable() or c in "\u200c\u200d" else repr(c)[1:-1] for c in s)


def _old_one_line(text: str) -> str:
    return _old_terminal(re.sub(r"[\r\n]+", " ", text))


def _old_md_code(text: str, *, table: bool = False) -> str:
    s = _old_one_line(text)
    if not s.strip():
        s = s or " "
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and
                                                            s.endswith(" ")) else ""
    if table:
        s = s.replace("|", "\\|")
    return f"{ticks}{pad}{s}{pad}{ticks}"


def _old_md_text(text: str, *, table: bool = False) -> str:
    s = " ".join(_old_one_line(text).split())
    out: list[str] = []
    pos = 0
    for m in _OLD_LINKISH.finditer(s):
        out.append(_OLD_SPECIAL.sub(r"\\\1", s[pos:m.start()]))
        out.append(_old_md_code(m.group(), table=table))
        pos = m.end()
    out.append(_OLD_SPECIAL.sub(r"\\\1", s[pos:]))
    return "".join(out)


PIECES = ["a", "@", "www.", "WwW.", "http://", "mailto:", "MAILTO:", ":", "/", ".", " ", "  ",
          "\n", "\r\n", "\t", "\x1b", "\x00", "\u00a0", "\u2028", "\u202e", "\ud800", "\u200d",
          "*", "_", "`", "``", "|", "\\", "<", ">", "[", "]", "!", "&", "~", "\u017f", "K"]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=12).map("".join)


@given(texts, st.booleans())
@example("see http://x and a@b.c, then www.y", False)
@example("`a` | ``b``", True)
def test_the_linear_escaping_is_the_escaping_it_replaced(s: str, table: bool) -> None:
    assert md_text(s, table=table) == _old_md_text(s, table=table)
    assert md_code(s, table=table) == _old_md_code(s, table=table)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("char", ["a", "*", "`", "\x1b", "\u202e"])
def test_a_long_word_is_escaped_in_one_pass(char: str) -> None:
    word = char * N
    shown = terminal(char)
    escaped = "".join("\\" + c if c in "\\`*_[]<>|~&!" else c for c in shown)
    assert md_text(word) == escaped * N
    assert md_text(word, table=True) == escaped * N
    code = md_code(word, table=True)
    fence = "`" * (N + 1) if char == "`" else "`"
    pad = " " if char == "`" else ""
    assert code == f"{fence}{pad}{shown * N}{pad}{fence}"


@pytest.mark.timeout(10)
def test_long_link_like_words_are_each_one_code_span() -> None:
    one_word = "http://" + "x" * N + "@" + "www." * 1000
    assert md_text("y" * N + " " + one_word) == "y" * N + f" `{one_word}`"
    words = "a@b " * (N // 4)
    assert md_text(words) == " ".join(["`a@b`"] * (N // 4))
    mixed = ("*x* " + "u@v ") * (N // 8)
    assert md_text(mixed, table=True) == " ".join(["\\*x\\* `u@v`"] * (N // 8))


def test_the_table_of_escapes_stays_bounded_on_text_of_many_code_points() -> None:
    from acp_fuzz.core import escaping

    many = "".join(map(chr, range(0x40000)))
    assert terminal(many) == _old_terminal(many)
    assert terminal(many, newlines=True) == _old_terminal(many).replace("\\n", "\n", 1)
    assert len(escaping._ONE_LINE) <= 65536


def test_clip_keeps_short_text_and_says_how_long_the_rest_was() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("a" * 30_000, 200) == "a" * 200 + "... [30000 chars]"
    assert clip(12345, 2) == "12... [5 chars]"


LONG = 30_000


def test_the_report_clips_what_the_cassette_chose() -> None:
    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.reporting import CLIP, render_markdown

    c = read_cassette(Path(__file__).resolve().parents[2] / "cassettes/reference/leak.cassette")
    assert isinstance(c.header.initialize, dict)
    c.header.initialize = {**c.header.initialize,
                           "agentInfo": {"name": "n" * LONG, "version": "v" * LONG}}
    c.header.meta["findings"][0]["message"] = "m" * LONG
    c.header.target = ["t" * LONG]
    report = render_markdown(c, path="x.cassette")
    assert f"... [{LONG} chars]" in report
    for ch in "nvmt":
        runs = re.findall(f"{ch}{{100,}}", report)
        assert runs and max(map(len, runs)) <= 2 * CLIP, ch
    assert max(map(len, report.splitlines())) < 10 * CLIP


def test_the_matrix_clips_a_long_agent_name_profile_and_rule() -> None:
    from acp_fuzz.reporting.matrix import CLIP, column_from_report, matrix_html, matrix_markdown

    col = column_from_report({
        "agent": {"agentInfo": {"name": "n" * LONG, "version": "v" * LONG}},
        "findings": [{"severity": "MUST", "status": "failed", "rule": "r" * LONG,
                      "oracle": "o" * LONG}]}, profile="p" * LONG)
    for page in (matrix_markdown([col]), matrix_html([col])):
        assert f"... [{LONG} chars]" in page
        for ch in "nvpro":
            runs = re.findall(f"{ch}{{100,}}", page)
            assert runs and max(map(len, runs)) <= 2 * CLIP, (ch, page[:300])
        assert len(page) < 40 * CLIP * 3
