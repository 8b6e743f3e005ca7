"""Reading and parsing a model request's body within fixed bounds.

The agent (or any local process with the run's token) chooses every byte of a body, so each
way of making it large is bounded before the memory is spent:

- the bytes on the wire, framing included (a ``Content-Length`` or every chunk-size line,
  chunk, line end and trailer of a chunked body), at most :data:`MAX_BODY`;
- the bytes a ``gzip``/``x-gzip``/``deflate`` body inflates to, counted as it inflates (never
  more than :data:`MAX_BODY` + 1 bytes are produced), at most :data:`MAX_BODY` too;
- the JSON values the body would parse into, counted on its text before it is parsed
  (an empty object is 2 bytes of text and 64 in memory): at most :data:`MAX_JSON_VALUES`.

Past either size bound the request gets a 413, past the value bound a 413 too, and a
malformed body (a chunk size that is not plain hex, a stream that does not inflate) a 400:
:class:`BodyError` carries the status and a one-line reason.
"""

from __future__ import annotations

import json
import re
import zlib
from itertools import accumulate
from typing import Any, Protocol

from acp_fuzz.core.errors import AcpFuzzError

__all__ = ["MAX_BODY", "MAX_CHUNK_LINE", "MAX_JSON_DEPTH", "MAX_JSON_VALUES", "MAX_TEXT_BODY",
           "MAX_TRAILERS", "BodyError", "parse_body", "read_body"]

#: Largest request body accepted, on the wire and after decompression; bigger ones get a 413.
MAX_BODY = 64 * 1024 * 1024
#: JSON values (containers, and each member or element after the first: each ``{``, ``[``
#: and ``,`` outside strings) a body may hold; more get a 413. Parsed, a value costs at most
#: about 100 bytes (a unique key and its slot, an empty dict), so this bounds a parse to
#: about 100 MB; agents' requests, long conversations with tools and schemas, hold
#: 5,000-50,000. The 64 MiB body limit alone let 60 MiB of ``{}`` become 1.5 GB.
MAX_JSON_VALUES = 1_000_000
#: Deeper nesting is not parsed: the body is kept as text (as it always was past the
#: parser's own recursion limit), so nothing that walks a parsed body recurses past it.
MAX_JSON_DEPTH = 500
#: Longest non-JSON body text kept in a recorded exchange.
MAX_TEXT_BODY = 1024 * 1024
#: Longest chunk-size line (size, extensions, line end), and trailer lines after the last
#: chunk (each at most ``MAX_TRAILER_LINE`` bytes).
MAX_CHUNK_LINE = 1024
MAX_TRAILERS = 64
MAX_TRAILER_LINE = 16 * 1024
#: Bytes read from the socket at a time: a ``Content-Length`` is a claim, not an allocation.
_PIECE = 1024 * 1024

#: A chunk-size line: plain hex digits (no sign, ``0x``, space or underscore inside), optional
#: whitespace and ``;extensions`` (ignored), then the line end.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
_LINE_END = (b"\r\n", b"\n")
#: A JSON string (its brackets and commas are text); an unterminated one runs to the end.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
#: Every byte but brackets, and what each bracket does to the depth, for :func:`_fits`.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 for b in range(256)]


class BodyError(AcpFuzzError):
    """A body refused: ``status`` (400, 413, 415) and the reason as the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Reader(Protocol):
    """What a body is read from (the handler's buffered socket file)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def readline(self, size: int = -1, /) -> bytes: ...


class _Sink:
    """A body's bytes as they arrive: counted on the wire, inflated by the Content-Encoding
    as they come, and refused once either count passes ``limit``."""

    def __init__(self, encoding: str, limit: int) -> None:
        self._limit = limit
        self._gzip = encoding in ("gzip", "x-gzip")
        identity = encoding in ("", "identity")
        if not (identity or self._gzip or encoding == "deflate"):
            raise BodyError(415, f"unsupported Content-Encoding {encoding!r}")
        # 47: gzip or zlib, told apart by the header; 15: zlib (HTTP's "deflate").
        self._wbits = 47 if self._gzip else 15
        self._inflater = None if identity else zlib.decompressobj(self._wbits)
        self._pieces: list[bytes] = []
        self._size = 0  # decoded bytes kept
        self.received = 0  # bytes on the wire, framing included

    def reserve(self, n: int) -> None:
        """Refuse now if ``n`` more bytes on the wire would pass the limit."""
        if self.received + n > self._limit:
            raise BodyError(413, f"request body too large (over {self._limit} bytes)")

    def wire(self, n: int) -> None:
        self.reserve(n)
        self.received += n

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise BodyError(413, f"request body too large (over {self._limit} bytes once "
                                 "decompressed)")
        if data:
            self._pieces.append(data)

    def feed(self, data: bytes) -> None:
        self.wire(len(data))
        if self._inflater is None:
            self._keep(data)
            return
        while data:
            if self._inflater.eof:  # a gzip body may hold several members, one after another
                if not self._gzip:
                    raise BodyError(400, "data after the end of the deflate stream")
                self._inflater = zlib.decompressobj(self._wbits)
            try:
                # A piece at a time, and never more than one byte past the limit in all.
                out = self._inflater.decompress(data, min(_PIECE, self._limit + 1 - self._size))
            except zlib.error:
                raise BodyError(400, "body does not match its Content-Encoding") from None
            self._keep(out)
            inflater = self._inflater
            data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail

    def finish(self) -> bytes:
        if self._inflater is not None and self.received and not self._inflater.eof:
            raise BodyError(400, "the compressed body ends before its stream does")
        return b"".join(self._pieces)


def _line(rfile: Reader, sink: _Sink, limit: int, what: str) -> bytes:
    line = rfile.readline(limit + 1)
    sink.wire(len(line))
    if not line.endswith(b"\n") or len(line) > limit:
        raise BodyError(400, f"bad chunked body: {what} too long or cut short")
    return line


def _read_exact(rfile: Reader, sink: _Sink, n: int) -> None:
    sink.reserve(n)  # refused before a byte of it is read
    while n > 0:
        piece = rfile.read(min(n, _PIECE))
        if not piece:
            raise BodyError(400, "the body ends before its announced length")
        sink.feed(piece)
        n -= len(piece)


def _read_chunked(rfile: Reader, sink: _Sink) -> None:
    while True:
        line = _line(rfile, sink, MAX_CHUNK_LINE, "a chunk-size line")
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise BodyError(400, "bad chunked body: a chunk size is not plain hex digits")
        size = int(match.group(1), 16)
        if size == 0:
            break
        _read_exact(rfile, sink, size)
        if _line(rfile, sink, 2, "a chunk's line end") not in _LINE_END:
            raise BodyError(400, "bad chunked body: a chunk does not end where its size says")
    for _ in range(MAX_TRAILERS + 1):  # the trailers, up to an empty line
        if _line(rfile, sink, MAX_TRAILER_LINE, "a trailer line") in _LINE_END:
            return
    raise BodyError(400, f"bad chunked body: more than {MAX_TRAILERS} trailer lines")


def read_body(rfile: Reader, headers: Any) -> bytes:
    """Read a request's body from ``rfile`` as its ``headers`` (an
    :class:`email.message.Message`) frame and encode it: decoded, at most :data:`MAX_BODY`
    bytes on the wire and decoded. Raises :class:`BodyError`."""
    sink = _Sink(headers.get("Content-Encoding", "").strip().lower(), MAX_BODY)
    coding = headers.get("Transfer-Encoding")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            raise BodyError(400, f"unsupported Transfer-Encoding {coding!r}")
        _read_chunked(rfile, sink)
        return sink.finish()
    lengths = {v.strip() for v in headers.get_all("Content-Length") or ()}
    if len(lengths) > 1 or not all(re.fullmatch(r"[0-9]{1,20}", v) for v in lengths):
        raise BodyError(400, "bad Content-Length")
    length = int(lengths.pop()) if lengths else 0
    _read_exact(rfile, sink, length)
    return sink.finish()


def _fits(text: bytes) -> bool:
    """Whether the UTF-8 JSON ``text`` nests at most :data:`MAX_JSON_DEPTH` deep; raises a
    413 :class:`BodyError` past :data:`MAX_JSON_VALUES` values. Counts outside strings only
    (no byte of a multi-byte UTF-8 character is ASCII)."""
    opens = text.count(b"[") + text.count(b"{")
    if opens <= MAX_JSON_DEPTH and opens + text.count(b",") <= MAX_JSON_VALUES:
        return True  # what is inside strings can only lower the counts
    # Without the strings, in C: a loop over the tokens took four times as long as the parse.
    structure = _STRING.sub(b"", text)
    opens = structure.count(b"[") + structure.count(b"{")
    if opens + structure.count(b",") > MAX_JSON_VALUES:
        raise BodyError(413, f"request body holds more than {MAX_JSON_VALUES} JSON values")
    if opens <= MAX_JSON_DEPTH:
        return True
    brackets = structure.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= MAX_JSON_DEPTH


def parse_body(raw: bytes) -> Any:
    """The parsed JSON of ``raw``; its text (the first :data:`MAX_TEXT_BODY` bytes) when it
    is not JSON or nests deeper than :data:`MAX_JSON_DEPTH`; ``None`` when empty. Raises a
    413 :class:`BodyError` when it holds more than :data:`MAX_JSON_VALUES` values."""
    if not raw:
        return None
    text: bytes | None = raw
    encoding = json.detect_encoding(raw)
    if not encoding.startswith("utf-8"):
        # UTF-16 or -32 (which the parser takes too): its escapes and quotes are not single
        # bytes, so it is counted as UTF-8.
        try:
            text = raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            text = None
    if text is not None and _fits(text):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass  # not JSON: kept as text
    return raw[:MAX_TEXT_BODY].decode("utf-8", errors="replace")
