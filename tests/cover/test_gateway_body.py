"""The gateway's body reader and JSON value count, on in-memory streams with small limits."""

from __future__ import annotations

import io
import json
import zlib
from email.message import Message
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_fuzz.engine.gateway import body as gbody
from acp_fuzz.engine.gateway.body import BodyError, parse_body, read_body


def _headers(**fields: str) -> Message:
    msg = Message()
    for name, value in fields.items():
        msg[name.replace("_", "-")] = value
    return msg


def _chunked(wire: bytes) -> bytes:
    return read_body(io.BufferedReader(io.BytesIO(wire)), _headers(Transfer_Encoding="chunked"))


def test_chunk_framing_and_trailers_count_toward_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gbody, "MAX_BODY", 100)
    # 30 bytes of data in 180 bytes of one-byte chunks: only the data used to be counted.
    with pytest.raises(BodyError) as err:
        _chunked(b"1\r\nx\r\n" * 30 + b"0\r\n\r\n")
    assert err.value.status == 413
    with pytest.raises(BodyError) as err:
        _chunked(b"1\r\nx\r\n0\r\nx-t: " + b"v" * 100 + b"\r\n\r\n")
    assert err.value.status == 413
    assert _chunked(b"3;a=b\r\nabc\n2 \r\nde\r\n0\r\nx-t: v\r\n\r\n") == b"abcde"


def test_a_short_body_is_refused() -> None:
    reader = io.BufferedReader(io.BytesIO(b"abc"))
    with pytest.raises(BodyError) as err:
        read_body(reader, _headers(Content_Length="10"))
    assert err.value.status == 400
    with pytest.raises(BodyError):
        _chunked(b"5\r\nab")  # cut short inside a chunk
    with pytest.raises(BodyError):
        read_body(io.BufferedReader(io.BytesIO(b"x")), _headers(Transfer_Encoding="gzip"))


def test_two_different_content_lengths_are_refused() -> None:
    headers = _headers(Content_Length="1")
    headers["Content-Length"] = "2"
    with pytest.raises(BodyError) as err:
        read_body(io.BufferedReader(io.BytesIO(b"ab")), headers)
    assert err.value.status == 400


def test_a_truncated_or_trailing_compressed_stream_is_refused() -> None:
    packed = zlib.compress(b"{}")
    for wire, encoding in ((packed[:-3], "deflate"), (packed + b"x", "deflate"),
                           (b"not gzip", "gzip")):
        with pytest.raises(BodyError) as err:
            read_body(io.BufferedReader(io.BytesIO(wire)),
                      _headers(Content_Length=str(len(wire)), Content_Encoding=encoding))
        assert err.value.status == 400


def test_values_are_counted_in_utf16_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gbody, "MAX_JSON_VALUES", 10)
    text = "[" + "{}," * 10 + "{}]"
    for encoding in ("utf-8", "utf-16", "utf-32-le"):
        with pytest.raises(BodyError) as err:
            parse_body(text.encode(encoding))
        assert err.value.status == 413
    assert parse_body('["{}{}{},,,,,,,,,,,\\"[[[["]'.encode("utf-16")) == \
        ["{}{}{},,,,,,,,,,,\"[[[["]


def test_too_deep_is_kept_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gbody, "MAX_JSON_DEPTH", 3)
    assert parse_body(b"[[[]]]") == [[[]]]
    assert parse_body(b"[[[[]]]]") == "[[[[]]]]"
    assert parse_body(b'["[[[[", {"a": ["]]]]"]}]') == ["[[[[", {"a": ["]]]]"]}]
    assert parse_body(b"") is None and parse_body(b"\xff\xfe\xfd") == "\ufffd" * 3


def _values(value: Any) -> int:
    """What the scan should count: each container, and each element after a first."""
    if isinstance(value, dict):
        return 1 + max(len(value) - 1, 0) + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(_values(v) for v in value)
    return 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='{}[],"\\ax\u00e9\U0001f600'),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(alphabet='{[,"\\k', max_size=3), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_JSON, st.booleans())
def test_the_scan_counts_exactly_the_values_outside_strings(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    count = _values(value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gbody, "MAX_JSON_VALUES", count)
        assert parse_body(text) == value
        if count:
            patch.setattr(gbody, "MAX_JSON_VALUES", count - 1)
            with pytest.raises(BodyError):
                parse_body(text)
