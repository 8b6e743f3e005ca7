"""``--model-upstream`` mode: forward model requests to a real endpoint, recorded by vcrpy.

The gateway normally answers every request itself. With an upstream URL it forwards the
request (body and headers, real keys included) to ``URL + path`` with :mod:`urllib.request`
and relays the reply. With an :class:`UpstreamRecorder` those upstream calls go through
vcrpy, which records them in a msgpack cassette (credentials redacted) and can later replay
them with no network at all (record mode ``"none"``).

Unlike ``vcr.use_cassette``, the recorder never patches :mod:`http.client` globally: vcrpy's
patch is process-wide, so it would also capture (or, when replaying, refuse) every other HTTP
call in the harness process, SDK clients included. Instead the recorder hands vcrpy's own
connection stub, bound to its cassette, to a private :mod:`urllib` opener. The recording is
the same as the one ``use_cassette`` makes.

Replies are buffered, not streamed: vcrpy reads an upstream body whole before it records it.
"""

from __future__ import annotations

import os
import tempfile
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import msgpack
import vcr
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException, UnhandledHTTPRequestError
from vcr.persisters.filesystem import CassetteNotFoundError
from vcr.stubs import VCRHTTPConnection, VCRHTTPSConnection

from acp_fuzz.gateway.redact import REDACTED, SECRET_HEADERS, is_secret_name

__all__ = [
    "MsgpackPersister",
    "MsgpackSerializer",
    "UpstreamError",
    "UpstreamRecorder",
    "UpstreamResponse",
    "forward",
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


class UpstreamError(Exception):
    """The upstream could not be reached, or a replay has no recorded reply for a request."""


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
        if is_secret_name(name):
            request.headers[name] = REDACTED
    return request


def _redact_response(response: Any) -> Any:
    headers = response.get("headers") or {}
    for name in list(headers):
        if is_secret_name(name):
            headers[name] = [REDACTED]
    return response


def _tie_matcher(r1: Any, r2: Any) -> None:
    a, b = r1.headers.get(TIE_HEADER), r2.headers.get(TIE_HEADER)
    if a != b:
        raise AssertionError(f"tie {a!r} != {b!r}")


def _make_vcr() -> vcr.VCR:
    config = vcr.VCR(
        serializer="msgpack",
        filter_headers=[(h, REDACTED) for h in SECRET_HEADERS],
        filter_query_parameters=[("key", REDACTED)],
        before_record_request=_redact_request,
        before_record_response=_redact_response,
        decode_compressed_response=False,
        match_on=MATCH_ON,
    )
    config.register_serializer("msgpack", MsgpackSerializer)
    config.register_persister(MsgpackPersister)
    config.register_matcher("acpfuzz_tie", _tie_matcher)
    return config


class _LockedCassette(Cassette):  # type: ignore[misc]
    # The gateway calls upstream from many threads; a Cassette is plain lists and counters.
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

    The recording is vcrpy's cassette format, msgpack-encoded. Secret headers and the
    ``key`` query parameter are stored as ``"<redacted>"``.
    """

    def __init__(self, *, record_mode: str = "all", _data: bytes | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="acp-fuzz-vcr-")
        path = Path(self._dir.name) / "upstream.msgpack"
        if _data:
            path.write_bytes(_data)
        config = _make_vcr().get_merged_config(path=str(path), record_mode=record_mode)
        for key in ("path_transformer", "func_path_generator", "record_on_exception"):
            config.pop(key, None)
        self._cassette: Any = _LockedCassette.load(**config)
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
        """A recorder holding the recording :meth:`to_bytes` made."""
        return cls(record_mode=record_mode, _data=data)

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


def forward(base: str, method: str, path: str, headers: Mapping[str, str], body: bytes,
            *, recorder: UpstreamRecorder | None = None, tie: str = "",
            timeout: float = 600.0) -> UpstreamResponse:
    """Send one agent request to ``base + path`` and return the upstream reply.

    ``headers`` are the agent's (real keys included); hop-by-hop and encoding headers are
    dropped because the body is sent decoded. Raises :class:`UpstreamError` if the upstream
    is unreachable or a replay has nothing recorded for the request.
    """
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
    out["Accept-Encoding"] = "identity"
    if recorder is not None:
        out[TIE_HEADER] = tie
    req = urllib.request.Request(base.rstrip("/") + path, data=body or None, headers=out,
                                 method=method)
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
