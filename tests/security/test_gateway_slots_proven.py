"""The gateway's connection slots belong to connections that have shown the run's token.

Any local process could open the gateway's 64 connection slots and hold each for the header
deadline (one byte sent, then nothing), again and again, and the agent's own connections got
503s the whole time. Now a connection that has not yet shown the token ("unproven": reading
its header block, or idle before its first request) is closed to make room when the slots are
full and a new connection comes, the oldest first; a newcomer is refused (503) only when every
slot is held by a connection that has shown the token, and one that has shown it once keeps
its slot (keep-alive). Each case uses raw sockets on 127.0.0.1, as another process would.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from contextlib import ExitStack

import openai
import pytest

from acp_fuzz.core.history import History
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.gateway.server import MAX_CONNECTIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "acpfuzz-token-gateway-slots-0123456789"
BODY = b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}'
REQUEST = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"x-api-key: " + SECRET.encode() + b"\r\nContent-Length: %d\r\n\r\n%s"
           % (len(BODY), BODY))
#: What squatters send before they fall silent: one byte, or a header block cut inside a key
#: (read as a request with a short key if its end were taken for the block's end).
SQUATS = (b"P", b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: acpfuzz-tok")


def _connect(gw: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])), timeout=30)


def _squat(gw: Gateway, stack: ExitStack, n: int) -> list[socket.socket]:
    socks = []
    for i in range(n):
        sock = stack.enter_context(_connect(gw))
        sock.sendall(SQUATS[i % 2])
        socks.append(sock)
    return socks


def _ask(sock: socket.socket) -> int:
    """Send one request with the token on ``sock`` (kept alive); its status, body read."""
    sock.sendall(REQUEST)
    reader = sock.makefile("rb")
    status_line = reader.readline()
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    reader.read(length)
    return int(status_line.split()[1]) if status_line else 0


def _closed(sock: socket.socket) -> bool:
    """Has the gateway closed ``sock``? (Its EOF is already there when this is asked.)"""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def gw() -> Iterator[Gateway]:
    # Deadlines far past the test: only eviction can free a squatter's slot.
    with Gateway(History(), token=SECRET, idle_timeout=600, header_timeout=600) as gateway:
        yield gateway


def test_a_request_with_the_token_gets_a_slot_that_squatters_hold(gw: Gateway) -> None:
    with ExitStack() as stack:
        squatters = _squat(gw, stack, MAX_CONNECTIONS + 8)
        agent = stack.enter_context(_connect(gw))
        assert _ask(agent) == 200
        # The 8 past the cap and then the agent's connection each closed the oldest squatter.
        assert [_closed(s) for s in squatters[:12]] == [True] * 9 + [False] * 3
        assert gw.counts["connections_evicted"] == 9
        assert gw.counts["connections_refused"] == 0
        assert gw.connections == MAX_CONNECTIONS
        # Squatters keep coming: they evict one another, never the proven connection. (A
        # second agent connection, accepted after them, is answered once they all were.)
        more = _squat(gw, stack, MAX_CONNECTIONS)
        again = stack.enter_context(_connect(gw))
        assert _ask(again) == 200 and _ask(agent) == 200
        assert all(_closed(s) for s in squatters)
        assert [_closed(s) for s in more[:3]] == [True, True, False]
        assert not any(_closed(s) for s in more[2:])
        assert gw.counts["connections_evicted"] == 9 + MAX_CONNECTIONS + 1
        # The evicted ones ended quietly: no request of theirs (a cut header block with a
        # short key would be a 401) reached the history.
        assert gw.history is not None
        assert [x.status for _, x in gw.history.model_exchanges()] == [200, 200, 200]


def test_an_sdk_gets_through_a_gateway_full_of_squatters(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=SECRET, max_retries=0, timeout=30)
    with ExitStack() as stack:
        _squat(gw, stack, MAX_CONNECTIONS)
        for _ in range(3):
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].message.content == "ok"
        _squat(gw, stack, MAX_CONNECTIONS)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "ok"
    client.close()
    assert gw.counts["connections_refused"] == 0
    assert gw.counts["connections_evicted"] >= 1


def test_a_newcomer_is_refused_when_every_slot_is_proven() -> None:
    with Gateway(History(), token=SECRET, idle_timeout=600) as gw, ExitStack() as stack:
        proven = [stack.enter_context(_connect(gw)) for _ in range(MAX_CONNECTIONS)]
        assert [_ask(s) for s in proven] == [200] * MAX_CONNECTIONS
        with _connect(gw) as extra:
            assert extra.makefile("rb").read().startswith(b"HTTP/1.1 503")
        assert gw.counts["connections_refused"] == 1
        assert gw.counts["connections_evicted"] == 0
        # Keep-alive: each proven connection still holds its slot and is served.
        assert [_ask(s) for s in proven] == [200] * MAX_CONNECTIONS
        assert gw.connections == MAX_CONNECTIONS


def test_only_unproven_connections_are_evicted() -> None:
    with Gateway(History(), token=SECRET, idle_timeout=600, header_timeout=600,
                 max_connections=4) as gw, ExitStack() as stack:
        first = stack.enter_context(_connect(gw))
        assert _ask(first) == 200
        squatters = _squat(gw, stack, 2)
        second = stack.enter_context(_connect(gw))
        assert _ask(second) == 200
        # Full (two proven, two not): each newcomer closes the oldest unproven one.
        late = _squat(gw, stack, 2)
        assert _ask(first) == 200 and _ask(second) == 200
        assert [_closed(s) for s in squatters] == [True, True]
        # A connection refused for a missing token proves nothing and keeps no slot.
        stranger = stack.enter_context(_connect(gw))
        stranger.sendall(REQUEST.replace(SECRET.encode(), b"not-the-token"))
        assert stranger.makefile("rb").read().startswith(b"HTTP/1.1 401")
        assert [_closed(s) for s in late] == [True, False]
        assert gw.counts["connections_evicted"] == 3
        # The 401 freed its slot: the next connection takes it, evicting no one.
        third = stack.enter_context(_connect(gw))
        assert _ask(third) == 200
        assert not _closed(late[1])
        fourth = stack.enter_context(_connect(gw))
        assert _ask(fourth) == 200
        assert _closed(late[1])
        assert [_ask(s) for s in (first, second, third)] == [200] * 3
        with _connect(gw) as extra:
            assert extra.makefile("rb").read().startswith(b"HTTP/1.1 503")
        assert gw.counts["connections_evicted"] == 4
        assert gw.counts["connections_refused"] == 1
