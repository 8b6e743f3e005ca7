"""What a local process can send the fake model gateway is bounded (issue #37).

Each attack is sent on raw sockets to a real gateway on 127.0.0.1, as another process on the
machine (or a hostile agent) would send it:

- a body whose JSON holds millions of tiny values (60 MiB of ``{}`` peaked at 1.5 GB; a
  59 KiB gzip body carried it), and compressed bodies that inflate past the body limit;
- chunk sizes that are not plain hex (``-1`` read to the end of the stream, past the limit),
  and trailers without end;
- a request sent one byte at a time, which the per-read idle timeout never cut off, so a few
  such connections held the gateway's connection slots for ever.

The memory ones keep the test small: the bodies are sent compressed or are just past the
value bound, and the test asserts the answer and that the gateway goes on serving.
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import zlib
from collections.abc import Iterator

import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.gateway.body import MAX_BODY, MAX_JSON_VALUES, MAX_TRAILERS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "acpfuzz-token-gateway-bounds-0123456789"
AUTH = b"x-api-key: " + SECRET.encode() + b"\r\n"
OK_BODY = b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}'


def _port(gw: Gateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def _connect(gw: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", _port(gw)), timeout=30)


def _head(extra: bytes = b"", auth: bytes = AUTH) -> bytes:
    return (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + auth + extra + b"\r\n")


def _response(sock: socket.socket) -> tuple[int, bytes]:
    """The status and the rest of what the gateway sends before it closes."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


def _send(gw: Gateway, head: bytes, body: bytes) -> tuple[int, bytes]:
    with _connect(gw) as sock:
        sock.sendall(head + body)
        # Keep the socket open for writing: a gateway that waited for more would hang here.
        return _response(sock)


def _error(data: bytes) -> str:
    message: str = json.loads(data.partition(b"\r\n\r\n")[2])["error"]["message"]
    return message


def _still_serves(gw: Gateway) -> None:
    with _connect(gw) as sock:
        sock.sendall(_head(b"Connection: close\r\nContent-Length: %d\r\n" % len(OK_BODY))
                     + OK_BODY)
        assert _response(sock)[0] == 200


def _gzip_of(block: bytes, times: int, head: bytes = b"", tail: bytes = b"") -> bytes:
    """A gzip member of ``head + block * times + tail``, compressed as it is made."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(head)]
    parts += [packer.compress(block) for _ in range(times)]
    return b"".join([*parts, packer.compress(tail), packer.flush()])


@pytest.fixture
def gw() -> Iterator[Gateway]:
    with Gateway(History(), token=SECRET) as gateway:
        yield gateway


# -- bodies that parse or inflate into too much ------------------------------------------------


#: Just past the value bound: every ``{}`` after the first is two values (``,`` and ``{``).
#: Parsed, 36 MB of dicts; the 1.5 MB of text is sent gzipped in about 5 KB.
_EMPTIES = MAX_JSON_VALUES // 2 + 1


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate"])
def test_a_body_of_too_many_json_values_gets_413(gw: Gateway, encoding: str) -> None:
    text = b"[" + b"{}," * _EMPTIES + b"{}]"
    body = {"identity": text, "gzip": gzip.compress(text), "deflate": zlib.compress(text)}
    status, data = _send(gw, _head(b"Content-Encoding: %s\r\nContent-Length: %d\r\n"
                                   % (encoding.encode(), len(body[encoding]))), body[encoding])
    assert status == 413
    assert "JSON values" in _error(data)
    assert gw.history is not None
    assert [x.status for _, x in gw.history.model_exchanges()] == [413]
    _still_serves(gw)


def test_strings_holding_brackets_and_commas_are_not_values(gw: Gateway) -> None:
    # A tool result full of code is one value, whatever punctuation it holds.
    content = "{[,\\\"" * (MAX_JSON_VALUES // 2)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]})
    packed = gzip.compress(body.encode())
    status, _ = _send(gw, _head(b"Content-Encoding: gzip\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n" % len(packed)), packed)
    assert status == 200
    assert gw.history is not None
    assert [x.status for _, x in gw.history.model_exchanges()] == [200]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_that_inflates_past_the_limit_gets_413(gw: Gateway, encoding: str) -> None:
    # 64 KiB of zeros per block: 65 KB on the wire, one byte past MAX_BODY inflated.
    block, times = b"0" * 65536, MAX_BODY // 65536
    packed = _gzip_of(block, times, tail=b"0")
    if encoding == "deflate":
        packer = zlib.compressobj(9)
        packed = b"".join([*(packer.compress(block) for _ in range(times)),
                           packer.compress(b"0"), packer.flush()])
    assert len(packed) < 200_000
    status, data = _send(gw, _head(b"Content-Encoding: %s\r\nContent-Length: %d\r\n"
                                   % (encoding.encode(), len(packed))), packed)
    assert status == 413 and "decompressed" in _error(data)
    _still_serves(gw)


def test_every_gzip_member_counts_toward_the_limit(gw: Gateway) -> None:
    # Two members of 40 MiB each: only the first was inflated (and the rest dropped unread).
    member = _gzip_of(b"0" * 65536, 40 * 16)
    packed = member + member
    status, data = _send(gw, _head(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n"
                                   % len(packed)), packed)
    assert status == 413 and "decompressed" in _error(data)


def test_an_unknown_content_encoding_gets_415(gw: Gateway) -> None:
    status, _ = _send(gw, _head(b"Content-Encoding: br\r\nContent-Length: 4\r\n"), b"abcd")
    assert status == 415


# -- chunked framing ---------------------------------------------------------------------------


@pytest.mark.parametrize("size_line", [
    b"-1", b"+5", b"0x5", b" 5", b"5 5", b"5_0", b"", b"-0", b"0" * 2000 + b"5",
    b"g", b"5\x00",
])
def test_a_chunk_size_that_is_not_plain_hex_gets_400(gw: Gateway, size_line: bytes) -> None:
    # "-1" made the gateway read to the end of the stream, past its body limit: the
    # connection stays open here, so that gateway never answers.
    status, data = _send(gw, _head(b"Transfer-Encoding: chunked\r\n"),
                         size_line + b"\r\n" + b"x" * 4096)
    assert status == 400 and "chunk" in _error(data)
    _still_serves(gw)


def test_a_chunk_size_past_the_limit_gets_413_unread(gw: Gateway) -> None:
    status, _ = _send(gw, _head(b"Transfer-Encoding: chunked\r\n"),
                      b"%x\r\n" % (MAX_BODY + 1) + b"x" * 4096)
    assert status == 413


def test_chunk_extensions_and_trailers_are_accepted(gw: Gateway) -> None:
    chunks = b"".join(b"%x;name=value\r\n%s\r\n" % (len(p), p)
                      for p in (OK_BODY[:10], OK_BODY[10:]))
    status, _ = _send(gw, _head(b"Transfer-Encoding: chunked\r\nConnection: close\r\n"),
                      chunks + b"0\r\nx-trailer: 1\r\n\r\n")
    assert status == 200
    assert gw.history is not None
    assert [x.body for _, x in gw.history.model_exchanges()] == [json.loads(OK_BODY)]


def test_trailers_without_end_get_400(gw: Gateway) -> None:
    # The trailers after the last chunk were read until an empty line, however many came.
    trailers = b"".join(b"x-t-%d: v\r\n" % i for i in range(MAX_TRAILERS + 1))
    status, data = _send(gw, _head(b"Transfer-Encoding: chunked\r\n"), b"0\r\n" + trailers)
    assert status == 400 and "trailer" in _error(data)


def test_a_chunk_that_does_not_end_where_its_size_says_gets_400(gw: Gateway) -> None:
    status, _ = _send(gw, _head(b"Transfer-Encoding: chunked\r\n"), b"2\r\nabcd\r\n0\r\n\r\n")
    assert status == 400


@pytest.mark.parametrize("length", [b"-1", b"+5", b"5 5", b"0x5", b"1_0"])
def test_a_content_length_that_is_not_plain_digits_gets_400(gw: Gateway, length: bytes) -> None:
    status, _ = _send(gw, _head(b"Content-Length: " + length + b"\r\n"), b"x" * 16)
    assert status == 400


# -- slow requests and connection slots -------------------------------------------------------


def _drip(sock: socket.socket) -> tuple[int, bytes]:
    """Send one byte at a time, a byte each time the gateway stays silent for 50 ms (never
    idle for its idle timeout), until it answers or closes; then what it sent."""
    while True:
        try:
            sock.send(b"x")
        except (BrokenPipeError, ConnectionResetError):
            return _response(sock)
        readable, _, _ = select.select([sock], [], [], 0.05)
        if readable:
            return _response(sock)


def test_a_header_block_sent_a_byte_at_a_time_is_cut_off() -> None:
    with Gateway(History(), token=SECRET, idle_timeout=600, header_timeout=0.5) as gw, \
            _connect(gw) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nx-drip: ")
        assert _drip(sock) == (0, b"")  # closed on it
        _still_serves(gw)


def test_a_body_sent_a_byte_at_a_time_gets_408() -> None:
    with Gateway(History(), token=SECRET, idle_timeout=600, request_timeout=0.5) as gw, \
            _connect(gw) as sock:
        sock.sendall(_head(b"Content-Length: 100000\r\n"))
        status, data = _drip(sock)
        assert status == 408 and "did not arrive" in _error(data)
        assert gw.history is not None
        assert [x.status for _, x in gw.history.model_exchanges()] == [408]


def test_connections_without_the_token_hold_no_slot() -> None:
    with Gateway(History(), token=SECRET, idle_timeout=600, header_timeout=0.5,
                 max_connections=1) as gw:
        # A request without the token that announces a body it never sends: answered and
        # closed at once, its slot free for the agent's next connection.
        for _ in range(5):
            status, _ = _send(gw, _head(b"Content-Length: 1000000\r\n", auth=b""), b"")
            assert status == 401
            _still_serves(gw)
        # A connection that sends nothing, or drips its header block, keeps the one slot
        # only until the header deadline.
        with _connect(gw) as squatter:
            assert _drip(squatter) == (0, b"")
        _still_serves(gw)
        assert gw.counts["refused"] == 5
