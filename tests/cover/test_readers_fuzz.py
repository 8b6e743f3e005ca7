"""The readers behind ``show``, ``report`` and ``replay --offline``, fuzzed with crafted cassettes.

A cassette comes from whoever attached it to a bug report, so its every value may have any
type. Each example starts from a real committed cassette, changes its header and event data
(a value replaced by another msgpack type, a key dropped, a key added), writes the result as
a valid cassette (straight with msgpack: acp-fuzz's own writer would refuse most of these) and
runs the pure readers on it. Each must either refuse the file with a one-line
:class:`CassetteError` or work: a ``ValueError`` with a one-line message is the one other
outcome allowed (replay's "this step is not one acp-fuzz sends"); a ``TypeError``, a
``KeyError`` or an ``OverflowError`` is a traceback a user would see.
"""

from __future__ import annotations

import copy
import hashlib
import io
import math
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from acp_fuzz.core.cassette import Cassette, CassetteError, read_cassette
from acp_fuzz.core.oracles import evaluate
from acp_fuzz.engine.campaign import replay
from acp_fuzz.reporting import render_markdown
from acp_fuzz.timeline import render_timeline

ROOT = Path(__file__).resolve().parents[2]
# A small reference finding (every event kind) and a real agent's (verdict errors, timeouts,
# many notifications and model requests).
SOURCES = [ROOT / "cassettes" / "reference" / "leak.cassette",
           ROOT / "cassettes" / "real" / "codex-acp" / "agent.hang.cassette"]


def _wire(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A cassette's header, events and footer as msgpack wire maps."""
    objects = list(msgpack.Unpacker(_body(path.read_bytes()), raw=False,
                                    unicode_errors="surrogatepass"))
    return objects[0], objects[1:-1], objects[-1]


def _body(data: bytes) -> io.BytesIO:
    return io.BytesIO(data[:-34])  # without the checksum trailer


WIRES = {p.name: _wire(p) for p in SOURCES}

# Every msgpack type, and the values that broke readers before: a str where an int goes
# (and the other way round), inf and nan, bytes where text goes, handles that look like paths.
_SCALARS = (st.sampled_from(["x", "..", "../..", "", "A", "\x1b[2J", "a\nb", "ok", "error",
                             "send", "recv", "system", "user", "new", "prompt", "load"])
            | st.text(max_size=8) | st.binary(max_size=8)
            | st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.sampled_from([0, 1, -1, 2, 200, 401])
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from([math.inf, -math.inf, math.nan])
            | st.booleans() | st.none())
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["text", "slot", "path", "op", "session", "id", "method",
                                       "index", "args", "x"]) | st.text(max_size=4),
                      inner, max_size=3),
    max_leaves=6)


def _mutate(data: st.DataObject, root: Any) -> None:
    """Change one place inside ``root`` (a map): replace a value, drop a key or add one."""
    node = root
    while True:
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            key = data.draw(st.integers(0, len(node) - 1))
        else:
            return
        child = node[key]
        if isinstance(child, dict | list) and child and data.draw(st.booleans()):
            node = child  # go deeper
            continue
        op = data.draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if op == "drop" and isinstance(node, dict):
            del node[key]
        elif op == "add" and isinstance(node, dict):
            node[data.draw(st.text(max_size=6))] = data.draw(VALUES)
        else:
            node[key] = data.draw(VALUES)
        return


def _write(path: Path, header: dict[str, Any], events: list[dict[str, Any]],
           footer: dict[str, Any]) -> None:
    """A structurally valid cassette (header, dense events, footer, checksum) holding
    whatever values the maps hold."""
    pack = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass")
    body = b"".join(pack.pack(o) for o in (header, *events, footer))
    path.write_bytes(body + b"\xc4\x20" + hashlib.sha256(body).digest())


def _one_line(text: str) -> None:
    assert text and "\n" not in text and "\r" not in text, repr(text)


def _read(path: Path) -> Cassette | None:
    try:
        return read_cassette(path)
    except CassetteError as e:
        _one_line(str(e))
        return None


def _readers(cassette: Cassette, path: Path) -> None:
    """Every pure reader of show, show --full, report and replay --offline."""
    assert all("\n" not in line for line in render_timeline(cassette))
    list(render_timeline(cassette, full=True))
    assert render_markdown(cassette, path=str(path)).startswith("#")
    try:
        replay.recorded_failures(cassette)
    except ValueError as e:
        _one_line(str(e))
    baseline, strict = replay._settings(cassette)
    evaluate(cassette.events, baseline=baseline, strict=strict)
    replay.normalize_transcript(cassette.events)
    replay.recorded_agent(cassette)
    try:
        replay._valid_steps(cassette)
    except ValueError as e:
        _one_line(str(e))
    result = replay.offline_check(path)
    assert result.verdict in replay.VERDICTS
    if result.verdict == "ERROR":
        _one_line(result.error or "")
    _one_line(result.line())


# No shrinking: a failure is reported as drawn (shrinking a crash found in a stream of
# draws can take minutes, and the drawn example already names the field that broke).
FUZZ = settings(max_examples=200, derandomize=True, deadline=None, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(data=st.data())
def test_crafted_cassettes_never_crash_a_reader(tmp_path: Path, data: st.DataObject) -> None:
    header, events, footer = copy.deepcopy(WIRES[data.draw(st.sampled_from(sorted(WIRES)))])
    # The footer's updates merged into the header, so that a change to the header counts.
    header.update(footer["header_updates"])
    footer["header_updates"] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.sampled_from(["event", "event", "event", "header", "findings"]))
        if where == "header":
            _mutate(data, header)
        elif where == "findings" and isinstance(header.get("meta"), dict):
            _mutate(data, header["meta"])  # the recorded findings, status, runs...
        else:
            _mutate(data, events[data.draw(st.integers(0, len(events) - 1))]["data"])
    path = tmp_path / "crafted.cassette"
    _write(path, header, events, footer)
    cassette = _read(path)
    if cassette is not None:
        _readers(cassette, path)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_untouched_sources_read_and_render(tmp_path: Path, source: Path) -> None:
    # The fuzzed cassettes are written by _write: the sources, written by it unchanged, read
    # back equal to the originals (so what the fuzz changes is the only difference).
    path = tmp_path / source.name
    _write(path, *WIRES[source.name])
    cassette = read_cassette(path)
    assert cassette == read_cassette(source)
    _readers(cassette, path)
