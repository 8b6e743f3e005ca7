"""The agent's default instructions, as calibration learns them (pure).

Before the run, acp-fuzz opens sessions without a client prompt and records what the agent
sends the model: :func:`learn_baseline` keeps the system-slot lines they all share, a
:class:`Baseline`. ``override.not-applied`` and ``append.replaced-default`` judge a session's
system slot against it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Baseline", "is_instruction", "learn_baseline"]

#: Default instructions count as present when this share of the baseline lines is in the
#: system slot, and as gone below the lower bound; in between, no verdict is given.
DEFAULT_PRESENT, DEFAULT_ABSENT = 0.5, 0.1
MIN_BASELINE_LINE = 16


@dataclass(frozen=True)
class Baseline:
    """The agent's own default instructions, learned from sessions without a client prompt.

    ``lines`` are the system-slot lines that every baseline request shared: dynamic parts
    (dates, paths, ids) differ between baseline sessions, which are made with different
    working directories, and drop out of the intersection. Of these, only
    :attr:`instructions` count: lines that are not instructions (``x-anthropic-billing-header:
    …`` and other ``key: value`` headers, Markdown headings, tag-only markers, ids, anything
    with fewer than three words) are left out.

    ``override.not-applied`` and ``append.replaced-default`` judge only a
    :attr:`substantial` baseline: at least :data:`MIN_BASELINE_LINES` instruction lines and
    :data:`MIN_BASELINE_CHARS` characters. Below that, a share of "the defaults" is one or two
    lines (an SDK's one-line identity, say) and one kept line flips it from 0 to 100 %.
    """

    lines: frozenset[str] = frozenset()

    @property
    def instructions(self) -> frozenset[str]:
        """The baseline lines that are instructions (see :func:`is_instruction`)."""
        return frozenset(ln for ln in self.lines if is_instruction(ln))

    @property
    def known(self) -> bool:
        """Whether calibration saw any default instruction at all."""
        return bool(self.instructions)

    @property
    def size_lines(self) -> int:
        return len(self.instructions)

    @property
    def size_chars(self) -> int:
        """The size of the default instructions in characters (the lines, without newlines)."""
        return sum(len(ln) for ln in self.instructions)

    @property
    def substantial(self) -> bool:
        """Whether there is enough default text to judge override and append by."""
        return self.size_lines >= MIN_BASELINE_LINES and self.size_chars >= MIN_BASELINE_CHARS

    def share_in(self, text: str) -> float:
        lines = self.instructions
        if not lines:
            return 0.0
        return sum(1 for line in lines if line in text) / len(lines)

    def kept_in(self, text: str) -> list[str]:
        """The baseline lines (instructions or not) that ``text`` holds, in order."""
        return sorted(ln for ln in self.lines if ln in text)

    def to_wire(self) -> list[str]:
        return sorted(self.lines)

    @classmethod
    def from_wire(cls, obj: Any) -> Baseline:
        if not isinstance(obj, list):
            return cls()
        return cls(frozenset(x for x in obj if isinstance(x, str)))


#: A baseline is substantial (override and append are judged) from this many instruction
#: lines and characters on. The reference agent's defaults are 4 lines and 237 characters,
#: codex's and Claude Code's hundreds of lines; the Claude Agent SDK's bare default (a billing
#: header and the one-line identity "You are a Claude agent, built on …") is 1 line, ~60.
MIN_BASELINE_LINES = 3
MIN_BASELINE_CHARS = 150
_HEADER = re.compile(r"^[A-Za-z][\w.]*-[\w.-]*\s*:|^[\w.-]+\s*:\s*[\w.-]+=")
_MARKER = re.compile(r"^(#|<[^>]*>$|[-=*_]{3,}$)")
_WORD = re.compile(r"[^\W\d_]{2,}")


def is_instruction(line: str) -> bool:
    """Whether a default-prompt line reads as an instruction to the model: three or more
    words, and not a ``key-name: value`` header (``x-anthropic-billing-header: cc_version=…``),
    a Markdown heading, a tag-only marker line or a rule. Ids, hashes and dates have too few
    words."""
    s = line.strip()
    if _HEADER.match(s) or _MARKER.match(s):
        return False
    return len(_WORD.findall(s)) >= 3


def learn_baseline(system_texts: Sequence[str]) -> Baseline:
    """Learn the default instructions from the system-slot text of >= 2 baseline requests."""
    sets = []
    for text in system_texts:
        sets.append({ln.strip() for ln in text.splitlines()
                     if len(ln.strip()) >= MIN_BASELINE_LINE})
    if len(sets) < 2:
        return Baseline(frozenset(sets[0]) if sets else frozenset())
    common = set.intersection(*sets)
    return Baseline(frozenset(common))
