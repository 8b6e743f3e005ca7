"""Tests for acp_fuzz.core.cassette: round trips, atomic writes, and hostile input."""

from __future__ import annotations

import gc
import hashlib
import re
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acp_fuzz
from acp_fuzz.core.cassette import (
    FORMAT_VERSION,
    MAGIC,
    Cassette,
    CassetteError,
    CassetteWriter,
    Header,
    Limits,
    RunSettings,
    iter_events,
    open_cassette,
    read_cassette,
    write_cassette,
)
from acp_fuzz.core.history import CLIPPED, MAX_DATA_DEPTH, Event, History, ModelExchange, Segment

DOC = Path(__file__).resolve().parents[2] / "docs" / "cassette-format.md"

# Hypothesis runs many examples against one tmp_path; each example writes its own file.
HYP = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- helpers -------------------------------------------------------------------------------


def full_history() -> History:
    """A history with every event kind and awkward payloads."""
    h = History()
    weird = "NUL\x00 ctl\x01\x1f\x7f tab\t nl\n é 中文 😀🏳️‍🌈 \u200b\ufeff"
    h.append(
        "process",
        {
            "what": "spawn",
            "pid": 4242,
            "argv": ["agent", "--acp"],
            "returncode": None,
            "generation": 0,
        },
    )
    h.append("step", {"index": 0, "name": "initialize", "args": {"protocolVersion": 1}})
    h.append(
        "acp",
        {
            "dir": "send",
            "msg": {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/prompt",
                "params": {
                    "prompt": [{"type": "text", "text": weird}],
                    "nested": {
                        "a": [
                            1,
                            -2,
                            2**63 - 1,
                            -(2**63),
                            2**64 - 1,
                            1.5,
                            -0.0,
                            None,
                            True,
                            False,
                            [],
                            {},
                            [[[{"deep": "x"}]]],
                        ]
                    },
                },
            },
        },
    )
    h.append("acp", {"dir": "recv", "msg": None, "raw": "not json {\x00"})
    big = "x" * (1024 * 1024) + weird
    ex = ModelExchange(
        api="anthropic.messages",
        method="POST",
        path="/v1/messages",
        headers={"content-type": "application/json"},
        body={"system": [{"type": "text", "text": big}], "messages": []},
        segments=(Segment("system", "system[0].text", big), Segment("user", "m[0]", weird)),
        session="s-1",
        turn=0,
        side=False,
        status=200,
        reply_text="ok 😀",
    )
    h.append("model", ex.to_wire())
    h.append("stderr", {"text": weird, "generation": 0})
    h.append("verdict", {"step": 0, "what": "timeout", "after": 30.0})
    h.append(
        "process",
        {"what": "exit", "pid": 4242, "argv": ["agent"], "returncode": -9, "generation": 0},
    )
    return h


def header(**kw: Any) -> Header:
    base: dict[str, Any] = {
        "target": ["agent", "--acp", "ünïcode"],
        "seed": 12345,
        "settings": {"max_steps": 20, "ratio": 0.5, "names": ["a", "b"]},
        "kind": "finding",
        "meta": {"note": "from a test"},
    }
    base.update(kw)
    return Header(**base)


def small_cassette(tmp_path: Path) -> bytes:
    h = History()
    h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 1, "method": "x"}})
    h.append("stderr", {"text": "boom", "generation": 0})
    path = write_cassette(
        tmp_path / "small.cassette",
        header(),
        h,
        {"vcr": b"\x00\xff" * 4},
        header_updates={"initialize": {"protocolVersion": 1}},
    )
    return path.read_bytes()


def raw_cassette(objects: list[Any], *, trailer: bool = True) -> bytes:
    """Hand-build a cassette from wire objects, with a valid checksum unless told not to."""
    body = b"".join(msgpack.packb(o, use_bin_type=True) for o in objects)
    if not trailer:
        return body
    return body + b"\xc4\x20" + hashlib.sha256(body).digest()


def wire_header(**kw: Any) -> dict[str, Any]:
    w = Header(target=["agent"]).to_wire()
    w.update(kw)
    return w


def ev(seq: int, data: Any, kind: str = "stderr") -> dict[str, Any]:
    return {"seq": seq, "t": 0.0, "kind": kind, "data": data}


def footer(count: int, **kw: Any) -> dict[str, Any]:
    f: dict[str, Any] = {"end": True, "count": count, "header_updates": {}, "attachments": {}}
    f.update(kw)
    return f


def read_error(path: Path, **kw: Any) -> CassetteError:
    with pytest.raises(CassetteError) as info:
        read_cassette(path, **kw)
    err = info.value
    assert "\n" not in str(err) and "\r" not in str(err)
    assert str(err).startswith(f"{path}: ")
    return err


def reason_of(tmp_path: Path, data: bytes, name: str = "c.cassette", **kw: Any) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return read_error(p, **kw).reason


# -- round trips ---------------------------------------------------------------------------


def test_round_trip_every_event_kind(tmp_path: Path) -> None:
    hist = full_history()
    vcr = bytes(range(256)) * 4096
    path = tmp_path / "run.cassette"
    with CassetteWriter(path, header()) as w:
        hist.sink = None
        for e in hist:
            w.write(e)
        w.update_header(initialize={"protocolVersion": 1, "agentCapabilities": {}})
        w.update_header(meta={"findings": [{"oracle": "leak", "step": 3}]})
        w.attach("vcr", vcr)
        w.attach("empty", b"")

    got = read_cassette(path)
    expected = Cassette(
        header=header(
            initialize={"protocolVersion": 1, "agentCapabilities": {}},
            meta={"findings": [{"oracle": "leak", "step": 3}]},
        ),
        events=hist.events,
        attachments={"vcr": vcr, "empty": b""},
    )
    assert got == expected
    assert got.history().events == hist.events
    assert got.history().model_exchanges()[0][1].segments[0].text.startswith("x" * 1000)
    assert list(iter_events(path)) == hist.events


def test_lone_surrogates_round_trip(tmp_path: Path) -> None:
    # json.loads('"\\ud800"') yields a lone surrogate; an agent may send one.
    h = History()
    h.append("acp", {"dir": "recv", "msg": {"text": "a\ud800b\udfff"}})
    path = write_cassette(tmp_path / "s.cassette", header(), h)
    assert read_cassette(path).events == h.events


def test_streaming_reader_gives_initial_and_final_header(tmp_path: Path) -> None:
    h = full_history()
    path = write_cassette(
        tmp_path / "r.cassette",
        header(),
        h,
        {"vcr": b"v"},
        header_updates={"kind": "run", "initialize": {"v": 2}},
    )
    with open_cassette(path) as r:
        assert r.header == header()
        with pytest.raises(ValueError, match="after iterating"):
            _ = r.final_header
        assert list(r) == h.events
        assert r.final_header == header(kind="run", initialize={"v": 2})
        assert r.attachments == {"vcr": b"v"}
        with pytest.raises(ValueError, match="only once"):
            iter(r)


def test_history_sink_streams_into_writer(tmp_path: Path) -> None:
    path = tmp_path / "sink.cassette"
    w = CassetteWriter(path, header())
    h = History(sink=w.write)
    h.append("step", {"index": 0, "name": "a", "args": {}})
    h.append("step", {"index": 1, "name": "b", "args": {}})
    assert w.count == 2
    w.close()
    assert read_cassette(path).events == h.events


def test_history_clips_what_a_cassette_could_not_hold(tmp_path: Path) -> None:
    # A hostile agent's message nested 500 levels deep is recorded clipped, so that the
    # finding's cassette can still be written and read back equal to the live history.
    deep: Any = "bottom"
    for _ in range(500):
        deep = [deep]
    h = History()
    shallow = {"dir": "recv", "msg": {"params": {"t": [[["fine"]]]}}}
    kept = h.append("acp", shallow)
    clipped = h.append("acp", {"dir": "recv", "msg": {"params": {"t": deep}}})
    assert kept.data == shallow
    node, depth = clipped.data, 1
    while isinstance(node, dict | list):
        node = node["msg"] if "msg" in node else node["params"] if "params" in node else \
            node["t"] if "t" in node else node[0]
        depth += 1
    assert node == CLIPPED and depth == MAX_DATA_DEPTH + 1
    path = tmp_path / "deep.cassette"
    w = CassetteWriter(path, header())
    for ev in h.events:
        w.write(ev)
    w.close()
    assert read_cassette(path).events == h.events


def test_header_wire_starts_with_magic_and_format() -> None:
    packed = msgpack.packb(Header(target=[]).to_wire(), use_bin_type=True)
    assert packed[0] == 0x8A
    assert packed[1:].startswith(b"\xa5magic\xb1acp-fuzz-cassette\xa6format\x01")
    assert acp_fuzz.__version__ == Header(target=[]).acp_fuzz_version


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=64)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5)
    ),
    max_leaves=30,
)
event_bodies = st.lists(
    st.tuples(
        st.sampled_from(["acp", "model", "process", "stderr", "step", "verdict"]),
        # Keys no kind's data types ("x-" + ...): those fields' types are checked (cassette.py).
        st.dictionaries(st.text(max_size=8).map("x-".__add__), json_values, max_size=4),
    ),
    max_size=8,
)


@HYP
@given(
    bodies=event_bodies,
    attachments=st.dictionaries(
        st.text(min_size=1, max_size=8), st.binary(max_size=300), max_size=3
    ),
    meta=st.dictionaries(st.text(max_size=8).map("x-".__add__), json_values, max_size=3),
    seed=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_round_trip_property(
    tmp_path: Path,
    bodies: list[tuple[str, dict[str, Any]]],
    attachments: dict[str, bytes],
    meta: dict[str, Any],
    seed: int | None,
) -> None:
    events = [Event(seq=i, t=i / 3, kind=k, data=d) for i, (k, d) in enumerate(bodies)]
    path = write_cassette(
        tmp_path / "p.cassette",
        header(seed=seed),
        events,
        attachments,
        header_updates={"meta": meta},
    )
    assert read_cassette(path) == Cassette(header(seed=seed, meta=meta), events, attachments)


# -- atomic writing ------------------------------------------------------------------------


def partials(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.partial-*"))


def test_file_appears_only_on_close(tmp_path: Path) -> None:
    path = tmp_path / "a.cassette"
    hist = full_history()
    w = CassetteWriter(path, header())
    for e in hist:
        w.write(e)
    assert not path.exists()
    assert partials(tmp_path) == [w.temp_path]
    assert w.temp_path.name.startswith(".a.cassette.partial-")
    assert w.close() == path
    assert w.close() == path  # idempotent
    assert partials(tmp_path) == []
    assert read_cassette(path).events == hist.events
    with pytest.raises(ValueError, match="already closed"):
        w.write(Event(seq=8, t=0.0, kind="step", data={}))


def test_crash_mid_write_leaves_no_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.cassette"
    w = CassetteWriter(path, header())
    w.write(Event(seq=0, t=0.0, kind="step", data={"index": 0}))
    w._file.flush()  # what a killed process would leave on disk
    assert not path.exists()
    # The leftover partial file reads as truncated, never as a cassette.
    err = read_error(w.temp_path)
    assert err.reason == "truncated: no footer after 1 events"
    w.abort()


def test_abort_removes_temp_and_keeps_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "keep.cassette"
    path.write_bytes(b"previous content")
    w = CassetteWriter(path, header())
    w.write(Event(seq=0, t=0.0, kind="step", data={}))
    w.abort()
    w.abort()  # idempotent
    assert partials(tmp_path) == []
    assert path.read_bytes() == b"previous content"
    with pytest.raises(ValueError, match="aborted"):
        w.close()


def test_close_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "r.cassette"
    path.write_bytes(b"old")
    write_cassette(path, header(), [])
    assert read_cassette(path).events == []


def test_exit_by_exception_aborts(tmp_path: Path) -> None:
    path = tmp_path / "e.cassette"
    with pytest.raises(RuntimeError), CassetteWriter(path, header()) as w:
        w.write(Event(seq=0, t=0.0, kind="step", data={}))
        raise RuntimeError("internal error")
    assert not path.exists()
    assert partials(tmp_path) == []


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_exit_by_interrupt_keeps_what_was_recorded(
    tmp_path: Path, interrupt: type[BaseException]
) -> None:
    path = tmp_path / "k.cassette"
    with pytest.raises(interrupt), CassetteWriter(path, header()) as w:
        w.write(Event(seq=0, t=0.0, kind="step", data={"index": 0}))
        raise interrupt()
    assert [e.seq for e in read_cassette(path).events] == [0]


def test_dropped_writer_cleans_up(tmp_path: Path) -> None:
    w = CassetteWriter(tmp_path / "d.cassette", header())
    assert partials(tmp_path)
    with pytest.warns(ResourceWarning, match="neither closed nor aborted"):
        del w
        gc.collect()
    assert partials(tmp_path) == []


def test_failed_write_cassette_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f.cassette"
    bad = [Event(seq=0, t=0.0, kind="step", data={}), Event(seq=5, t=0.0, kind="step", data={})]
    with pytest.raises(ValueError, match="seq 5, expected 1"):
        write_cassette(path, header(), bad)
    assert not path.exists()
    assert partials(tmp_path) == []


@pytest.mark.parametrize(
    ("event", "match"),
    [
        (Event(seq=0, t=0.0, kind="bogus", data={}), "unknown kind"),
        (Event(seq=0, t=0.0, kind="acp", data={"msg": {1: "int key"}}), "map key of type int"),
        (Event(seq=0, t=0.0, kind="acp", data={"x": object()}), "unsupported type object"),
        (Event(seq=0, t=0.0, kind="acp", data={"x": 2**64}), "cannot be stored"),
        (Event(seq=0, t="0", kind="acp", data={}), "not a number"),  # type: ignore[arg-type]
    ],
)
def test_writer_refuses_what_would_not_read_back(tmp_path: Path, event: Event, match: str) -> None:
    path = tmp_path / "w.cassette"
    with CassetteWriter(path, header()) as w:
        with pytest.raises((ValueError, TypeError, OverflowError), match=match):
            w.write(event)
        # Nothing was written: the same seq is still free.
        w.write(Event(seq=0, t=0.0, kind="step", data={}))
    assert len(read_cassette(path).events) == 1


def test_writer_refuses_too_deep_data(tmp_path: Path) -> None:
    deep: Any = "leaf"
    for _ in range(70):
        deep = [deep]
    with CassetteWriter(tmp_path / "d.cassette", header()) as w:
        with pytest.raises(ValueError, match="too deeply nested"):
            w.write(Event(seq=0, t=0.0, kind="acp", data={"msg": deep}))
        with pytest.raises(ValueError, match="too deeply nested"):
            w.update_header(meta={"x": deep})


def test_update_header_validates(tmp_path: Path) -> None:
    with CassetteWriter(tmp_path / "u.cassette", header()) as w:
        with pytest.raises(TypeError, match="cannot set \\['format', 'nope'\\]"):
            w.update_header(format=2, nope=1)
        with pytest.raises(ValueError, match="seed"):
            w.update_header(seed="not an int")
        with pytest.raises(ValueError, match="non-empty str"):
            w.attach("", b"x")
    assert read_cassette(tmp_path / "u.cassette").header == header()


# -- damaged and hostile input -------------------------------------------------------------


def test_truncated_at_every_byte(tmp_path: Path) -> None:
    data = small_cassette(tmp_path)
    p = tmp_path / "cut.cassette"
    for cut in range(len(data)):
        p.write_bytes(data[:cut])
        reason = read_error(p).reason
        assert reason.startswith(("truncated", "corrupt")), (cut, reason)
    # The messages name what is missing.
    p.write_bytes(data[:0])
    assert read_error(p).reason == "truncated: empty file"
    p.write_bytes(data[:-34])
    assert read_error(p).reason == "truncated: no checksum after footer"


def test_truncated_streaming_never_finishes_cleanly(tmp_path: Path) -> None:
    data = small_cassette(tmp_path)
    p = tmp_path / "cut.cassette"
    for cut in range(len(data)):
        p.write_bytes(data[:cut])
        with pytest.raises(CassetteError):
            list(iter_events(p))


@HYP
@given(data=st.binary(max_size=2000))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    reason_of(tmp_path, data)


@HYP
@given(
    junk=st.binary(max_size=200),
    objects=st.lists(json_values, max_size=4),
)
def test_random_msgpack_after_valid_header(tmp_path: Path, junk: bytes, objects: list[Any]) -> None:
    body = raw_cassette([wire_header(), *objects], trailer=False) + junk
    reason_of(tmp_path, body)
    # The same with a correct checksum: the structure checks must catch it.
    reason_of(tmp_path, body + b"\xc4\x20" + hashlib.sha256(body).digest())


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete"]),
        st.integers(min_value=0),
        st.integers(min_value=1, max_value=255),
    ),
    min_size=1,
    max_size=4,
)


@HYP
@given(edits=mutations)
def test_any_mutation_is_detected(tmp_path: Path, edits: list[tuple[str, int, int]]) -> None:
    original = small_cassette(tmp_path)
    data = bytearray(original)
    for op, pos, val in edits:
        i = pos % (len(data) + 1)
        if op == "insert":
            data.insert(i, val)
        elif data and i < len(data):
            if op == "flip":
                data[i] ^= val
            else:
                del data[i]
    if bytes(data) == original:
        return
    reason = reason_of(tmp_path, bytes(data), "m.cassette")
    p = tmp_path / "m.cassette"
    with pytest.raises(CassetteError):
        list(iter_events(p))
    assert reason.split(":")[0] in {
        "truncated",
        "corrupt",
        "not an acp-fuzz cassette (bad magic)",
        "too large",
        "too deeply nested",
    } or reason.startswith("unsupported format version")


def test_mutation_in_a_string_is_a_checksum_mismatch(tmp_path: Path) -> None:
    data = bytearray(small_cassette(tmp_path))
    i = data.index(b"boom")
    data[i] = ord("z")
    assert reason_of(tmp_path, bytes(data)) == "corrupt: checksum mismatch"


def test_mutation_in_an_attachment_is_detected(tmp_path: Path) -> None:
    data = bytearray(small_cassette(tmp_path))
    i = data.index(b"\x00\xff\x00\xff")
    data[i] = 1
    assert reason_of(tmp_path, bytes(data)) == "corrupt: checksum mismatch"


def test_no_event_of_a_damaged_file_is_yielded(tmp_path: Path) -> None:
    data = bytearray(small_cassette(tmp_path))
    data[data.index(b"boom")] = ord("z")
    p = tmp_path / "d.cassette"
    p.write_bytes(bytes(data))
    seen: list[Event] = []
    with pytest.raises(CassetteError, match="checksum mismatch"):
        seen.extend(iter_events(p))
    assert seen == []


@pytest.mark.parametrize(
    "prefix",
    [
        b"\xdb\xff\xff\xff\xff",  # str 32 of 4 GiB
        b"\xc6\xff\xff\xff\xff",  # bin 32 of 4 GiB
        b"\xdd\xff\xff\xff\xff",  # array 32 of 4 Gi elements
        b"\xdf\xff\xff\xff\xff",  # map 32 of 4 Gi pairs
        b"\xdd\x00\xff\xff\xff",  # array of 16 Mi elements, under the byte limits
    ],
)
@pytest.mark.parametrize("where", ["first", "event", "inside-event"])
def test_hostile_length_prefix_allocates_nothing(tmp_path: Path, prefix: bytes, where: str) -> None:
    head = msgpack.packb(wire_header(), use_bin_type=True)
    if where == "first":
        data = prefix + b"\x00" * 64
    elif where == "event":
        data = head + prefix + b"\x00" * 64
    else:  # {"seq": 0, "t": 0.0, "kind": "acp", "data": <prefix...>
        data = head + msgpack.packb(ev(0, {}, "acp"))[:-1] + prefix + b"\x00" * 64
    p = tmp_path / "h.cassette"
    p.write_bytes(data)
    tracemalloc.start()
    try:
        err = read_error(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, (peak, err)
    assert err.reason.startswith(("truncated", "too large", "not an acp-fuzz")), err


def test_value_count_limit_stops_tiny_value_bombs(tmp_path: Path) -> None:
    # 40 x 5000 empty lists: 200 KB on disk, ~12 MB in memory. Each list is under the
    # per-container length limit; the value count stops the decoder long before the end.
    inner = b"\xdc" + struct.pack(">H", 5000) + b"\x90" * 5000
    bomb = b"\xdc" + struct.pack(">H", 40) + inner * 40
    head = msgpack.packb(wire_header(), use_bin_type=True)
    body = head + msgpack.packb(ev(0, {}, "acp"))[:-1] + bomb
    p = tmp_path / "bomb.cassette"
    p.write_bytes(body + b"\xc4\x20" + hashlib.sha256(body).digest())
    tracemalloc.start()
    try:
        err = read_error(p, limits=Limits(max_values=10_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.reason == "too large: more than 10000 values in one object"
    assert peak < 4 * 1024 * 1024


@pytest.mark.parametrize("depth", [65, 200, 10_000])
def test_deep_nesting(tmp_path: Path, depth: int) -> None:
    head = msgpack.packb(wire_header(), use_bin_type=True)
    # {"seq":0,...,"data": {"x": [[[...]]]}}: the event is level 1, data level 2.
    nested = b"\x91" * depth + b"\xc0"
    body = head + msgpack.packb(ev(0, {}, "acp"))[:-1] + b"\x81\xa1x" + nested
    body += msgpack.packb(footer(1))
    reason = reason_of(tmp_path, body + b"\xc4\x20" + hashlib.sha256(body).digest())
    assert reason.startswith("too deeply nested"), reason


def test_nesting_at_the_limit_is_fine(tmp_path: Path) -> None:
    deep: Any = None
    for _ in range(62):  # event map + data map + 62 lists = 64 levels
        deep = [deep]
    path = write_cassette(
        tmp_path / "ok.cassette", header(), [Event(seq=0, t=0.0, kind="acp", data={"x": deep})]
    )
    assert read_cassette(path).events[0].data["x"] == deep


def test_unsupported_version(tmp_path: Path) -> None:
    # Whatever follows a newer header is not even looked at.
    data = raw_cassette([wire_header(format=7), "new stuff"], trailer=False)
    assert reason_of(tmp_path, data) == "unsupported format version 7 (this acp-fuzz reads 1)"
    assert FORMAT_VERSION == 1


@pytest.mark.parametrize(
    "data",
    [
        b'{"magic": "acp-fuzz-cassette"}',
        msgpack.packb({"format": 1}),
        msgpack.packb({"magic": "something-else", "format": 1}),
        msgpack.packb([MAGIC, 1]),
        b"\x00" * 100,
    ],
)
def test_not_a_cassette(tmp_path: Path, data: bytes) -> None:
    assert reason_of(tmp_path, data) == "not an acp-fuzz cassette (bad magic)"


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        ([wire_header(seed="x"), footer(0)], "corrupt: header field 'seed' is 'x', not int or nil"),
        ([wire_header(format="1"), footer(0)], "corrupt: header format is '1', not an integer"),
        ([wire_header(), ev(1, {}), footer(1)], "corrupt: event 0 has seq 1 (expected 0)"),
        ([wire_header(), ev(0, {}, "nope"), footer(1)], "corrupt: event 0 has unknown kind 'nope'"),
        ([wire_header(), ev(0, []), footer(1)], "corrupt: event 0 data is list, not a map"),
        ([wire_header(), ev(0, {}), footer(2)], "corrupt: footer says 2 events, file has 1"),
        (
            [wire_header(), footer(0, header_updates={"format": 2})],
            "corrupt: footer updates header fields that can't be updated: ['format']",
        ),
        (
            [wire_header(), footer(0, attachments={"vcr": "text"})],
            "corrupt: attachment 'vcr' is str, not bin",
        ),
        (
            [wire_header(), ev(0, {"t": msgpack.ExtType(5, b"x")}), footer(1)],
            "corrupt: msgpack extension type (a cassette holds plain data only)",
        ),
        (
            [wire_header(), ev(0, {b"bytes key": 1}), footer(1)],
            "corrupt: a map key is bytes, not str",
        ),
        (
            [wire_header(), ev(0, {"x": {1: 1}}), footer(1)],
            "corrupt: int is not allowed for map key when strict_map_key=True",
        ),
        (
            [wire_header(), footer(0), "extra"],
            "corrupt: expected a 32-byte sha256 checksum after the footer",
        ),
    ],
)
def test_structural_errors(tmp_path: Path, objects: list[Any], expected: str) -> None:
    assert reason_of(tmp_path, raw_cassette(objects)) == expected


def test_no_footer(tmp_path: Path) -> None:
    data = raw_cassette([wire_header(), ev(0, {}), ev(1, {})], trailer=False)
    assert reason_of(tmp_path, data) == "truncated: no footer after 2 events"
    # With a checksum but no footer, the checksum is where the footer should be.
    data = raw_cassette([wire_header(), ev(0, {}), ev(1, {})])
    assert reason_of(tmp_path, data) == "corrupt: event 2 is bytes, not a map"


def test_extension_types_are_refused(tmp_path: Path) -> None:
    # msgpack decodes ext type -1 as a Timestamp even with an ext_hook; both must fail.
    for ext in (b"\xd6\xff\x00\x00\x00\x01", b"\xd4\x05\x00"):
        head = msgpack.packb(wire_header(), use_bin_type=True)
        body = head + msgpack.packb(ev(0, {}))[:-1] + b"\x81\xa1x" + ext
        body += msgpack.packb(footer(1))
        reason = reason_of(tmp_path, body + b"\xc4\x20" + hashlib.sha256(body).digest())
        assert reason.startswith(("corrupt", "too large")), reason
        assert "ext" in reason


def test_data_after_checksum(tmp_path: Path) -> None:
    data = small_cassette(tmp_path) + b"\x00"
    assert reason_of(tmp_path, data) in {
        "corrupt: data after the checksum",
        "corrupt: checksum mismatch",
    }


def test_limits(tmp_path: Path) -> None:
    h = History()
    for i in range(5):
        h.append("stderr", {"text": "y" * (1000 * i), "generation": 0})
    path = write_cassette(tmp_path / "l.cassette", header(), h, {"vcr": b"v" * 5000})
    size = path.stat().st_size
    assert read_error(path, limits=Limits(max_events=4)).reason == ("too large: more than 4 events")
    assert read_error(path, limits=Limits(max_event_bytes=3000)).reason.startswith(
        "too large: event 3 is 3.0 KiB > limit 2.9 KiB"
    )
    assert read_error(path, limits=Limits(max_file_bytes=size - 1)).reason.startswith(
        "too large: file is"
    )
    assert read_error(path, limits=Limits(max_attachment_bytes=4999)).reason.startswith("too large")
    assert read_error(path, limits=Limits(max_depth=2)).reason.startswith("too deeply nested")
    assert len(read_cassette(path, limits=Limits(max_events=5, max_file_bytes=size)).events) == 5


def test_unreadable_paths(tmp_path: Path) -> None:
    assert read_error(tmp_path / "missing").reason.startswith("cannot read")
    assert read_error(tmp_path).reason.startswith("cannot read")


def test_error_message_is_one_line_even_for_odd_paths(tmp_path: Path) -> None:
    p = tmp_path / "evil\nname.cassette"
    p.write_bytes(b"")
    with pytest.raises(CassetteError) as info:
        read_cassette(p)
    assert "\n" not in str(info.value)
    assert str(info.value).endswith(": truncated: empty file")


# -- the documented format -----------------------------------------------------------------


def test_docs_reader_snippet_reads_a_real_cassette(tmp_path: Path) -> None:
    """The stand-alone reader in docs/cassette-format.md must keep working."""
    text = DOC.read_text()
    match = re.search(r"```python\n(# standalone reader.*?)```", text, re.S)
    assert match, "docs/cassette-format.md lost its reader snippet"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    hist = full_history()
    path = write_cassette(
        tmp_path / "doc.cassette",
        header(),
        hist,
        {"vcr": b"v"},
        header_updates={"initialize": {"x": 1}},
    )
    hdr, events, attachments = namespace["read"](str(path))
    assert hdr["initialize"] == {"x": 1}
    assert hdr["target"] == header().target
    assert events == [e.to_wire() for e in hist.events]
    assert attachments == {"vcr": b"v"}
    bad = bytearray(path.read_bytes())
    bad[bad.index(b"NUL")] = ord("n")
    (tmp_path / "bad.cassette").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="checksum"):
        namespace["read"](str(tmp_path / "bad.cassette"))


def test_writer_and_reader_agree_on_depth_of_header_updates(tmp_path: Path) -> None:
    def nested(k: int) -> Any:
        v: Any = None
        for _ in range(k):
            v = [v]
        return v

    # footer 1, header_updates 2, meta 3, then the lists: 61 of them reach level 64.
    path = tmp_path / "d.cassette"
    with CassetteWriter(path, header()) as w:
        with pytest.raises(ValueError, match="too deeply nested"):
            w.update_header(meta={"x": nested(62)})
        w.update_header(meta={"x": nested(61)})
    assert read_cassette(path).header.meta == {"x": nested(61)}


def test_a_set_mode_step_is_checked_and_described() -> None:
    from acp_fuzz.core.steps import describe, validate_step

    step = validate_step({"op": "set_mode", "session": "A", "pick": 2})
    assert describe(step) == "session/set_mode A (another of its modes, choice 2)"
    step = validate_step({"op": "set_config_option", "session": "B", "option": 1, "pick": 0})
    assert describe(step) == \
        "session/set_config_option B (option 1, another of its values, choice 0)"
    for bad in ({"op": "set_mode"}, {"op": "set_mode", "session": "A", "pick": "x"},
                {"op": "set_mode", "session": "A", "pick": True},
                {"op": "set_config_option", "session": "A", "option": 1.5}):
        with pytest.raises(ValueError):
            validate_step(bad)


def test_title_and_directory_steps_are_checked_and_described() -> None:
    from acp_fuzz.core.steps import describe, validate_step

    step = validate_step({"op": "set_title", "session": "A", "title": "Überprüfung"})
    assert describe(step) == "session/set_title A (11 chars)"
    step = validate_step({"op": "load", "session": "A", "cwd": "moved", "roots": 2})
    assert describe(step) == ("session/load A (systemPrompt omitted) in a new directory "
                              "with 2 additional root(s)")
    assert describe(validate_step({"op": "fork", "session": "A", "new": "B", "roots": 1})) \
        == "session/fork A -> B (systemPrompt omitted) with 1 additional root(s)"
    for bad in ({"op": "set_title", "session": "A", "title": 3},
                {"op": "load", "session": "A", "cwd": "/etc"},
                {"op": "resume", "session": "A", "roots": 99},
                {"op": "fork", "session": "A", "new": "B", "roots": True}):
        with pytest.raises(ValueError):
            validate_step(bad)


def test_select_options_are_read_from_config_options() -> None:
    from acp_fuzz.engine.campaign.runner import select_options

    config = [
        {"id": "model", "type": "select", "currentValue": "b",
         "options": [{"value": "a"}, {"group": "g", "options": [{"value": "b"}, {"value": "c"}]}]},
        {"id": "effort", "type": "select", "currentValue": "x", "options": [{"value": "x"}]},
        {"id": "fast", "type": "boolean", "currentValue": True},
        {"id": 3, "type": "select", "options": [{"value": "p"}, {"value": "q"}]},
        "junk",
    ]
    # Only a select with two values or more is something to switch to.
    assert select_options(config) == {"model": (("a", "b", "c"), "b")}
    # v2 names the option's id configId; the v1 name is not read there, nor v2's in v1.
    v2 = [{"configId": "model", "type": "select", "currentValue": "a",
           "options": [{"value": "a"}, {"value": "b"}]}]
    assert select_options(v2, 2) == {"model": (("a", "b"), "a")}
    assert select_options(v2) == {} and select_options(config, 2) == {}


def test_run_settings_read_the_header_with_types_and_a_wrong_type_reads_as_absent(
        tmp_path: Path) -> None:
    settings = {"profile": "codex-acp", "dialect": "claude-meta", "strict": True,
                "baseline": {"texts": ["x"]}, "seed": 3}
    path = tmp_path / "s.cassette"
    write_cassette(path, Header(target=["a"], settings=settings), [])
    assert read_cassette(path).header.run_settings == RunSettings(
        profile="codex-acp", dialect="claude-meta", strict=True, baseline={"texts": ["x"]})
    assert Header(target=["a"]).run_settings == RunSettings()
    crafted = {"profile": ["x"], "dialect": 1, "strict": "yes", "baseline": 5}
    assert RunSettings.from_wire(crafted) == RunSettings(baseline=5)
    assert RunSettings.from_wire(None) == RunSettings()
