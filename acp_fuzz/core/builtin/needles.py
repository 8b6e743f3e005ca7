"""Which of many texts one text holds, at a cost that does not grow with how many (pure).

The leak checks ask, for every model request, which of the client texts sent so far (every
session's prompt blocks, every refused one) are in it. Searching for each text in turn costs
the number of texts times the request: fine for one example's dozen, quadratic over a long
history, where the texts grow with the steps (10,000 steps: 3,000 texts, milliseconds per
request; ``benchmarks/bench_growth.py``).

:class:`Needles` keeps the texts and answers :meth:`Needles.found_in` exactly as that search
would. Below :data:`INDEXED_FROM` texts it is that search. From there on it keeps an index
of :data:`GRAM`-character pieces: each text is filed under one piece of its own, the one
whose place in the index is emptiest (texts that differ only in a canary at their end are
filed under their ends, apart), and a request is read once, piece by piece. A text inside
the request is among the texts filed under one of the request's pieces, and each such
candidate is then confirmed by a plain search: the cost of a request is its length plus its
candidates, whatever the number of texts.

:meth:`Needles.holding` asks the other way round, which texts hold a given piece (a title
or a line the agent shows that is a piece of a client text): from the same point on, each
text is filed under every piece that starts at a multiple of :data:`STRIDE` in it, so that
a piece at least ``STRIDE + GRAM - 1`` characters long covers one of them at every place it
can sit; the candidates are the texts filed under the least shared of its pieces at each of
the ``STRIDE`` alignments, again confirmed by a plain search (texts that share those pieces
with it at the same alignment are candidates too: a piece of a part many texts have in
common costs their number, as a search of each would).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["GRAM", "INDEXED_FROM", "STRIDE", "Needles"]

#: The length of the pieces the index files texts under. A shorter text is searched for on
#: its own (the leak checks' texts are at least MIN_SIGNIFICANT, 12 characters, long).
GRAM = 8
#: Below this many texts a plain search of each is cheaper than reading the request (measured
#: on the recorded histories of ``benchmarks/bench_growth.py``: 64 made a 1,000-step history
#: 12 % slower to judge than plain searches, 256 and 1,024 were as fast as them, or faster).
INDEXED_FROM = 256
#: :meth:`Needles.holding` files a text under its pieces at every this many places: a piece
#: of ``STRIDE + GRAM - 1`` characters (23: the titles it asks about are at least 24 long) or
#: more is then found through the index, a shorter one by a plain search.
STRIDE = 16
#: Where a long text is filed: among its first and its last this many places (a canary is
#: at its end), so filing a 96 KiB text costs no more than filing a short one.
_PLACES = 64


class Needles:
    """A growing set of texts, and which of them a text holds (see the module's docstring).

    ``searched`` counts the plain searches (``needle in text``) made so far, and ``probed``
    the index look-ups: what a test counts instead of timing. ``indexed_from``: how many
    texts make the index worth keeping (a test lowers it)."""

    def __init__(self, indexed_from: int = INDEXED_FROM) -> None:
        self._indexed_from = indexed_from
        self._texts: dict[str, None] = {}  # insertion order: the same filing every run
        self._short: list[str] = []
        self._index: dict[str, list[str]] | None = None
        # piece -> the texts with it at a multiple of STRIDE (holding's; made at its first
        # use past indexed_from)
        self._every: dict[str, dict[str, None]] | None = None
        self.searched = 0
        self.probed = 0

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, text: object) -> bool:
        return text in self._texts

    def add(self, texts: Iterable[str]) -> None:
        """Add texts (an empty one is never found, so it is left out)."""
        for t in texts:
            if t and t not in self._texts:
                self._texts[t] = None
                if self._index is not None:
                    self._file(t)
                if self._every is not None:
                    self._file_every(t)
        if self._index is None and len(self._texts) >= self._indexed_from:
            self._index = {}
            for t in self._texts:
                self._file(t)

    def found_in(self, text: str) -> set[str]:
        """Every added text that ``text`` holds: ``{n for n in added if n in text}``."""
        if self._index is None:
            self.searched += len(self._texts)
            return {n for n in self._texts if n in text}
        index = self._index
        candidates: set[str] = set()
        starts = range(len(text) - GRAM + 1)
        self.probed += len(starts)
        for i in starts:
            filed = index.get(text[i:i + GRAM])
            if filed:
                candidates.update(filed)
        candidates.update(self._short)
        self.searched += len(candidates)
        return {n for n in candidates if n in text}

    def holding(self, piece: str) -> set[str]:
        """Every added text that holds ``piece``: ``{n for n in added if piece in n}``."""
        last = len(piece) - GRAM  # the last place a whole GRAM-piece of it starts at
        if self._index is None or last + 1 < STRIDE:
            self.searched += len(self._texts)
            return {n for n in self._texts if piece in n}
        if self._every is None:
            self._every = {}
            for t in self._texts:
                self._file_every(t)
        every = self._every
        none: dict[str, None] = {}
        candidates: set[str] = set()
        # A text holding the piece at place p has it filed under the piece's GRAM-pieces at
        # each i with p + i a multiple of STRIDE: one alignment of the STRIDE, all of them.
        for r in range(STRIDE):
            filed = [every.get(piece[i:i + GRAM], none) for i in range(r, last + 1, STRIDE)]
            self.probed += len(filed)
            least: dict[str, None] = min(filed, key=len)
            candidates.update(least)
        self.searched += len(candidates)
        return {n for n in candidates if piece in n}

    def _file_every(self, text: str) -> None:
        assert self._every is not None
        for j in range(0, len(text) - GRAM + 1, STRIDE):
            self._every.setdefault(text[j:j + GRAM], {})[text] = None

    def _file(self, text: str) -> None:
        assert self._index is not None
        last = len(text) - GRAM  # the last place a whole piece starts at
        if last < 0:
            self._short.append(text)
            return
        index = self._index
        places = range(last, -1, -1) if last < 2 * _PLACES else \
            [*range(last, last - _PLACES, -1), *range(_PLACES)]
        best = min(places, key=lambda j: len(index.get(text[j:j + GRAM], ())))
        index.setdefault(text[best:best + GRAM], []).append(text)
