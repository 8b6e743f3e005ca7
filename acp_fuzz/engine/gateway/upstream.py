"""``--model-upstream`` mode: forward model requests to a real endpoint, recorded by vcrpy.

The gateway normally answers every request itself. With an upstream URL it forwards the
request (body and headers, real keys included) to ``URL + path`` with :mod:`urllib.request`
and relays the reply. Only the path and query come from the agent (:func:`upstream_url`):
the scheme, host and port are always the configured URL's. With an
:class:`UpstreamRecorder` those upstream calls go through vcrpy, which records them in a
msgpack cassette (credentials redacted) and can later replay them with no network at all
(record mode ``"none"``).

Unlike ``vcr.use_cassette``, the recorder never patches :mod:`http.client` globally: vcrpy's
patch is process-wide, so it would also capture (or, when replaying, refuse) every other HTTP
call in the harness process, SDK clients included. Instead the recorder hands vcrpy's own
connection stub, bound to its cassette, to a private :mod:`urllib` opener. The recording is
the same as the one ``use_cassette`` makes.

Replies are buffered, not streamed: vcrpy reads an upstream body whole before it records it.

A recording read back from a cassette is untrusted data (cassettes come from strangers):
:meth:`UpstreamRecorder.from_bytes` checks it with :func:`check_recording` first, bounded by
:data:`RECORDING_LIMITS` and type-checked field by field, and refuses anything else with a
one-line :class:`RecordingError`, before vcrpy sees it.
"""

from __future__ import annotations

import os
import tempfile
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from http.client import HTTPResponse
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import msgpack

from acp_fuzz.core.errors import RecordingError, UpstreamError
from acp_fuzz.core.scrub import REDACTED, SECRET_HEADERS, is_secret_header, redact_url

if TYPE_CHECKING:
    import vcr

# vcrpy is imported where a recorder is built, not here: it costs about 0.15 s, and every
# process that starts a gateway (every acp-fuzz command, most of them never recording) would
# pay it.

__all__ = [
    "RECORDING_LIMITS",
    "MsgpackPersister",
    "MsgpackSerializer",
    "RecordingError",
    "RecordingLimits",
    "UpstreamError",
    "UpstreamRecorder",
    "UpstreamResponse",
    "check_recording",
    "forward",
    "upstream_url",
]

#: The header that carries the gateway's tie (session, turn, side) to the recorder. It is
#: stripped before the request leaves, and kept only in the recording, for matching.
TIE_HEADER = "x-acp-fuzz-tie"
#: How a replayed request finds its recorded twin. Bodies are not compared: agents put fresh
#: ids and timestamps in them. The tie keeps a side request (title, router) from taking the
#: reply of the turn request that raced it.
MATCH_ON = ("method", "path", "query", "acpfuzz_tie")
_HOP_BY_HOP = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive",
    "proxy-connection", "te", "trailer", "upgrade", "content-encoding", "accept-encoding",
})


@dataclass(frozen=True)
class RecordingLimits:
    """Bounds on a recording read back from a cassette.

    ``max_bytes``: the encoded recording; ``max_interactions``: recorded request/reply pairs;
    ``max_body_bytes``: one request or reply body; ``max_headers``: headers of one message;
    ``max_header_bytes``: one header name or value; ``max_uri_bytes``: one request URI;
    ``max_values``: the values (containers and what they hold) the recording decodes to,
    counted while it is decoded: 64 MiB of empty lists would otherwise take 4 GiB of memory
    before any other check runs."""

    max_bytes: int = 64 * 1024 * 1024
    max_interactions: int = 10_000
    max_body_bytes: int = 16 * 1024 * 1024
    max_headers: int = 200
    max_header_bytes: int = 64 * 1024
    max_uri_bytes: int = 16 * 1024
    max_values: int = 1_000_000


RECORDING_LIMITS = RecordingLimits()


def check_recording(data: bytes, limits: RecordingLimits = RECORDING_LIMITS) -> None:
    """Check that ``data`` is a recording :meth:`UpstreamRecorder.to_bytes` could have made:
    msgpack of ``{"version": 1, "interactions": [...], "metadata": {"upstream": URL}}``,
    each interaction a ``request`` (``method``, ``uri``, ``body``, ``headers``) and a
    ``response`` (``status`` ``{code, message}``, ``headers``, ``body`` ``{string}``), with
    headers mapping names to lists of strings, within ``limits``. Raises
    :class:`RecordingError` otherwise; never anything else."""
    if not isinstance(data, bytes | bytearray):
        raise RecordingError(f"the recording is {type(data).__name__}, not bytes")
    if len(data) > limits.max_bytes:
        raise RecordingError(f"the recording is {len(data)} bytes, over the limit of "
                             f"{limits.max_bytes}")
    values = 0

    def count(obj: Any) -> Any:  # each container as it is decoded: bounded memory
        nonlocal values
        values += 2 * len(obj) + 1 if isinstance(obj, dict) else len(obj) + 1
        if values > limits.max_values:
            raise RecordingError(f"the recording holds more than {limits.max_values} values")
        return obj

    try:
        # unpackb bounds every length by the size of ``data``, already capped above, and a
        # container's (allocated before it is filled) by the value limit.
        obj = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, ext_hook=_no_ext,
                              list_hook=count, object_hook=count,
                              max_array_len=limits.max_values, max_map_len=limits.max_values)
    except RecordingError:
        raise
    except ValueError as exc:
        if "exceeds max_" not in str(exc):  # a length over max_array_len or max_map_len
            raise RecordingError(f"the recording is not valid msgpack "
                                 f"({type(exc).__name__})") from None
        raise RecordingError(f"the recording holds more than {limits.max_values} values "
                             "in one container") from None
    except Exception as exc:  # msgpack raises many types for bad input; all mean the same
        raise RecordingError(f"the recording is not valid msgpack "
                             f"({type(exc).__name__})") from None
    _map(obj, "the recording", required={"interactions"},
         optional={"version", "metadata"})
    if "version" in obj and (type(obj["version"]) is not int or obj["version"] != 1):
        raise RecordingError("the recording's version is not 1")
    meta = obj.get("metadata")
    if meta is not None:
        _map(meta, "metadata", required=set(), optional={"upstream"})
        if "upstream" in meta:
            _url(meta["upstream"], "metadata.upstream", limits)
    interactions = obj["interactions"]
    if not isinstance(interactions, list):
        raise RecordingError("'interactions' is not a list")
    if len(interactions) > limits.max_interactions:
        raise RecordingError(f"{len(interactions)} interactions, over the limit of "
                             f"{limits.max_interactions}")
    for i, item in enumerate(interactions):
        where = f"interaction {i}"
        _map(item, where, required={"request", "response"})
        req, resp = item["request"], item["response"]
        _map(req, f"{where}.request", required={"method", "uri", "body", "headers"})
        method = req["method"]
        if not isinstance(method, str) or not 0 < len(method) <= 16 \
                or not method.isascii() or not method.isalpha():
            raise RecordingError(f"{where}.request.method is not an HTTP method")
        _url(req["uri"], f"{where}.request.uri", limits)
        _body(req["body"], f"{where}.request.body", limits, allow_none=True)
        _headers(req["headers"], f"{where}.request.headers", limits)
        _map(resp, f"{where}.response", required={"status", "headers", "body"})
        status = resp["status"]
        _map(status, f"{where}.response.status", required={"code", "message"})
        code = status["code"]
        if type(code) is not int or not 100 <= code <= 599:
            raise RecordingError(f"{where}.response.status.code is not an HTTP status")
        if not isinstance(status["message"], str) \
                or len(status["message"]) > limits.max_header_bytes:
            raise RecordingError(f"{where}.response.status.message is not a short string")
        _headers(resp["headers"], f"{where}.response.headers", limits)
        _map(resp["body"], f"{where}.response.body", required={"string"})
        _body(resp["body"]["string"], f"{where}.response.body.string", limits,
              allow_none=False)


def _no_ext(code: int, data: bytes) -> Any:
    raise RecordingError(f"the recording holds a msgpack extension type ({code})")


def _map(obj: Any, where: str, *, required: set[str], optional: frozenset[str] | set[str]
         = frozenset()) -> None:
    if not isinstance(obj, dict):
        raise RecordingError(f"{where} is {type(obj).__name__}, not a map")
    if not all(isinstance(k, str) for k in obj):
        raise RecordingError(f"{where} has a key that is not text")
    missing = sorted(required - obj.keys())
    if missing:
        raise RecordingError(f"{where} has no {missing[0]!r}")
    extra = sorted(obj.keys() - required - optional)
    if extra:
        raise RecordingError(f"{where} has an unexpected key {extra[0][:40]!r}")


def _url(value: Any, where: str, limits: RecordingLimits) -> None:
    if not isinstance(value, str) or len(value) > limits.max_uri_bytes \
            or not value.startswith(("http://", "https://")) or not value.isprintable():
        raise RecordingError(f"{where} is not an http(s) URL")


def _body(value: Any, where: str, limits: RecordingLimits, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, str | bytes):
        raise RecordingError(f"{where} is {type(value).__name__}, not text or bytes")
    # A str's UTF-8 size is at most 4 bytes a character; len() is the cheap bound first.
    size = len(value) if isinstance(value, bytes) else len(value.encode("utf-8", "replace"))
    if size > limits.max_body_bytes:
        raise RecordingError(f"{where} is {size} bytes, over the limit of "
                             f"{limits.max_body_bytes}")


def _headers(value: Any, where: str, limits: RecordingLimits) -> None:
    if not isinstance(value, dict):
        raise RecordingError(f"{where} is {type(value).__name__}, not a map")
    if len(value) > limits.max_headers:
        raise RecordingError(f"{where}: {len(value)} headers, over the limit of "
                             f"{limits.max_headers}")
    for name, values in value.items():
        if not isinstance(name, str) or not name or len(name) > limits.max_header_bytes \
                or not name.isprintable():
            raise RecordingError(f"{where} has a header with a bad name")
        if not isinstance(values, list) or not all(
                isinstance(v, str) and len(v) <= limits.max_header_bytes
                and "\r" not in v and "\n" not in v for v in values):
            raise RecordingError(f"{where}[{name[:40]!r}] is not a list of one-line strings")
        if len(values) > limits.max_headers:
            raise RecordingError(f"{where}[{name[:40]!r}] repeats over {limits.max_headers} "
                                 "times")


class MsgpackSerializer:
    """A vcrpy serializer that stores the cassette dictionary as msgpack bytes."""

    @staticmethod
    def serialize(cassette_dict: dict[str, Any]) -> bytes:
        data: bytes = msgpack.packb(cassette_dict, use_bin_type=True)
        return data

    @staticmethod
    def deserialize(cassette_data: bytes) -> dict[str, Any]:
        data: dict[str, Any] = msgpack.unpackb(cassette_data, raw=False)
        return data


class MsgpackPersister:
    """A vcrpy persister for binary cassettes (vcrpy's own one reads and writes text)."""

    @classmethod
    def load_cassette(cls, cassette_path: str | os.PathLike[str],
                      serializer: Any) -> Any:
        import vcr.serialize
        from vcr.persisters.filesystem import CassetteNotFoundError

        path = Path(cassette_path)
        if not path.is_file():
            raise CassetteNotFoundError()
        data = path.read_bytes()
        if not data:
            raise CassetteNotFoundError()
        return vcr.serialize.deserialize(data, serializer)

    @classmethod
    def save_cassette(cls, cassette_path: str | os.PathLike[str],
                      cassette_dict: dict[str, Any], serializer: Any) -> None:
        import vcr.serialize

        path = Path(cassette_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(vcr.serialize.serialize(cassette_dict, serializer))
        tmp.replace(path)


def _redact_request(request: Any) -> Any:
    # vcrpy hands filters a deep copy, so this changes only what is recorded and matched.
    tie = getattr(request, "acpfuzz_tie", None)
    if tie is not None:
        request.headers[TIE_HEADER] = tie
    for name in list(request.headers):
        if is_secret_header(name):
            request.headers[name] = REDACTED
    # Every secret-looking query parameter (api_key, access_token, sig, ...), not only ?key=.
    request.uri = redact_url(request.uri)
    return request


def _redact_response(response: Any) -> Any:
    headers = response.get("headers") or {}
    for name in list(headers):
        if is_secret_header(name):
            headers[name] = [REDACTED]
    return response


def _tie_matcher(r1: Any, r2: Any) -> None:
    a, b = r1.headers.get(TIE_HEADER), r2.headers.get(TIE_HEADER)
    if a != b:
        raise AssertionError(f"tie {a!r} != {b!r}")


def _make_vcr() -> vcr.VCR:
    import vcr

    config = vcr.VCR(
        serializer="msgpack",
        filter_headers=[(h, REDACTED) for h in SECRET_HEADERS],
        before_record_request=_redact_request,
        before_record_response=_redact_response,
        decode_compressed_response=False,
        match_on=MATCH_ON,
    )
    config.register_serializer("msgpack", MsgpackSerializer)
    config.register_persister(MsgpackPersister)
    config.register_matcher("acpfuzz_tie", _tie_matcher)
    return config


@cache
def _locked_cassette() -> type[Any]:
    """vcrpy's Cassette behind a lock (made once, when the first recorder is built)."""
    from vcr.cassette import Cassette

    class _LockedCassette(Cassette):  # type: ignore[misc]
        # The gateway calls upstream from many threads; a Cassette is plain lists and
        # counters.
        _lock = threading.RLock()

        def append(self, request: Any, response: Any) -> None:
            with self._lock:
                super().append(request, response)

        def play_response(self, request: Any) -> Any:
            with self._lock:
                return super().play_response(request)

        def can_play_response_for(self, request: Any) -> Any:
            with self._lock:
                return super().can_play_response_for(request)

    return _LockedCassette


class _TieMixin:
    # Sits in front of vcrpy's connection stub: takes the tie header off the outgoing request
    # (the real upstream never sees it) and keeps it on vcrpy's request object instead.
    _vcr_request: Any

    def request(self, method: str, url: str, body: Any = None,
                headers: Mapping[str, str] | None = None, *args: Any, **kwargs: Any) -> None:
        clean = dict(headers or {})
        tie = next((clean.pop(k) for k in list(clean) if k.lower() == TIE_HEADER), None)
        super().request(method, url, body, clean, *args, **kwargs)  # type: ignore[misc]
        self._vcr_request.acpfuzz_tie = tie


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, connection: type) -> None:
        super().__init__()
        self._connection = connection

    def http_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(self._connection, req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, connection: type) -> None:
        super().__init__()
        self._connection = connection

    def https_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(self._connection, req,  # type: ignore[arg-type]
                            context=self._context)  # type: ignore[attr-defined]


def _opener(*handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    # A bare OpenerDirector: no proxies from the environment, no redirects, and no
    # HTTPErrorProcessor, so a 4xx/5xx upstream reply reaches the agent unchanged.
    opener = urllib.request.OpenerDirector()
    for handler in handlers:
        opener.add_handler(handler)
    return opener


class UpstreamRecorder:
    """Records upstream model calls with vcrpy, or replays them offline.

    A new recorder records (vcrpy record mode ``"all"``). :meth:`from_bytes` (or
    :meth:`load`) rebuilds one from a recording; its default record mode ``"none"`` serves
    every reply from the recording and never touches the network: a request with no
    recorded twin gets :class:`UpstreamError`, which the gateway answers with a 502.

    The recording is vcrpy's cassette format, msgpack-encoded. Secret headers and query
    parameters (see :mod:`acp_fuzz.core.scrub`) are stored as ``"<redacted>"``.
    """

    def __init__(self, *, record_mode: str = "all", _data: bytes | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="acp-fuzz-vcr-")
        path = Path(self._dir.name) / "upstream.msgpack"
        if _data:
            path.write_bytes(_data)
        config = _make_vcr().get_merged_config(path=str(path), record_mode=record_mode)
        for key in ("path_transformer", "func_path_generator", "record_on_exception"):
            config.pop(key, None)
        from vcr.stubs import VCRHTTPConnection, VCRHTTPSConnection

        self._cassette: Any = _locked_cassette().load(**config)
        self.record_mode = record_mode
        self._http = _opener(_Handler(type("VCRConn", (_TieMixin, VCRHTTPConnection),
                                           {"cassette": self._cassette})))
        self._https = _opener(_HTTPSHandler(type("VCRConnS", (_TieMixin, VCRHTTPSConnection),
                                                 {"cassette": self._cassette})))
        metadata = getattr(self._cassette, "_metadata", {})
        self._upstream: str | None = metadata.get("upstream") if isinstance(
            metadata, Mapping) else None

    @classmethod
    def from_bytes(cls, data: bytes, *, record_mode: str = "none") -> UpstreamRecorder:
        """A recorder holding the recording :meth:`to_bytes` made.

        The recording is checked first (:func:`check_recording`): a malformed one, or one
        over :data:`RECORDING_LIMITS`, raises :class:`RecordingError`."""
        check_recording(data)
        try:
            return cls(record_mode=record_mode, _data=data)
        except (RecordingError, OSError):
            raise
        except Exception as exc:  # vcrpy refusing what the check let through
            raise RecordingError(f"vcrpy cannot load the recording: {type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:200]}") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, record_mode: str = "none") -> UpstreamRecorder:
        """A recorder holding the recording saved at ``path`` by :meth:`save`."""
        return cls.from_bytes(Path(path).read_bytes(), record_mode=record_mode)

    @property
    def upstream(self) -> str | None:
        """The upstream base URL the recording was made against (``None`` if unknown)."""
        return self._upstream

    def __len__(self) -> int:
        return len(self._cassette.data)

    def to_bytes(self) -> bytes:
        """The recording so far, as msgpack bytes (written through :class:`MsgpackPersister`)."""
        with self._cassette._lock:
            cassette_dict: dict[str, Any] = {"requests": list(self._cassette.requests),
                                             "responses": list(self._cassette.responses)}
        if self._upstream:
            cassette_dict["metadata"] = {"upstream": self._upstream}
        with tempfile.TemporaryDirectory(prefix="acp-fuzz-vcr-") as tmp:
            path = Path(tmp) / "out.msgpack"
            MsgpackPersister.save_cassette(path, cassette_dict, MsgpackSerializer)
            return path.read_bytes()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_bytes` to ``path``."""
        Path(path).write_bytes(self.to_bytes())

    def open(self, request: urllib.request.Request, timeout: float) -> HTTPResponse:
        """Send ``request`` through the cassette: replayed if recorded, else sent for real."""
        if self._upstream is None and self.record_mode != "none":
            scheme, _, rest = request.full_url.partition("://")
            self._upstream = f"{scheme}://{rest.split('/', 1)[0]}"
        opener = self._https if request.type == "https" else self._http
        from vcr.errors import CannotOverwriteExistingCassetteException, UnhandledHTTPRequestError

        try:
            response: HTTPResponse = opener.open(request, timeout=timeout)
        except (CannotOverwriteExistingCassetteException, UnhandledHTTPRequestError) as exc:
            raise UpstreamError(f"no recorded upstream reply: {exc}") from exc
        return response

    def close(self) -> None:
        """Remove the recorder's temporary files."""
        self._dir.cleanup()


@dataclass(frozen=True)
class UpstreamResponse:
    """What the upstream answered: status, headers (as sent) and the whole body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def upstream_url(base: str, target: str) -> str:
    """Where a request for ``target`` (the request target the agent sent: a path, with its
    query) goes: ``base``'s scheme, host and port, ``base``'s path followed by the target's.

    Raises :class:`UpstreamError` for a target that is not a path (``http://other/x``,
    ``@other/x``, ``//other/x``, ``:9999/x``, ``.other.example/x``): pasted after the base,
    such a target could name another host or port (the agent's requests must not reach
    anything but the upstream the user configured)."""
    if not target.startswith("/") or target.startswith("//"):
        raise UpstreamError(f"refused to forward {target[:80]!r}: the request target is not "
                            "a path")
    parts = urlsplit(base)
    path, _sep, query = target.partition("?")
    url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, query, ""))
    check = urlsplit(url)
    if (check.scheme, check.netloc) != (parts.scheme, parts.netloc):  # defence in depth
        raise UpstreamError(f"refused to forward {target[:80]!r}: it changes the upstream")
    return url


def forward(base: str, method: str, path: str, headers: Mapping[str, str], body: bytes,
            *, recorder: UpstreamRecorder | None = None, tie: str = "",
            timeout: float = 600.0) -> UpstreamResponse:
    """Send one agent request to ``base + path`` (:func:`upstream_url`) and return the
    upstream reply.

    ``headers`` are the agent's (real keys included); hop-by-hop and encoding headers are
    dropped because the body is sent decoded. Raises :class:`UpstreamError` if ``path`` is
    not a path, the upstream is unreachable or a replay has nothing recorded for the request.
    """
    url = upstream_url(base, path)
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
    out["Accept-Encoding"] = "identity"
    if recorder is not None:
        out[TIE_HEADER] = tie
    req = urllib.request.Request(url, data=body or None, headers=out, method=method)
    try:
        if recorder is not None:
            resp = recorder.open(req, timeout)
        else:
            opener = _opener(urllib.request.HTTPHandler(), urllib.request.HTTPSHandler())
            resp = opener.open(req, timeout=timeout)
        with resp:
            data = resp.read()
            return UpstreamResponse(resp.status, list(resp.headers.items()), data)
    except UpstreamError:
        raise
    except (OSError, ValueError) as exc:
        raise UpstreamError(f"upstream {base} failed: {exc}") from exc
