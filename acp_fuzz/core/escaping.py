"""One escaping policy for every output acp-fuzz writes (pure).

Agent names, stderr, session updates, model text and finding messages are chosen by the agent
under test (or by whoever made a cassette), so every output treats them as hostile:

**Terminal** (:func:`terminal`): every character Python calls non-printable is shown as its
Python escape, never interpreted: C0 controls (so ESC, and with it every CSI and OSC sequence),
DEL, C1 (``\\x9b`` is a one-byte CSI), the bidirectional overrides and isolates
(``\\u202e``), format characters such as the zero-width space (the zero-width joiners
excepted), separators other than the space, lone surrogates. A newline is kept only where the
output is meant to span lines. The rich console never parses agent text as markup: it goes in
:class:`rich.text.Text` objects or is printed with ``markup=False``, so an agent named
``[/x]`` is printed as such.

**Markdown** (:func:`md_code`, :func:`md_text`): agent text goes into inline code spans with a
fence longer than any backtick run inside, newlines collapsed to spaces, and (in tables)
``|`` escaped as ``\\|``. Inside a code span there is no HTML (``<!--`` cannot hide the rest of
a report), no link and no emphasis. Free text outside code spans (:func:`md_text`) has its
Markdown punctuation backslash-escaped and anything link-like put in a code span.

**HTML** (:func:`html_text`): the terminal policy (no bidi override reorders a cell, no
control character), then every ``&``, ``<``, ``>`` and quote as its entity, so a text is never
markup, in an element or an attribute; clipped first where a page gives it a limit.

**XML** (:func:`xml_text`): the terminal policy with newlines kept, which covers every
character XML 1.0 forbids, so a JUnit file always parses; ``&``, ``<`` and ``>`` are left to
the XML writer.
"""

from __future__ import annotations

import html
import re

__all__ = ["clip", "html_text", "md_code", "md_text", "terminal", "xml_text"]

def terminal(text: object, *, newlines: bool = False) -> str:
    """``text`` safe to print on a terminal: every character Python calls non-printable
    (:meth:`str.isprintable`: controls, format characters such as the bidi overrides,
    separators other than the space, surrogates, unassigned code points) is shown as its
    Python escape (``\\n``, ``\\x1b``, ``\\u202e``), except the zero-width joiner and
    non-joiner, which emoji and scripts need.

    With ``newlines``, ``\\n`` is kept (for output meant to span lines); otherwise it is
    shown as ``\\n`` too, so one value is one line."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    # str.translate walks the text in C and asks the table only once per distinct
    # character (a table that learns: see _Escapes), so a long text costs little.
    return s.translate(_KEEP_NEWLINES if newlines else _ONE_LINE)


# Zero-width (non-)joiners build emoji sequences and Indic and Persian words; they move and
# hide nothing, so they are kept as they are.
_JOINERS = frozenset("\u200c\u200d")


class _Escapes(dict[int, str]):
    """A :meth:`str.translate` table that works out each character's escape the first time
    it is asked and keeps it (at most 65,536 of them, so text made of every code point
    does not grow it without bound)."""

    def __init__(self, *, newlines: bool) -> None:
        super().__init__()
        self._newlines = newlines

    def __missing__(self, code: int) -> str:
        c = chr(code)
        shown = c if c.isprintable() or c in _JOINERS or (self._newlines and c == "\n") \
            else repr(c)[1:-1]
        if len(self) < 65536:
            self[code] = shown
        return shown


_ONE_LINE = _Escapes(newlines=False)
_KEEP_NEWLINES = _Escapes(newlines=True)


def _one_line(text: object) -> str:
    s = text if isinstance(text, str) else str(text)
    return terminal(_NEWLINES.sub(" ", s) if "\n" in s or "\r" in s else s)


_NEWLINES = re.compile(r"[\r\n]+")
_TICKS = re.compile(r"`+")


def md_code(text: object, *, table: bool = False) -> str:
    """``text`` as one Markdown inline code span: newlines collapsed to spaces, control
    characters shown as escapes, a fence longer than any backtick run inside, and with
    ``table``, ``|`` escaped so the span cannot end a table cell."""
    return _span(_one_line(text), table)


def _span(s: str, table: bool) -> str:
    """The code span of ``s``, already one line and escaped for the terminal."""
    if not s:
        s = " "
    longest = max(map(len, _TICKS.findall(s))) if "`" in s else 0
    ticks = "`" * (longest + 1)
    # A space pads a span that starts or ends with a backtick (or is all spaces: CommonMark
    # strips one space from each end of a span that has a non-space inside).
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and
                                                            s.endswith(" ")) else ""
    if table and "|" in s:
        s = s.replace("|", "\\|")
    return f"{ticks}{pad}{s}{pad}{ticks}"


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~&!"})
# What makes a word link-like (none of these holds a space, so a word holds one exactly when
# the text does there). Found by one scan of the text, from which each link-like word is
# cut out around its mark: escaping is linear in the text's length. (A pattern that matched
# the whole word around the mark, ``\S*(?:://|...)\S*``, rescanned a long word from each of
# its characters: a 30,000-character agent name took a minute.)
_LINK_MARK = re.compile(r"(?i)://|www\.|@|mailto:")


def md_text(text: object, *, table: bool = False) -> str:
    """``text`` as inline Markdown prose: one line, control characters shown as escapes,
    Markdown and HTML punctuation backslash-escaped, and any link-like word (``http://``,
    ``www.``, an ``@``) in a code span, so nothing renders as a link, an image, HTML or
    emphasis. Linear in the length of ``text``."""
    # After terminal() the only whitespace left is the space: words are split by " ".
    s = " ".join(_one_line(text).split())
    out: list[str] = []
    pos = 0  # 0, or the index of the space (or the end) after the last link-like word
    for m in _LINK_MARK.finditer(s):
        if m.start() < pos:
            continue  # another mark in the word just put in a code span
        start = s.rfind(" ", pos, m.start()) + 1
        end = s.find(" ", m.end())
        end = len(s) if end < 0 else end
        out.append(s[pos:start].translate(_MD_SPECIAL))
        out.append(_span(s[start:end], table))
        pos = end
    out.append(s[pos:].translate(_MD_SPECIAL))
    return "".join(out)


def clip(text: object, limit: int) -> str:
    """``text`` cut to its first ``limit`` characters and a marker saying how long it was
    (``... [30000 chars]``), or as it is when it is no longer: for text a stranger chose
    (an agent's name, a finding's message) in a report meant for people."""
    s = text if isinstance(text, str) else str(text)
    return s if len(s) <= limit else f"{s[:limit]}... [{len(s)} chars]"


def xml_text(text: object) -> str:
    """``text`` fit for an XML document (a JUnit file): :func:`terminal` with newlines kept.
    Every character XML 1.0 forbids (C0 controls, lone surrogates, U+FFFE, U+FFFF) is
    non-printable, so the document always parses; the ones it only discourages (DEL, C1) are
    shown too, as the CI page that displays them is a terminal of sorts."""
    return terminal(text, newlines=True)


def html_text(text: object, *, limit: int | None = None, newlines: bool = False) -> str:
    """``text`` fit for an HTML page, in an element or a quoted attribute: cut to ``limit``
    (:func:`clip`) when one is given, :func:`terminal` (newlines kept where the page shows
    them, in a ``<pre>``), then :func:`html.escape` with quotes."""
    s = clip(text, limit) if limit else text
    return html.escape(terminal(s, newlines=newlines), quote=True)
