"""The harness's memory stays bounded whatever a hostile agent writes, and the gateway cannot be
steered or exhausted by what is sent to it.

Transport (issue #25 §3): an agent that floods answers to ids no request has, or requests of
its own (agent-to-client JSON-RPC), used to grow the history, and the queues behind it,
without bound (1.12 GB and 848 MB in one example each). Each case runs the harness side in a
child process (:data:`HARNESS`: an :class:`AgentProcess` with its default bounds and the
client policy, as ``Run`` makes it) against an agent of ``tests/hostile_agents/``, and
asserts the child's peak resident set (the kernel's ``VmHWM``, read by the child itself at
the end: it only grows) and what the history kept.

Gateway: refused requests are recorded in brief and only so many per history; a request's
header block is bounded; idle connections are closed and concurrent ones capped (a newcomer
past the cap evicts the oldest connection that has not shown the token); and with
``--model-upstream`` the request target cannot change where a request is forwarded.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from acp_fuzz.core.errors import UpstreamError
from acp_fuzz.core.history import History
from acp_fuzz.engine.gateway import Gateway
from acp_fuzz.engine.gateway.server import (
    MAX_CONNECTIONS,
    MAX_HEADER_LINE,
    MAX_HEADERS,
    MAX_RECORDED_REFUSALS,
)
from acp_fuzz.engine.gateway.upstream import upstream_url
from acp_fuzz.engine.process.transport import (
    MAX_CLIENT_BACKLOG,
    MAX_RECORDED_CLIENT_REQUEST_BYTES,
    line_weight,
)
from tests.security._isolation import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

AGENTS = REPO / "tests" / "hostile_agents"
#: The bound on the harness child's peak RSS. Its baseline (Python, the engine's imports) is
#: about 35 MB; what the transport may keep of a flood (its recording budgets and queues) is
#: about 60 MB more. Before the bounds every case below went past 300 MB.
PEAK_RSS_BOUND_MB = 160

#: The harness side of a flood, run as ``python -c HARNESS MODE ARGV_JSON``. It prints one
#: JSON object: peak RSS, the outcome of the trigger request, and what the history kept.
HARNESS = r"""
import json, sys, threading
from acp_fuzz.core.history import History
from acp_fuzz.engine.process.client_policy import ClientPolicy
from acp_fuzz.engine.campaign.runner import (MAX_RECORDED_NOTIFICATION_BYTES,
                                    MAX_RECORDED_NOTIFICATIONS)
from acp_fuzz.engine.process.sandbox import Sandbox
from acp_fuzz.engine.process.transport import AgentProcess

mode, argv = sys.argv[1], json.loads(sys.argv[2])
history = History()
done = threading.Event()  # the agent's last request was handled


def sink(ev):
    # The deaf agent's requests cannot all be handled: their answers fill the backlog.
    if mode == "deaf" and ev.kind == "process" and ev.data["what"] == "client-requests-backlog":
        done.set()


history.sink = sink
SP = {"mode": "append", "content": [{"type": "text", "text": "Be brief."}]}
with Sandbox() as sb:
    policy = ClientPolicy([sb.root])

    def handler(method, params):
        try:
            return policy(method, params)
        finally:
            call = params.get("toolCall") if isinstance(params, dict) else None
            if isinstance(call, dict) and call.get("toolCallId") == "last":
                done.set()

    agent = AgentProcess(argv, env=sb.build_env(), cwd=sb.root, history=history,
                         client_handler=handler,
                         max_recorded_notifications=MAX_RECORDED_NOTIFICATIONS,
                         max_recorded_notification_bytes=MAX_RECORDED_NOTIFICATION_BYTES)
    agent.start()
    out = {}
    try:
        assert agent.request("initialize", {"protocolVersion": 1}, timeout=60).outcome == "ok"
        pending = agent.send_request("session/new", {"cwd": sb.root, "mcpServers": [],
                                                     "systemPrompt": SP})
        if mode == "responses":
            out["trigger"] = pending.wait(120).outcome
        else:
            out["handled"] = done.wait(120)
            if mode != "deaf":
                out["trigger"] = pending.wait(120).outcome
    finally:
        # The readers exit at the end of their stdin, once every answer is written; the deaf
        # agent never reads it.
        agent.close(grace=0 if mode == "deaf" else 30)
    with open("/proc/self/status") as f:
        out["peak_mb"] = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
    events = history.snapshot()
    recv = [e.data["msg"] for e in events if e.kind == "acp" and e.data["dir"] == "recv"
            and isinstance(e.data["msg"], dict)]
    out["stray_recorded"] = sum(1 for m in recv if "method" not in m
                                and str(m.get("id")) not in ("1", "2"))
    out["requests_recorded"] = sum(1 for m in recv if "method" in m and "id" in m)
    out["answers_recorded"] = sum(
        1 for e in events if e.kind == "acp" and e.data["dir"] == "send"
        and isinstance(e.data["msg"], dict) and "method" not in e.data["msg"])
    out["recorded_bytes"] = sum(len(json.dumps(e.data)) for e in events)
    out["process"] = [e.data for e in events if e.kind == "process"
                      and e.data["what"] not in ("spawn", "exit", "kill")]
print(json.dumps(out))
"""


def _harness(mode: str, agent: str, *args: str) -> dict[str, Any]:
    argv = [sys.executable, str(AGENTS / agent), *args]
    proc = subprocess.run([sys.executable, "-c", HARNESS, mode, json.dumps(argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(mode, agent, args, {k: v for k, v in out.items() if k != "process"})
    return out


def _process(out: dict[str, Any], what: str) -> list[dict[str, Any]]:
    return [p for p in out["process"] if p["what"] == what]


# -- the transport ------------------------------------------------------------------------------


def test_a_flood_of_answers_to_unknown_ids_is_counted_not_kept() -> None:
    # 60,000 answers of 4 KB each to ids no request has (240 MB on the pipe), before the
    # answer to the request that triggered them.
    count = 60_000
    out = _harness("responses", "flood_responses.py", str(count), "4000")
    assert out["trigger"] == "ok"  # the real answer behind the flood still arrives
    assert out["peak_mb"] <= PEAK_RSS_BOUND_MB, out["peak_mb"]
    assert 0 < out["stray_recorded"] < count
    (capped,) = _process(out, "stray-responses-capped")
    (dropped,) = _process(out, "stray-responses-dropped")
    assert dropped["count"] == count - out["stray_recorded"]
    assert capped["limit"] and capped["limit_bytes"]


@pytest.mark.parametrize(("mode", "count", "size"), [
    ("read", 300, 1 << 20),        # 300 reads of a 1 MiB file: big answers
    ("ask", 4_000, 64 * 1024),     # 4,000 permission requests of 64 KiB each: big requests
])
def test_a_flood_of_agent_requests_is_answered_but_recorded_within_a_budget(
        mode: str, count: int, size: int) -> None:
    out = _harness(mode, "flood_requests.py", mode, str(count), str(size))
    assert out["handled"] and out["trigger"] == "ok"  # every request was answered, in order
    assert out["peak_mb"] <= PEAK_RSS_BOUND_MB, out["peak_mb"]
    total = count + 1  # and the "last" one
    (dropped,) = _process(out, "client-requests-dropped")
    # Recorded up to the budget (request and answer lines together), the rest counted.
    assert out["recorded_bytes"] <= MAX_RECORDED_CLIENT_REQUEST_BYTES + 4 * 1024 * 1024
    assert out["requests_recorded"] + dropped["count"] == total
    # An answer is recorded only with its request; those left out for the budget are counted.
    assert out["answers_recorded"] + dropped["answers"] == out["requests_recorded"]
    assert dropped["count"] + dropped["answers"] > 0
    assert dropped["unanswered"] == 0


def test_requests_from_an_agent_that_reads_no_answer_wait_in_a_bounded_queue() -> None:
    # 5,000 reads of a 64 KiB file, then the agent stops reading its stdin: no answer can be
    # delivered, so they used to pile up in the writer's queue (320 MB).
    out = _harness("deaf", "flood_requests.py", "deaf", "5000", str(64 * 1024))
    assert out["handled"]
    assert out["peak_mb"] <= PEAK_RSS_BOUND_MB, out["peak_mb"]
    (backlog,) = _process(out, "client-requests-backlog")
    assert backlog["waiting"] == backlog["limit"] == MAX_CLIENT_BACKLOG
    # What could not be answered before the end is counted as such.
    (dropped,) = _process(out, "client-requests-dropped")
    assert dropped["unanswered"] > 0


def test_budgets_weigh_what_a_line_costs_parsed() -> None:
    # 200 notifications of 300 KB, each a list of 100,000 empty objects: within the
    # notification budget's 16 MiB if counted by length, and 24 times that once parsed.
    out = _harness("responses", "flood_shapes.py", "200", "100000")
    assert out["trigger"] == "ok"
    assert out["peak_mb"] <= PEAK_RSS_BOUND_MB, out["peak_mb"]
    (dropped,) = _process(out, "notifications-dropped")
    assert 0 < dropped["count"] < 200


def test_line_weight_tracks_parsed_size() -> None:
    for line in (b'{"t":"' + b"x" * 10_000 + b'"}', b"[" + b",".join([b"{}"] * 10_000) + b"]",
                 b"[" + b",".join([b'{"a":1}'] * 10_000) + b"]",
                 b"[" + b",".join([b"1.5"] * 10_000) + b"]"):
        tracemalloc.start()
        parsed = json.loads(line)
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del parsed
        assert size / 2.5 <= line_weight(line) <= size * 4, (line[:20], size)


# -- the gateway ----------------------------------------------------------------------------------

SECRET = "acpfuzz-token-hostile-memory-0123456789"


def _port(gw: Gateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def _raw_request(port: int, target: str, headers: list[tuple[str, str]],
                 body: bytes = b"") -> int:
    """Send one request exactly as given; its status (0 when the gateway closed on it)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("POST", target, skip_host=True, skip_accept_encoding=True)
        for name, value in [("Host", f"127.0.0.1:{port}"), *headers,
                            ("Content-Length", str(len(body)))]:
            conn.putheader(name, value)
        conn.endheaders(body)
        return conn.getresponse().status
    except (ConnectionError, http.client.RemoteDisconnected):
        return 0
    finally:
        conn.close()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway(History(), token=SECRET) as gw:
        yield gw


def test_refused_requests_are_recorded_in_brief_and_only_so_many(gateway: Gateway) -> None:
    # 100 requests without the token, each with a 4 KB path and 40 headers of 1 KB: every one
    # used to be recorded whole (40 KB each, more with bigger headers).
    headers = [(f"x-junk-{i}", "j" * 1000) for i in range(40)]
    statuses = {_raw_request(_port(gateway), "/v1/messages?" + "q" * 4000, headers)
                for _ in range(100)}
    assert statuses == {401}
    assert gateway.history is not None
    refused = gateway.history.model_exchanges()
    assert len(refused) == MAX_RECORDED_REFUSALS
    assert gateway.counts["refused"] == 100
    assert gateway.counts["unrecorded"] == 100 - MAX_RECORDED_REFUSALS
    for ev, x in refused:
        assert len(json.dumps(ev.data)) < 4096  # method, clipped path, a few headers, reason
        assert x.status == 401 and "token" in x.reply_text and x.body is None
        assert x.headers["x-acp-fuzz-omitted"] == "34 more headers"  # 40 + host + length
    assert "counted, not recorded" in refused[-1][1].reply_text
    # A new history (the next run) records refusals again.
    gateway.history = History()
    assert _raw_request(_port(gateway), "/v1/messages", []) == 401
    assert [x.status for _, x in gateway.history.model_exchanges()] == [401]


HEADER_FLOOD = r"""
import http.client, json, socket, sys
from acp_fuzz.core.history import History
from acp_fuzz.engine.gateway import Gateway

history = History()
statuses = []
with Gateway(history) as gw:
    port = int(gw.url.rsplit(":", 1)[1])
    value = "h" * (64 * 1024 - 32)
    for _ in range(40):
        # 90 headers of 64 KB, within the stdlib's own bounds (100 lines of 64 KiB).
        head = "".join(f"x-big-{i}: {value}\r\n" for i in range(90))
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            s.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\n{head}"
                      "Content-Length: 0\r\n\r\n".encode())
            status = int(s.makefile("rb").readline().split()[1])
        except (ConnectionError, IndexError):
            status = 0  # closed on it: refused before all of it was read
        finally:
            s.close()
        statuses.append(status)
with open("/proc/self/status") as f:
    peak = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
print(json.dumps({"peak_mb": peak, "statuses": sorted(set(statuses)),
                  "recorded_bytes": sum(len(json.dumps(e.data)) for e in history.snapshot())}))
"""


def test_a_request_header_block_is_bounded() -> None:
    # 40 requests with 90 headers of 64 KB each took the gateway from 38 to 352 MB.
    proc = subprocess.run([sys.executable, "-c", HEADER_FLOOD], cwd=REPO, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(out)
    assert out["peak_mb"] <= 120, out
    assert set(out["statuses"]) <= {431, 0}, out
    assert out["recorded_bytes"] < MAX_RECORDED_REFUSALS * 4096


def test_real_agents_header_blocks_pass(gateway: Gateway) -> None:
    # An SDK's 10-30 headers, a long bearer token among them, pass; past the bounds, a 431
    # (recorded in brief), with or without the token.
    auth = [("Authorization", f"Bearer {SECRET}")]
    sdk = [(f"x-stainless-{i}", "v" * 200) for i in range(30)] + [("x-jwt", "t" * 4000)]
    body = b'{"model": "m", "max_tokens": 8, "messages": []}'
    assert _raw_request(_port(gateway), "/v1/messages", auth + sdk, body) == 200
    many = [(f"x-h-{i}", "v") for i in range(MAX_HEADERS + 1)]
    assert _raw_request(_port(gateway), "/v1/messages", auth + many, body) in (431, 0)
    long = [("x-long", "v" * (MAX_HEADER_LINE + 1))]
    assert _raw_request(_port(gateway), "/v1/messages", auth + long, body) in (431, 0)
    assert gateway.history is not None
    assert [x.status for _, x in gateway.history.model_exchanges()] == [200, 431, 431]


def test_connections_past_the_cap_are_refused_and_idle_ones_closed() -> None:
    body = b'{"model": "m", "max_tokens": 8, "messages": []}'
    request = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + SECRET.encode() +
               b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    with Gateway(History(), token=SECRET, idle_timeout=600) as gw:
        held = [socket.create_connection(("127.0.0.1", _port(gw)), timeout=30)
                for _ in range(MAX_CONNECTIONS)]
        try:
            # One more than the cap: not parked with the others. None of them has shown the
            # token, so the newcomer takes the oldest one's slot, which is closed.
            extra = socket.create_connection(("127.0.0.1", _port(gw)), timeout=30)
            held.append(extra)
            assert held[0].recv(100) == b""  # EOF: evicted
            assert gw.counts["connections_evicted"] == 1
            assert gw.connections == MAX_CONNECTIONS
            # The others are served: an agent's keep-alive connections are unaffected.
            for sock in (held[1], extra):
                sock.sendall(request)
                assert sock.makefile("rb").readline().startswith(b"HTTP/1.1 200")
            # Once every slot has shown the token, one more is answered 503 and closed.
            for sock in held[2:-1]:
                sock.sendall(request)
                assert sock.makefile("rb").readline().startswith(b"HTTP/1.1 200")
            with socket.create_connection(("127.0.0.1", _port(gw)), timeout=30) as refused:
                assert refused.makefile("rb").read().startswith(b"HTTP/1.1 503")
            assert gw.counts["connections_refused"] == 1
            assert gw.connections == MAX_CONNECTIONS
        finally:
            for s in held:
                s.close()
    # Idle (or half-sent) connections are closed by the gateway after its idle timeout.
    with Gateway(History(), token=SECRET, idle_timeout=0.5) as gw:
        idle = socket.create_connection(("127.0.0.1", _port(gw)), timeout=60)
        half = socket.create_connection(("127.0.0.1", _port(gw)), timeout=60)
        with idle, half:
            half.sendall(b"POST /v1/mess")
            assert idle.recv(100) == b""  # EOF: the gateway closed it
            assert half.recv(100) == b""


def test_the_request_target_cannot_steer_the_upstream() -> None:
    # The configured upstream, and another local server the agent would like to reach with
    # the user's real key (the "other host": another port on 127.0.0.1).
    upstream_history, other_history = History(), History()
    auth = [("Authorization", f"Bearer {SECRET}"), ("Content-Type", "application/json")]
    body = b'{"model": "m", "max_tokens": 8, "messages": []}'
    with Gateway(upstream_history, reply_text="from-upstream", require_token=False) as up, \
            Gateway(other_history, reply_text="from-other", require_token=False) as other:
        where = f"127.0.0.1:{_port(other)}"
        # An upstream URL without a port, as real ones are (https://api.openai.com): pasted
        # after it, ":PORT/x" picked the port (and ".evil.example/x" the host). It reached
        # the other server, Authorization header and all.
        with Gateway(History(), upstream="http://127.0.0.1", token=SECRET) as front:
            assert _raw_request(_port(front), f":{_port(other)}/v1/messages", auth, body) == 400
        with Gateway(History(), upstream=up.url, token=SECRET) as front:
            for target in (f"http://{where}/v1/messages",  # absolute-form
                           f"@{where}/v1/messages",         # the base's host:port@other
                           "*"):
                assert _raw_request(_port(front), target, auth, body) == 400, target
            # A leading // is a path on the upstream (the stdlib makes it one /), not a host.
            assert _raw_request(_port(front), f"//{where}/v1/messages", auth, body) == 200
            assert _raw_request(_port(front), "/v1/messages?beta=true", auth, body) == 200
            assert front.history is not None
            assert [x.status for _, x in front.history.model_exchanges()] == [
                400, 400, 400, 200, 200]
    assert other_history.model_exchanges() == []
    assert [x.path for _, x in upstream_history.model_exchanges()] == [
        f"/{where}/v1/messages", "/v1/messages?beta=true"]


@pytest.mark.parametrize("target", ["http://127.0.0.1:9/x", "@127.0.0.1:9/x", ":9/x",
                                    ".evil.example/x", "//127.0.0.1:9/x", "x", ""])
def test_upstream_url_keeps_the_configured_host(target: str) -> None:
    with pytest.raises(UpstreamError):
        upstream_url("http://127.0.0.1", target)


def test_upstream_url_joins_the_base_path_and_the_query() -> None:
    assert upstream_url("https://api.example.com/v1/", "/chat/completions?a=b&key=k") == \
        "https://api.example.com/v1/chat/completions?a=b&key=k"
    assert upstream_url("http://127.0.0.1:8080", "/x@y/z") == "http://127.0.0.1:8080/x@y/z"
