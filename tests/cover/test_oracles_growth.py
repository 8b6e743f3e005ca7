"""The oracles' cost per step does not grow with the history (issue #36 §3).

No clock: the work is counted. A long history's leak checks once searched every client text
sent so far in every model request (``prompt.leak``'s sessions, ``reject.side-effect``'s
refused texts), and a campaign's ``Evaluator.feed`` of the whole history after each step read
every event again; both made judging quadratic in the steps (``benchmarks/bench_growth.py``,
docs/performance.md "How the cost grows"). Here the Python lines run to judge one more block
of steps are counted after 100 and after 400 blocks like it, and the events a step-by-step
feed reads are counted.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from hypothesis import given, settings
from hypothesis import strategies as st
from test_oracles import BASE, H, P, Q, appended, only, sp
from test_oracles_shown import error, request, update

from acp_fuzz.core.builtin.isolation import _Sent
from acp_fuzz.core.builtin.needles import GRAM, INDEXED_FROM, Needles
from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.core.lifecycle import handle_name
from acp_fuzz.core.oracles import Baseline, Evaluator

CORPUS = sorted((Path(__file__).resolve().parents[2] / "cassettes").rglob("*.cassette"))


def block(h: H, k: int) -> None:
    """One block of steps with texts of its own: a session with a prompt, a refused session
    with another, a turn on the first (a model request, which the leak checks judge), and
    the first deleted. Handles are reused after Z, as the strategies reuse them."""
    a, b = handle_name(2 * k), handle_name(2 * k + 1)
    own = f"{P} [canary {k}]"
    h.new(a, sp("append", own))
    h.new(b, {"mode": "prepend", "content": [{"type": "text", "text": f"{Q} [refused {k}]"}]},
          outcome="error", error={"code": -32602, "message": "bad mode"})
    h.prompt(a, system=appended(own))
    h.step("delete", a)


def shown_block(h: H, k: int) -> None:
    """:func:`block`, with what an agent shows the client beside the model (issue #33 §2):
    the refused session's error answer, and a reply streamed to the first session, each long
    enough to be judged as a piece of a client text too."""
    a, b = handle_name(2 * k), handle_name(2 * k + 1)
    own = f"{P} [canary {k}]"
    h.new(a, sp("append", own))
    h.step("new", b, outcome="error", error={"code": -32602, "message": "bad mode"},
           systemPrompt={"mode": "prepend",
                         "content": [{"type": "text", "text": f"{Q} [refused {k}]"}]})
    request(h, 3 * k, "session/new", cwd="/w")
    error(h, 3 * k, f"Invalid params: unknown mode prepend (request {k})")
    h.prompt(a, system=appended(own))
    update(h, a, {"sessionUpdate": "agent_message_chunk",
                  "content": {"type": "text", "text": f"Here is the answer to turn {k}."}})
    h.step("delete", a)


def lines_run(fn: Callable[[], None]) -> int:
    """How many Python lines ``fn`` runs (every frame it enters), restoring the tracer that
    was there (coverage's, under ``.ci/run``)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(before)
    return count


def cost_of_one_more_block(blocks: int, make: Callable[[H, int], None] = block) -> int:
    h = H()
    for k in range(blocks):
        make(h, k)
    judge = Evaluator(baseline=BASE)
    judge.feed(h.h.snapshot())
    start = len(h.h)
    make(h, blocks)
    tail = h.h.snapshot()[start:]
    return lines_run(lambda: judge.feed(tail))


def test_judging_one_more_block_costs_the_same_after_300_or_1200_blocks() -> None:
    # Both past the point where the leak checks index their texts (INDEXED_FROM): each
    # block adds one refused text and two texts filed under a session.
    assert INDEXED_FROM <= 300
    early, late = cost_of_one_more_block(300), cost_of_one_more_block(1200)
    assert early > 0
    # Searching every text sent so far ran about 4 times as many lines after 1200 blocks.
    assert late <= early * 1.1, (early, late)


def test_judging_what_the_agent_shows_costs_the_same_after_300_or_1200_blocks() -> None:
    # An error answer and a streamed reply per block, each searched for every client text
    # (and for a piece of one): a search of each text ran about 4 times as many lines after
    # 1200 blocks.
    early = cost_of_one_more_block(300, shown_block)
    late = cost_of_one_more_block(1200, shown_block)
    assert early > 0
    assert late <= early * 1.1, (early, late)


def test_a_leak_and_a_refused_text_are_found_late_in_a_long_history() -> None:
    h = H()
    for k in range(150):
        block(h, k)
    late = h.new("A", sp("append", "Answer as a pirate would, always. [canary late]"))
    step = h.prompt("A", system=appended("Answer as a pirate would, always. [canary late]",
                                         f"{P} [canary 3]", f"{Q} [refused 5]"))
    f = only(h.findings(), "prompt.leak")
    assert (f.severity, f.session, f.step) == ("MUST", "A", step)
    assert f.evidence["foreign_session"] == handle_name(6)  # block 3's session
    refused = only(h.findings(), "reject.side-effect")
    assert refused.step == 5 * 4 + 1  # block 5's refused new
    assert late == step - 1


class Counted(Sequence[Event]):
    """A history that counts the events read out of it."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.read = 0

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, i: int) -> Event: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Event]: ...

    def __getitem__(self, i: int | slice) -> Event | Sequence[Event]:
        out = self.events[i]
        self.read += len(out) if isinstance(out, list) else 1
        return out

    def __iter__(self) -> Iterator[Event]:
        for e in self.events:
            self.read += 1
            yield e


def test_feeding_the_whole_history_after_each_step_reads_each_event_about_once() -> None:
    h = H()
    for k in range(60):
        block(h, k)
    events = h.h.snapshot()
    judge = Evaluator(baseline=BASE)
    read = 0
    steps = [i + 1 for i, e in enumerate(events) if e.kind == "verdict"]
    for end in steps:
        history = Counted(events[:end])
        judge.feed(history)
        read += history.read
    # A few positions looked at per call, and each event read once (it was every event
    # of the history at every call: 60 blocks, 240 steps, some 70,000 reads).
    assert read <= len(events) + 4 * len(steps), (read, len(events))
    whole = Evaluator(baseline=BASE)
    whole.feed(events)
    assert judge.findings() == whole.findings()
    assert judge.judged() == whole.judged()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(texts=st.lists(st.text("ab c]", min_size=1, max_size=24), max_size=40),
       picks=st.lists(st.integers(0, 10**6), max_size=6),
       junk=st.text("ab c]x", max_size=80), indexed_from=st.sampled_from([0, 3, 10, 100]))
def test_needles_find_exactly_what_a_search_of_each_finds(texts: list[str], picks: list[int],
                                                          junk: str, indexed_from: int) -> None:
    # A small alphabet, so that texts overlap, share pieces and hold one another; indexed
    # from the first text, or a few, or never.
    needles = Needles(indexed_from)
    added: list[str] = []
    for i in range(0, len(texts), 5):
        needles.add(texts[i:i + 5])
        added += texts[i:i + 5]
        hay = junk.join([added[p % len(added)] for p in picks] + [junk]) if added else junk
        assert needles.found_in(hay) == {t for t in added if t and t in hay}


@settings(max_examples=150, deadline=None, derandomize=True)
@given(texts=st.lists(st.text("ab c]", min_size=1, max_size=60), max_size=40),
       cut=st.tuples(st.integers(0, 10**6), st.integers(0, 60)),
       junk=st.text("ab c]x", max_size=30), indexed_from=st.sampled_from([0, 3, 10, 100]))
def test_needles_holding_finds_exactly_what_a_search_of_each_finds(
        texts: list[str], cut: tuple[int, int], junk: str, indexed_from: int) -> None:
    # A piece of one of the texts (long enough for the index, or not), or junk.
    needles = Needles(indexed_from)
    added: list[str] = []
    for i in range(0, len(texts), 5):
        needles.add(texts[i:i + 5])
        added += texts[i:i + 5]
        pick = added[cut[0] % len(added)] if added else ""
        for piece in (pick[cut[1] % (len(pick) + 1):], pick[:cut[1]], junk, junk + pick):
            assert needles.holding(piece) == {t for t in added if t and piece in t}


def test_needles_holding_reads_a_piece_once_whatever_the_number_of_texts() -> None:
    # Texts with nothing in common: a piece's candidates are the texts filed under its
    # least shared pieces (texts that share those with it would be candidates too).
    def text(k: int) -> str:
        return hashlib.sha256(str(k).encode()).hexdigest()

    few, many = Needles(), Needles()
    few.add(text(k) for k in range(INDEXED_FROM))
    many.add(text(k) for k in range(10 * INDEXED_FROM))
    piece = text(7)[5:40]
    assert few.holding(piece) == many.holding(piece) == {text(7)}
    assert many.probed == few.probed == len(piece) - GRAM + 1
    assert many.searched == few.searched == 1


def test_needles_read_a_request_once_whatever_the_number_of_texts() -> None:
    few, many = Needles(), Needles()
    few.add(f"{P} [canary {k}]" for k in range(INDEXED_FROM))
    many.add(f"{P} [canary {k}]" for k in range(10 * INDEXED_FROM))
    request = "\n\n".join(appended(f"{P} [canary 7]"))
    assert few.found_in(request) == many.found_in(request) == {f"{P} [canary 7]"}
    assert many.probed == few.probed == len(request) - GRAM + 1
    # The texts differ only at their end, and each is filed under its own end.
    assert many.searched == few.searched == 1


def test_every_text_the_tracker_files_is_one_the_leak_check_searches_for() -> None:
    # The leak check files the texts of each step's prompt itself (before the tracker has
    # applied the step); it must hold every text the tracker files under a session.
    histories: list[tuple[list[Event], Baseline]] = []
    for path in CORPUS:
        c = read_cassette(path)
        if c.header.kind != "client-finding":
            histories.append((c.events, Baseline.from_wire(c.header.run_settings.baseline)))
    h = H()
    h.new("A", sp("append", P))
    h.step("fork", "A", new="B", systemPrompt=sp("append", Q))
    histories.append((h.h.snapshot(), BASE))
    assert len(histories) >= 8
    for events, baseline in histories:
        judge = Evaluator(baseline=baseline)
        judge.feed(events)
        filed = set().union(*judge._tracker.all_blocks.values())
        searched = judge._contexts["prompt.leak"].memo(_Sent).texts
        assert all(t in searched for t in filed)
