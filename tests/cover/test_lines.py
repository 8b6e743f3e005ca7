"""NDJSON framing without a process (acp_fuzz.core.lines): what the transport's reader does
with every chunking of an agent's stdout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_fuzz.core.lines import BAD_LINE_MAX, OVERSIZE_HEAD, LineAssembler, parse_line


class Sink:
    def __init__(self, cap: int = 64) -> None:
        self.out: list[tuple[str, bytes, int]] = []
        self.asm = LineAssembler(cap, lambda line: self.out.append(("line", line, len(line))),
                                 lambda head, size: self.out.append(("oversize", head, size)))

    def feed(self, *chunks: bytes) -> list[tuple[str, bytes, int]]:
        for c in chunks:
            self.asm.feed(c)
        return self.out


def test_lines_split_at_newlines_and_crlf_ends_lose_their_cr() -> None:
    assert Sink().feed(b'{"a":1}\n{"b":2}\r\n') == [
        ("line", b'{"a":1}', 7), ("line", b'{"b":2}', 7)]


def test_a_line_across_many_chunks_is_one_line() -> None:
    s = Sink()
    s.feed(*[bytes([c]) for c in b'{"jsonrpc":"2.0"}'])
    assert s.out == []
    assert s.asm.pending == 17
    s.feed(b"\n")
    assert s.out == [("line", b'{"jsonrpc":"2.0"}', 17)] and s.asm.pending == 0


def test_an_oversize_line_is_counted_not_kept() -> None:
    s = Sink(cap=10)
    s.feed(b"x" * 30, b"y" * 5000, b"\nok\n")
    (kind, head, size), ok = s.out
    assert (kind, size) == ("oversize", 5030)
    # The head is what was held when the line outgrew the cap; later bytes are only counted.
    assert head == b"x" * 30
    s2 = Sink(cap=10)
    s2.feed(b"y" * 5000 + b"\n")
    assert s2.out[0][1] == b"y" * OVERSIZE_HEAD
    assert ok == ("line", b"ok", 2)


def test_an_oversize_line_in_one_chunk_too() -> None:
    assert Sink(cap=4).feed(b"12345\n1234\n") == [("oversize", b"12345", 5),
                                                  ("line", b"1234", 4)]


def test_the_end_of_the_stream_hands_back_a_cut_line() -> None:
    s = Sink()
    s.feed(b'{"a":1}\n{"half":')
    assert s.asm.finish() == (b'{"half":', 8)
    assert s.asm.finish() is None  # and it is empty again
    big = Sink(cap=BAD_LINE_MAX * 4)
    big.feed(b"z" * (BAD_LINE_MAX + 10))
    head, size = big.asm.finish() or (b"", 0)
    assert (len(head), size) == (BAD_LINE_MAX, BAD_LINE_MAX + 10)


def test_a_cut_oversize_line_keeps_its_head_and_size() -> None:
    s = Sink(cap=3)
    s.feed(b"abcdef")
    assert s.asm.finish() == (b"abcdef", 6)


@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b), max_size=6),
       st.lists(st.integers(1, 50), min_size=1, max_size=8))
def test_any_chunking_gives_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    whole = Sink(cap=1000).feed(stream)
    pieces, i = [], 0
    for n in cuts * (len(stream) // max(1, sum(cuts)) + 1):
        pieces.append(stream[i:i + n])
        i += n
    assert Sink(cap=1000).feed(*pieces, stream[i:]) == whole
    assert [w[1] for w in whole] == [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def test_max_line_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineAssembler(0, print, print)  # type: ignore[arg-type]


@pytest.mark.parametrize(("line", "problem"), [
    (b"\xff\xfe{}", "invalid-utf8"),
    (b"{not json", "invalid-json"),
    (b'{"a": NaN}', "invalid-json"),
    (b"[1, 2]", "not-object"),
    (b"[" * 100_000, "invalid-json"),  # nesting past the recursion limit
])
def test_parse_line_names_what_is_wrong(line: bytes, problem: str) -> None:
    assert parse_line(line) == (None, problem)


def test_parse_line_gives_the_object() -> None:
    assert parse_line('{"jsonrpc":"2.0","id":1,"result":"é"}'.encode()) == (
        {"jsonrpc": "2.0", "id": 1, "result": "é"}, None)


# -- request correlation (acp_fuzz.engine.process.transport.Correlation), without a process
# ---------

def test_answers_find_their_request_and_strays_are_named() -> None:
    from acp_fuzz.engine.process.transport import Correlation

    c = Correlation()
    (r1, s1), (r2, s2), (r3, s3) = c.open(), c.open(), c.open()
    assert (r1, r2, r3) == (1, 2, 3)
    assert c.answer(2, False) == (s2, None, False)
    assert c.answer(2, False) == (None, "duplicate-id", False)  # answered twice
    assert c.give_up(r3, s3) is True and c.give_up(r3, s3) is False
    assert c.answer(3, False) == (None, "late", False)
    assert c.answer(3, False) == (None, "duplicate-id", False)
    assert c.answer(99, False) == (None, "unknown-id", False)
    assert c.answer("1", False) == (None, "unknown-id", False)  # "1" is not 1
    assert c.answer(None, True) == (None, None, True)  # JSON-RPC's parse-error answer
    assert c.answer(None, False) == (None, "unknown-id", False)
    c.sent_raw("raw-7")
    assert c.answer("raw-7", False) == (None, None, False)
    assert c.answer("raw-7", False) == (None, "duplicate-id", False)
    assert c.take_all() == {1: s1} and c.take_all() == {}
    assert c.take_one(1) is None


def test_a_request_that_could_not_be_sent_is_forgotten() -> None:
    from acp_fuzz.engine.process.transport import Correlation

    c = Correlation()
    rid, _ = c.open()
    c.forget(rid)
    assert c.pending == {} and c.answer(rid, False) == (None, "duplicate-id", False)
