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

**XML** (:func:`xml_text`): the terminal policy with newlines kept, which covers every
character XML 1.0 forbids, so a JUnit file always parses; ``&``, ``<`` and ``>`` are left to
the XML writer.
"""

from __future__ import annotations

import re

__all__ = ["md_code", "md_text", "terminal", "xml_text"]

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
    return "".join(c if c.isprintable() or c in _JOINERS or (newlines and c == "\n")
                   else repr(c)[1:-1] for c in s)


# Zero-width (non-)joiners build emoji sequences and Indic and Persian words; they move and
# hide nothing, so they are kept as they are.
_JOINERS = frozenset("\u200c\u200d")


def _one_line(text: object) -> str:
    s = text if isinstance(text, str) else str(text)
    return terminal(re.sub(r"[\r\n]+", " ", s))


def md_code(text: object, *, table: bool = False) -> str:
    """``text`` as one Markdown inline code span: newlines collapsed to spaces, control
    characters shown as escapes, a fence longer than any backtick run inside, and with
    ``table``, ``|`` escaped so the span cannot end a table cell."""
    s = _one_line(text)
    if not s.strip():
        s = s or " "
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    ticks = "`" * (longest + 1)
    # A space pads a span that starts or ends with a backtick (or is all spaces: CommonMark
    # strips one space from each end of a span that has a non-space inside).
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and
                                                            s.endswith(" ")) else ""
    if table:
        s = s.replace("|", "\\|")
    return f"{ticks}{pad}{s}{pad}{ticks}"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&!])")
_LINKISH = re.compile(r"(?i)\S*(?:://|www\.|@|mailto:)\S*")


def md_text(text: object, *, table: bool = False) -> str:
    """``text`` as inline Markdown prose: one line, control characters shown as escapes,
    Markdown and HTML punctuation backslash-escaped, and any link-like word (``http://``,
    ``www.``, an ``@``) in a code span, so nothing renders as a link, an image, HTML or
    emphasis."""
    s = " ".join(_one_line(text).split())
    out: list[str] = []
    pos = 0
    for m in _LINKISH.finditer(s):
        out.append(_MD_SPECIAL.sub(r"\\\1", s[pos:m.start()]))
        out.append(md_code(m.group(), table=table))
        pos = m.end()
    out.append(_MD_SPECIAL.sub(r"\\\1", s[pos:]))
    return "".join(out)


def xml_text(text: object) -> str:
    """``text`` fit for an XML document (a JUnit file): :func:`terminal` with newlines kept.
    Every character XML 1.0 forbids (C0 controls, lone surrogates, U+FFFE, U+FFFF) is
    non-printable, so the document always parses; the ones it only discourages (DEL, C1) are
    shown too, as the CI page that displays them is a terminal of sorts."""
    return terminal(text, newlines=True)
