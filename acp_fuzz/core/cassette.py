"""Cassettes: the durable, replayable record of one run.

A cassette is one file holding a :class:`Header`, every :class:`~acp_fuzz.core.history.Event` of a
run in ``seq`` order, and opaque binary attachments (for example the vcrpy recording of
upstream model calls, by convention under the name ``"vcr"``). It is what replay reads, what
a bug report attaches and what CI keeps as a regression case. The byte-level format is
described in ``docs/cassette-format.md``.

Writing::

    with CassetteWriter("run.cassette", Header(target=["my-agent", "--acp"], seed=7)) as w:
        history.sink = w.write          # events stream to disk as they happen
        ...
        w.update_header(initialize=init_result)
        w.attach("vcr", vcr_bytes)
    # the file appears at run.cassette only now, complete, in one atomic rename

Reading::

    cassette = read_cassette("run.cassette")       # everything, checksum verified
    for event in iter_events("big.cassette"):      # one event at a time
        ...

Cassettes come from strangers, so the readers treat them as hostile data: they never execute
anything (there is no pickle and no msgpack extension type), they open nothing but a regular
file and never block on one that is not (a FIFO), they bound every allocation by
:class:`Limits`, they check the type of every field acp-fuzz writes into an event's data (see
``docs/cassette-format.md``), and every problem, whatever its cause, is raised as a
:class:`CassetteError` whose message is one line naming the file and what is wrong with it.

This module only does file I/O: it starts no process and opens no socket.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import secrets
import stat
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, BinaryIO

import msgpack

from acp_fuzz.core.errors import CassetteError
from acp_fuzz.core.history import EVENT_KINDS, Event, History
from acp_fuzz.core.version import __version__

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "Cassette",
    "CassetteError",
    "CassetteReader",
    "CassetteWriter",
    "Header",
    "Limits",
    "RunSettings",
    "fsync_dir",
    "iter_events",
    "open_cassette",
    "read_cassette",
    "write_cassette",
    "write_cassette_bounded",
]

#: The cassette format this module writes and the only one it reads.
FORMAT_VERSION = 1
#: The value of the header's ``magic`` field.
MAGIC = "acp-fuzz-cassette"

_TRAILER_LEN = 34  # bin 8 marker (0xc4), length 32 (0x20), then the 32-byte sha256 digest
_TRAILER_PREFIX = b"\xc4\x20"
_READ_SIZE = 256 * 1024
_FLUSH_BYTES = 1024 * 1024
# Lone surrogates are legal in Python strings and JSON ("\ud800" parses to one), and an
# agent under fuzzing may well send them; "surrogatepass" lets them round-trip instead of
# crashing the recorder mid-run.
_UNICODE_ERRORS = "surrogatepass"
_MiB = 1024 * 1024
_GiB = 1024 * _MiB


@dataclass(frozen=True)
class Limits:
    """Bounds the readers enforce, so a hostile cassette cannot exhaust memory.

    ``max_file_bytes``: the largest file accepted at all.
    ``max_event_bytes``: the largest encoded size of one event (and of the header).
    ``max_events``: the most events one cassette may hold.
    ``max_depth``: how many containers deep any value may nest; the event map itself is
    level 1, its ``data`` map level 2, a JSON-RPC message inside it level 3.
    ``max_attachment_bytes``: the largest total size of all attachments together.
    ``max_values``: the most values (strings, numbers, containers...) one event, the header
    or the footer may decode to.
    ``max_total_values``: the most values the whole cassette (header, events and footer
    together) may decode to. This is what bounds the memory of a whole read: an empty list
    costs one byte on disk and about 70 in memory, so a 20 MB file of them took 1.4 GB to
    read and 1.5 GB to judge (``replay --offline``), and the file size limit alone would let
    one take 75 GB. Values are counted as the limits above count them: a list adds its length
    plus one, a map twice its length plus one (so an empty list inside a list counts 2). At
    1.5 million, the worst shape measured (maps of distinct short strings; floats, empty
    lists and empty maps take less) peaks at about 195 MB in ``replay --offline`` and 180 MB
    in ``show`` and ``report``, the interpreter included, while the largest cassette
    committed under ``cassettes/`` holds under 8,000 values: a margin of 190 times.

    ``max_total_bytes``: the most bytes the header and the events may take together,
    encoded. It bounds the strings and bytes they decode to (each takes about its encoded
    size in memory, and ``show --full`` renders it several times over: a 240 MB cassette of
    strings peaked at 2.3 GB), which ``max_total_values`` does not, since a string is one
    value whatever its length. 64 MiB: the largest cassette committed under ``cassettes/``
    is under 1 MB.

    The writer checks events against the default limits too, so that it never produces a
    cassette that a default reader would refuse.
    """

    max_file_bytes: int = 1 * _GiB
    max_event_bytes: int = 64 * _MiB
    max_events: int = 2_000_000
    max_depth: int = 64
    max_attachment_bytes: int = 256 * _MiB
    max_values: int = 4_000_000
    max_total_values: int = 1_500_000
    max_total_bytes: int = 64 * _MiB


_DEFAULT_LIMITS = Limits()


@dataclass(kw_only=True)
class Header:
    """What a cassette says about its run.

    ``target`` is the agent's argv; ``seed`` the Hypothesis/fuzzer seed (``None`` if not
    seeded); ``settings`` the run settings; ``kind`` what the cassette is (``"run"``,
    ``"finding"``, ...); ``initialize`` the agent's ACP ``initialize`` result, usually set
    later with :meth:`CassetteWriter.update_header`; ``meta`` free-form caller data (put
    timestamps, host names and such here: nothing in the format itself depends on the
    clock), except that its ``findings``, when there, are a list of
    :meth:`Finding.to_wire() <acp_fuzz.core.findings.Finding.to_wire>` maps, whose fields are
    type-checked. ``format`` is the format version the cassette was written in.
    All values must be msgpack-friendly: ``None``, ``bool``, ``int``, ``float``, ``str``,
    ``bytes``, lists, and dicts with ``str`` keys.
    """

    target: list[str]
    kind: str = "run"
    seed: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    initialize: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    acp_fuzz_version: str = __version__
    created_by: str = "acp-fuzz"
    format: int = FORMAT_VERSION

    @property
    def run_settings(self) -> RunSettings:
        """:attr:`settings` read with their types (:class:`RunSettings`)."""
        return RunSettings.from_wire(self.settings)

    def to_wire(self) -> dict[str, Any]:
        # "magic" and "format" first, so every cassette starts with the same bytes.
        return {
            "magic": MAGIC,
            "format": self.format,
            "acp_fuzz_version": self.acp_fuzz_version,
            "created_by": self.created_by,
            "target": list(self.target),
            "seed": self.seed,
            "settings": self.settings,
            "kind": self.kind,
            "initialize": self.initialize,
            "meta": self.meta,
        }

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Header:
        """Build a header from its wire map. Raises ``ValueError`` (with a reason fit for a
        :class:`CassetteError`) if the map is not a valid header of this format version."""
        magic = obj.get("magic")
        if magic != MAGIC:
            raise ValueError("not an acp-fuzz cassette (bad magic)")
        fmt = obj.get("format")
        if not _is_int(fmt):
            raise ValueError(f"corrupt: header format is {_show(fmt)}, not an integer")
        if fmt != FORMAT_VERSION:
            raise ValueError(
                f"unsupported format version {fmt} (this acp-fuzz reads {FORMAT_VERSION})"
            )
        target = _field(obj, "target", list)
        if not all(isinstance(a, str) for a in target):
            raise ValueError("corrupt: header field 'target' must be a list of strings")
        seed = obj.get("seed")
        if seed is not None and not _is_int(seed):
            raise ValueError(f"corrupt: header field 'seed' is {_show(seed)}, not int or nil")
        initialize = obj.get("initialize")
        if initialize is not None and not isinstance(initialize, dict):
            raise ValueError("corrupt: header field 'initialize' must be a map or nil")
        meta = _field(obj, "meta", dict)
        _check_findings(meta)
        return cls(
            format=fmt,
            acp_fuzz_version=_field(obj, "acp_fuzz_version", str),
            created_by=_field(obj, "created_by", str),
            target=list(target),
            seed=seed,
            settings=_field(obj, "settings", dict),
            kind=_field(obj, "kind", str),
            initialize=initialize,
            meta=meta,
        )


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The settings of an agent run, as its readers use them, from :attr:`Header.settings`
    (the campaign writes its ``CampaignSettings.to_wire()`` there, with the run's baseline,
    profile, dialect and protocol). A cassette is data from whoever wrote it: a value of the
    wrong type reads as absent.

    ``profile`` and ``dialect`` as recorded (``None``: not a string); ``strict`` whether
    SHOULD findings failed the run; ``baseline`` the wire form of the run's learned default
    instructions (read it with ``acp_fuzz.core.oracles.Baseline.from_wire``); ``calibration``
    what calibration learned besides (read it with
    ``acp_fuzz.core.calibration.Learned.from_wire``; ``None`` in older cassettes)."""

    profile: str | None = None
    dialect: str | None = None
    strict: bool = False
    baseline: Any = None
    calibration: Any = None

    @classmethod
    def from_wire(cls, settings: Any) -> RunSettings:
        if not isinstance(settings, Mapping):
            return cls()

        def text(key: str) -> str | None:
            value = settings.get(key)
            return value if isinstance(value, str) else None

        return cls(profile=text("profile"), dialect=text("dialect"),
                   strict=settings.get("strict") is True, baseline=settings.get("baseline"),
                   calibration=settings.get("calibration"))


#: Header fields that :meth:`CassetteWriter.update_header` may set.
_UPDATABLE = frozenset(f.name for f in dataclasses.fields(Header)) - {"format"}


@dataclass
class Cassette:
    """A cassette read back whole: the header (with every later update merged in), the
    events in ``seq`` order, and the attachments by name."""

    header: Header
    events: list[Event]
    attachments: dict[str, bytes] = field(default_factory=dict)

    def history(self) -> History:
        """The events as a fresh :class:`~acp_fuzz.core.history.History`."""
        return History.from_events(self.events)


# -- writing -------------------------------------------------------------------------------


class CassetteWriter:
    """Stream a cassette to disk, event by event, and publish it atomically.

    Everything goes to a temporary file beside ``path`` (``.<name>.partial-<pid>-<random>``
    in the same directory); :meth:`close` completes it and renames it to ``path`` in one
    atomic step, so ``path`` either does not exist or holds a complete, checksummed
    cassette. A writer that is killed leaves only the ``.partial`` file behind, which no
    reader mistakes for a cassette (it has no footer, so it reads as truncated).

    :meth:`write` fits :attr:`History.sink <acp_fuzz.core.history.History.sink>`. The writer is
    thread-safe.

    As a context manager: a normal exit closes (publishes) the cassette. An exit by
    ``KeyboardInterrupt``, ``SystemExit`` or another non-``Exception`` also closes it, so
    whatever was recorded before Ctrl-C is kept; an exit by an ordinary exception (an
    internal error) aborts it and removes the temporary file.

    ``write``, ``update_header`` and ``attach`` raise ``ValueError`` or ``TypeError`` for
    input that would not read back (wrong ``seq``, unknown kind, a field of an event's data
    or of a recorded finding of another type than the format gives it, non-``str`` map keys,
    unsupported value types, nesting deeper than ``Limits.max_depth``, an event larger than
    ``Limits.max_event_bytes``, more values in all than ``Limits.max_total_values``, which
    :meth:`close` may find too); nothing is written in that case. I/O failures raise
    ``OSError``.
    """

    def __init__(self, path: str | os.PathLike[str], header: Header) -> None:
        self.path = Path(path)
        self._header = header
        self._updates: dict[str, Any] = {}
        self._attachments: dict[str, bytes] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._state = "open"  # -> "closed" | "aborted"
        self._hash = hashlib.sha256()
        self._packer = msgpack.Packer(use_bin_type=True, unicode_errors=_UNICODE_ERRORS)
        header_wire = header.to_wire()
        _check_header(header_wire)
        self._values = _walk(header_wire, _DEFAULT_LIMITS, "the header")
        packed = self._pack(header_wire, "the header")
        _check_size(len(packed), _DEFAULT_LIMITS.max_event_bytes, "the header")
        self._bytes = len(packed)
        self._tmp = self._create_temp()
        try:
            self._file: BinaryIO = os.fdopen(self._fd, "wb", buffering=_FLUSH_BYTES)
        except BaseException:
            os.close(self._fd)
            self._remove_temp()
            raise
        self._emit(packed)

    @property
    def temp_path(self) -> Path:
        """Where the cassette is being written until :meth:`close` renames it."""
        return self._tmp

    @property
    def count(self) -> int:
        """How many events have been written."""
        return self._count

    def write(self, event: Event) -> None:
        """Append one event; its ``seq`` must equal the number of events written so far."""
        with self._lock:
            self._check_open()
            if not _is_int(event.seq) or event.seq != self._count:
                raise ValueError(f"event has seq {event.seq!r}, expected {self._count}")
            wire = event.to_wire()
            _check_event(wire, self._count)
            values = _walk(wire, _DEFAULT_LIMITS, f"event {self._count}")
            _check_values(self._values + values, f"event {self._count}")
            packed = self._pack(wire, f"event {self._count}")
            _check_size(len(packed), _DEFAULT_LIMITS.max_event_bytes, f"event {self._count}")
            _check_bytes(self._bytes + len(packed), _DEFAULT_LIMITS.max_total_bytes,
                         f"event {self._count}")
            self._emit(packed)
            self._bytes += len(packed)
            self._count += 1
            self._values += values

    def update_header(self, **fields: Any) -> None:
        """Set header fields that are only known later (``initialize``, a ``meta`` with the
        findings summary, ...). Each field replaces the previous value; they are stored in
        the footer and merged into the header when the cassette is read."""
        with self._lock:
            self._check_open()
            unknown = sorted(set(fields) - _UPDATABLE)
            if unknown:
                raise TypeError(
                    f"update_header() cannot set {unknown}; settable: {sorted(_UPDATABLE)}"
                )
            merged = {**self._header.to_wire(), **self._updates, **fields}
            _check_header(merged)
            # Wrapped so the depth counts as the reader does: footer 1, header_updates 2.
            _walk({"header_updates": fields}, _DEFAULT_LIMITS, "header_updates")
            self._pack(fields, "header_updates")
            self._updates.update(fields)

    def attach(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Store an opaque blob under ``name`` (replacing one of the same name)."""
        with self._lock:
            self._check_open()
            if not isinstance(name, str) or not name:
                raise ValueError(f"attachment name must be a non-empty str, not {name!r}")
            blob = bytes(data)
            others = sum(len(v) for k, v in self._attachments.items() if k != name)
            limit = _DEFAULT_LIMITS.max_attachment_bytes
            if others + len(blob) > limit:
                raise ValueError(
                    f"attachments would total {_size(others + len(blob))} > limit {_size(limit)}"
                )
            self._attachments[name] = blob

    def close(self) -> Path:
        """Write the footer and checksum, flush and fsync, and atomically rename the file
        to ``path``. Returns ``path``. Calling it again does nothing; calling it after
        :meth:`abort` raises ``ValueError``. If finishing fails, the temporary file is
        removed and the error raised."""
        with self._lock:
            if self._state == "closed":
                return self.path
            self._check_open()
            try:
                footer = {
                    "end": True,
                    "count": self._count,
                    "header_updates": self._updates,
                    "attachments": self._attachments,
                }
                _check_values(self._values + _walk(footer, _DEFAULT_LIMITS, "the footer"),
                              "the footer")
                self._emit(self._pack(footer, "the footer"))
                self._file.write(_TRAILER_PREFIX + self._hash.digest())
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                os.replace(self._tmp, self.path)
            except BaseException:
                self._abort_locked()
                raise
            self._state = "closed"
            fsync_dir(self.path.parent)
            return self.path

    def abort(self) -> None:
        """Discard the cassette: close and remove the temporary file. ``path`` is left
        untouched. Calling it again, or after :meth:`close`, does nothing."""
        with self._lock:
            if self._state == "open":
                self._abort_locked()

    def __enter__(self) -> CassetteWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, Exception):
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        # A writer dropped without close() or abort() is a bug in the caller; don't leave a
        # stray file descriptor and .partial file behind for it.
        if getattr(self, "_state", None) == "open" and hasattr(self, "_file"):
            warnings.warn(
                f"CassetteWriter for {self.path} was neither closed nor aborted; aborting",
                ResourceWarning,
                stacklevel=1,
            )
            with contextlib.suppress(Exception):
                self._abort_locked()

    # -- internals ---------------------------------------------------------------------------

    def _create_temp(self) -> Path:
        parent = self.path.parent
        while True:
            tmp = parent / f".{self.path.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                # 0o666 so the final file gets the usual umask-derived permissions.
                self._fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue
            return tmp

    def _pack(self, obj: Any, what: str) -> bytes:
        try:
            packed: bytes = self._packer.pack(obj)
        except (TypeError, ValueError, OverflowError) as e:
            # The packer may hold a half-written object after a failure.
            self._packer.reset()
            raise type(e)(f"{what} cannot be stored in a cassette: {e}") from e
        return packed

    def _emit(self, packed: bytes) -> None:
        self._hash.update(packed)
        self._file.write(packed)

    def _check_open(self) -> None:
        if self._state != "open":
            raise ValueError(f"cassette writer for {self.path} is already {self._state}")

    def _abort_locked(self) -> None:
        self._state = "aborted"
        with contextlib.suppress(OSError):
            self._file.close()
        self._remove_temp()

    def _remove_temp(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)


def write_cassette(
    path: str | os.PathLike[str],
    header: Header,
    events: Iterable[Event],
    attachments: Mapping[str, bytes] | None = None,
    *,
    header_updates: Mapping[str, Any] | None = None,
) -> Path:
    """Write a whole cassette in one call (atomically, like :class:`CassetteWriter`) and
    return its path. ``events`` may be a :class:`~acp_fuzz.core.history.History`."""
    writer = CassetteWriter(path, header)
    try:
        for event in events:
            writer.write(event)
        if header_updates:
            writer.update_header(**header_updates)
        for name, data in (attachments or {}).items():
            writer.attach(name, data)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


#: Strings (and bytes) longer than this are clipped when a cassette has to be fitted.
CLIP_STRING = 64 * 1024
#: An event whose encoded size is still over this after its strings are clipped keeps only
#: its small top-level fields.
CLIP_EVENT_BYTES = 8 * _MiB


def write_cassette_bounded(
    path: str | os.PathLike[str],
    header: Header,
    events: Sequence[Event],
    attachments: Mapping[str, bytes] | None = None,
) -> Path:
    """Like :func:`write_cassette`, but what cannot be written is clipped instead of refused.

    A run must never lose its finding because one event is too large (an agent's 80 MiB
    message), nests too deep, or holds a value msgpack cannot encode. When the plain write
    fails for such a reason, the cassette is written again with each offending event fitted
    (long strings cut to :data:`CLIP_STRING` characters around a visible marker, unsupported
    values shown by their ``repr``, and an event still over :data:`CLIP_EVENT_BYTES` reduced
    to its small top-level fields), attachments that do not fit dropped, and the header's
    ``meta["clipped"]`` saying what was changed. A field of an event's data that is not of
    the type the format gives it (see ``docs/cassette-format.md``) is dropped, its ``repr``
    kept under ``acp_fuzz_dropped``. When the events together decode to more values than
    ``Limits.max_total_values`` (an agent that floods notifications of tiny values), or take
    more than ``Limits.max_total_bytes``, the events past that budget keep only their small
    top-level fields, and any that still do
    not fit are dropped from the end (``meta["clipped"]["events_dropped"]`` says how many).
    I/O errors (``OSError``) are raised as they are; the write is atomic either way."""
    try:
        return write_cassette(path, header, events, attachments)
    except (ValueError, TypeError, OverflowError, MemoryError):
        pass
    kept: dict[str, bytes] = {}
    dropped: list[str] = []
    for name, blob in (attachments or {}).items():
        if sum(map(len, kept.values())) + len(blob) <= _DEFAULT_LIMITS.max_attachment_bytes:
            kept[name] = blob
        else:
            dropped.append(name)
    fields = {f.name: getattr(header, f.name) for f in dataclasses.fields(Header)
              if f.name not in ("format", "target")}
    fields = _fit_value(fields)
    # The budget of values for the events: what the header, the footer and the clipping
    # note leave of Limits.max_total_values.
    used = _walk(fields, _DEFAULT_LIMITS, "the header") + len(header.target) + 2 * len(kept) \
        + _FIT_RESERVE
    # The same for the bytes: what the header takes, with room for the clipping note.
    used_bytes = len(_PACKER_CHECK({**fields, "target": header.target})) + _FIT_RESERVE_BYTES
    clipped: list[int] = []
    fitted: list[Event] = []
    for event in events:
        fit = _fit_event(event)
        values, size = _cost(fit)
        if used + values > _DEFAULT_LIMITS.max_total_values \
                or used_bytes + size > _DEFAULT_LIMITS.max_total_bytes:
            fit = _stub_event(fit, f"{values} values, {size} bytes, over the cassette's budget")
            values, size = _cost(fit)
            if used + values > _DEFAULT_LIMITS.max_total_values \
                    or used_bytes + size > _DEFAULT_LIMITS.max_total_bytes:
                break  # not even the stubs fit: the rest is dropped
        if fit is not event:
            clipped.append(event.seq)
        fitted.append(fit)
        used += values
        used_bytes += size
    meta = fields.get("meta") if isinstance(fields.get("meta"), dict) else {}
    note: dict[str, Any] = {"events": clipped[:1000], "events_clipped": len(clipped),
                            "attachments_dropped": dropped,
                            "why": "too large or not encodable as written"}
    if len(fitted) < len(events):
        note["events_dropped"] = len(events) - len(fitted)
    meta = {**meta, "clipped": note}
    fitted_header = dataclasses.replace(header, **{**fields, "meta": meta})
    return write_cassette(path, fitted_header, fitted, kept)


# Values write_cassette_bounded keeps free for the footer and meta["clipped"] (at most 1000
# seq numbers and a few fields), and bytes (1000 seq numbers of up to 9 bytes, and the rest).
_FIT_RESERVE = 2_100
_FIT_RESERVE_BYTES = 16 * 1024


def _cost(event: Event) -> tuple[int, int]:
    """The values and the encoded bytes the reader counts for ``event``."""
    wire = event.to_wire()
    return _walk(wire, _DEFAULT_LIMITS, "event"), len(_PACKER_CHECK(wire))


def _fit_event(event: Event) -> Event:
    wire = event.to_wire()
    bad = _bad_fields(event.kind, wire["data"])
    try:
        _walk(wire, _DEFAULT_LIMITS, "event")
        size = len(_PACKER_CHECK(wire))
    except (ValueError, TypeError, OverflowError):
        size = -1
    if 0 <= size <= CLIP_EVENT_BYTES and not bad:
        return event
    data = dict(event.data)
    if bad:
        data = {k: v for k, v in data.items() if k not in bad}
        data["acp_fuzz_dropped"] = {k: repr(event.data[k])[:CLIP_STRING] for k in bad}
    data = _fit_value(data)
    if len(_PACKER_CHECK(data)) > CLIP_EVENT_BYTES:
        return _stub_event(Event(seq=event.seq, t=event.t, kind=event.kind, data=data),
                           f"{size} bytes")
    return Event(seq=event.seq, t=event.t, kind=event.kind, data=data)


def _stub_event(event: Event, why: str) -> Event:
    """``event`` with only its small top-level fields, and a marker saying why."""
    small = {k: v for k, v in event.data.items() if len(_PACKER_CHECK(v)) <= 4096
             and _walk(v, _DEFAULT_LIMITS, "a field") <= 256}
    return Event(seq=event.seq, t=event.t, kind=event.kind,
                 data={**small, "acp_fuzz_clipped": f"[acp-fuzz: event clipped, {why}]"})


def _bad_fields(kind: str, data: Mapping[str, Any]) -> list[str]:
    """The fields of an event's data that are not of the type the format gives them."""
    fields = _DATA_FIELDS.get(kind, {})
    return [k for k, v in data.items() if k in fields and not fields[k][0](v)]


def _fit_value(value: Any) -> Any:
    from acp_fuzz.core.history import clip_depth
    from acp_fuzz.core.scrub import map_leaves

    def leaf(v: Any) -> Any:
        half = CLIP_STRING // 2
        size = len(v) if isinstance(v, str | bytes) else 0
        marker = f"... [acp-fuzz: clipped, {size} in all] ..."
        if isinstance(v, str) and len(v) > CLIP_STRING:
            return v[:half] + marker + v[-half:]
        if isinstance(v, bytes) and len(v) > CLIP_STRING:
            return v[:half] + marker.encode() + v[-half:]
        if isinstance(v, bool | float | str | bytes) or v is None:
            return v
        if isinstance(v, int):
            return v if -(2**63) <= v < 2**64 else repr(v)[:CLIP_STRING]
        return repr(v)[:CLIP_STRING]

    fitted = map_leaves(value, leaf, key=lambda k: k if isinstance(k, str) else repr(k))
    if isinstance(fitted, dict):
        return clip_depth(fitted, _DEFAULT_LIMITS.max_depth - 16)
    return fitted


def _PACKER_CHECK(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, unicode_errors=_UNICODE_ERRORS)
    return packed


def fsync_dir(directory: Path) -> None:
    """Make a rename into ``directory`` durable (POSIX only can fsync a directory; an error is
    ignored: the file itself is already synced). Used by every atomic write of acp-fuzz."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- reading -------------------------------------------------------------------------------


class _Reject(Exception):
    """Internal: carries a CassetteError reason out of the decoder hooks and validators."""


class _HashingReader:
    """File wrapper handed to the msgpack Unpacker: counts the bytes read, enforces the
    file-size limit, and hashes everything except the last 34 bytes seen so far, which at
    end of file are the trailer holding the checksum."""

    def __init__(self, f: IO[bytes], limit: int) -> None:
        self._f = f
        self._limit = limit
        self.total = 0
        self.hash = hashlib.sha256()
        self.tail = b""

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n if n > 0 else _READ_SIZE)
        self.total += len(data)
        if self.total > self._limit:
            raise _Reject(f"too large: file is over the limit of {_size(self._limit)}")
        buf = self.tail + data
        cut = len(buf) - _TRAILER_LEN
        if cut > 0:
            self.hash.update(memoryview(buf)[:cut])
            self.tail = buf[cut:]
        else:
            self.tail = buf
        return data


class CassetteReader:
    """Streaming reader: the header up front, then the events one at a time.

    Opening reads and checks the header (:attr:`header`, as written at the start, without
    the updates from the footer). Iterating yields the events; after the last one the
    reader checks the footer and the checksum and fills :attr:`final_header` (updates
    merged) and :attr:`attachments`. Memory stays bounded by one event (or the footer).

    Before the first event, the reader verifies the checksum of the whole file (one extra
    sequential read, in bounded memory), so no event of a damaged file is yielded; it checks
    again at the end, in case the file changed while it was read, and a file with no
    checksum at all (a truncated one) fails only when the reader gets to where the footer
    should be. So act on the events once iteration has finished, or use
    :func:`read_cassette`. Every error is a :class:`CassetteError`. The reader can be
    iterated once; use it as a context manager (or call :meth:`close`) to release the file.
    """

    def __init__(self, path: str | os.PathLike[str], *, limits: Limits = _DEFAULT_LIMITS) -> None:
        self.path = os.fspath(path)
        self.limits = limits
        self._final_header: Header | None = None
        self._attachments: dict[str, bytes] | None = None
        self._started = False
        self._file: IO[bytes] | None = None
        self._values = 0
        self._values_left = limits.max_values
        self._total_values = 0
        self._containers = 0
        with self._errors():
            self._file = self._open()
            self._src = _HashingReader(self._file, limits.max_file_bytes)
            biggest = max(limits.max_event_bytes, limits.max_attachment_bytes)
            self._unpacker = msgpack.Unpacker(
                self._src,
                raw=False,
                use_list=True,
                strict_map_key=True,
                unicode_errors=_UNICODE_ERRORS,
                read_size=min(_READ_SIZE, biggest),
                # One object (the footer holds the attachments) plus a read's worth, and
                # never more than the file: a length prefix claiming gigabytes in a small
                # file then costs only the file's size before it reads as truncated.
                max_buffer_size=min(
                    limits.max_event_bytes + limits.max_attachment_bytes,
                    os.fstat(self._file.fileno()).st_size,
                )
                + _READ_SIZE,
                max_str_len=biggest,
                max_bin_len=biggest,
                max_array_len=limits.max_values,
                max_map_len=limits.max_values,
                max_ext_len=0,
                ext_hook=_refuse_ext,
                list_hook=self._count_list,
                object_hook=self._count_map,
            )
            self._end = 0  # stream offset just past the last complete object
            first = self._next_object("header")
            if first is _EOF:
                raise _Reject("truncated: empty file")
            obj, size = first
            if not isinstance(obj, dict):
                raise _Reject("not an acp-fuzz cassette (bad magic)")
            _check_header(obj)
            _check_size(size, limits.max_event_bytes, "the header", _Reject)
            self._total_bytes = size
            self._checked(obj, "the header")
            self._header_wire: dict[str, Any] = obj
            self.header = Header.from_wire(obj)
            self._precheck_checksum()

    @property
    def final_header(self) -> Header:
        """The header with the footer's updates merged in (after iteration finished)."""
        if self._final_header is None:
            raise ValueError("final_header is known only after iterating over all events")
        return self._final_header

    @property
    def attachments(self) -> dict[str, bytes]:
        """The attachments by name (after iteration finished)."""
        if self._attachments is None:
            raise ValueError("attachments are known only after iterating over all events")
        return self._attachments

    def __iter__(self) -> Iterator[Event]:
        if self._started:
            raise ValueError("a CassetteReader can be iterated only once")
        self._started = True
        return self._events()

    def close(self) -> None:
        """Release the file (iteration can't continue after this)."""
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> CassetteReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _events(self) -> Iterator[Event]:
        limits = self.limits
        count = 0
        with self._errors():
            while True:
                got = self._next_object(count)
                if got is _EOF:
                    raise _Reject(f"truncated: no footer after {count} events")
                obj, size = got
                if type(obj) is dict and "end" in obj:
                    self._finish(obj, count)
                    return
                if count >= limits.max_events:
                    raise _Reject(f"too large: more than {limits.max_events} events")
                what = f"event {count}"
                _check_size(size, limits.max_event_bytes, what, _Reject)
                self._total_bytes += size
                _check_bytes(self._total_bytes, limits.max_total_bytes, what, _Reject)
                if type(obj) is not dict:
                    raise _Reject(f"corrupt: {what} is {_kind_of(obj)}, not a map")
                _check_event(obj, count, _Reject)
                self._checked(obj, what)
                count += 1
                yield Event.from_wire(obj)

    def _finish(self, footer: dict[str, Any], count: int) -> None:
        limits = self.limits
        if footer.get("end") is not True:
            raise _Reject("corrupt: footer 'end' is not true")
        n = footer.get("count")
        if not _is_int(n) or n != count:
            raise _Reject(f"corrupt: footer says {_show(n)} events, file has {count}")
        updates = footer.get("header_updates", {})
        attachments = footer.get("attachments", {})
        if not isinstance(updates, dict) or not isinstance(attachments, dict):
            raise _Reject("corrupt: footer 'header_updates' and 'attachments' must be maps")
        bad = sorted(set(updates) - _UPDATABLE)
        if bad:
            raise _Reject(f"corrupt: footer updates header fields that can't be updated: {bad}")
        total = 0
        for name, blob in attachments.items():
            if not isinstance(blob, bytes):
                raise _Reject(f"corrupt: attachment {_show(name)} is {_kind_of(blob)}, not bin")
            total += len(blob)
        if total > limits.max_attachment_bytes:
            raise _Reject(
                f"too large: attachments total {_size(total)} > limit "
                f"{_size(limits.max_attachment_bytes)}"
            )
        self._checked(footer, "the footer")
        merged = {**self._header_wire, **updates}
        header = Header.from_wire(merged)

        start = self._end
        got = self._next_object("checksum")
        if got is _EOF:
            raise _Reject("truncated: no checksum after footer")
        digest, _ = got
        if not isinstance(digest, bytes) or len(digest) != 32 or self._end - start != 34:
            raise _Reject("corrupt: expected a 32-byte sha256 checksum after the footer")
        try:
            after = self._next_object("data after the checksum")
        except _Reject:
            after = None
        if after is not _EOF:
            raise _Reject("corrupt: data after the checksum")
        if self._src.hash.digest() != digest:
            raise _Reject("corrupt: checksum mismatch")
        self._final_header = header
        self._attachments = attachments
        self.close()

    def _open(self) -> IO[bytes]:
        # Opened without blocking, then checked: opening a FIFO (or a symlink to one) for
        # reading blocks until a writer comes, which would hang every reader on a file named
        # x.cassette. With O_NONBLOCK the open returns at once, and fstat of the open file
        # (not a stat of the path before: the path could change in between) refuses it.
        fd = os.open(self.path, os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Reject(f"cannot read: not a regular file ({_file_type(st.st_mode)})")
            if _O_NONBLOCK:
                os.set_blocking(fd, True)
            f = os.fdopen(fd, "rb", buffering=0)
        except BaseException:
            os.close(fd)
            raise
        try:
            st = os.fstat(f.fileno())
            if st.st_size > self.limits.max_file_bytes:
                raise _Reject(
                    f"too large: file is {_size(st.st_size)} > limit "
                    f"{_size(self.limits.max_file_bytes)}"
                )
        except BaseException:
            f.close()
            raise
        return f

    def _precheck_checksum(self) -> None:
        """Verify the checksum before decoding any event, so that a damaged file is
        reported as "checksum mismatch" rather than as whatever nonsense the damage decodes
        to, and no event of a damaged file is ever yielded. Runs after the header is read,
        so a newer format version is reported as such. Skipped when the file does not end
        in something shaped like a trailer: the decoder then says what is missing (usually
        "truncated"). The streaming hash still re-checks at the end, in case the file
        changes while it is read."""
        assert self._file is not None
        if not hasattr(os, "pread"):
            return
        fd = self._file.fileno()
        size = os.fstat(fd).st_size
        if size < _TRAILER_LEN or size > self.limits.max_file_bytes:
            return
        body = size - _TRAILER_LEN
        trailer = os.pread(fd, _TRAILER_LEN, body)
        if len(trailer) != _TRAILER_LEN or not trailer.startswith(_TRAILER_PREFIX):
            return
        h = hashlib.sha256()
        offset = 0
        while offset < body:
            chunk = os.pread(fd, min(_READ_SIZE, body - offset), offset)
            if not chunk:
                return  # shrank under us; the streaming pass will say how
            h.update(chunk)
            offset += len(chunk)
        if h.digest() != trailer[2:]:
            raise _Reject("corrupt: checksum mismatch")

    def _next_object(self, what: str | int) -> Any:
        """The next complete object and its encoded size, or ``_EOF`` at a clean end.
        ``what`` names the object in errors; an int ``n`` stands for "event n" (formatted
        only on error: this runs once per event)."""
        self._values = 0
        self._containers = 0
        # What this object may still decode to: its own bound, and what is left of the
        # cassette's (one comparison per container in the hooks).
        self._values_left = min(self.limits.max_values,
                                self.limits.max_total_values - self._total_values)
        try:
            obj = self._unpacker.unpack()
        except msgpack.OutOfData:
            if self._src.total > self._end:
                raise _Reject(
                    f"truncated: {_name(what)} is incomplete (file ends at byte {self._src.total})"
                ) from None
            return _EOF
        except msgpack.BufferFull:
            raise _Reject(
                f"too large: {_name(what)} at byte {self._end} is larger than any object allowed"
            ) from None
        except msgpack.StackError:
            raise _Reject(f"too deeply nested: {_name(what)} at byte {self._end}") from None
        self._total_values += self._values
        start, self._end = self._end, self._unpacker.tell()
        return obj, self._end - start

    # The decoder calls these hooks once per finished container. They bound the number
    # of decoded values, check map keys, and count containers: an object with at most
    # max_depth containers cannot nest deeper than that, which lets _checked() skip the
    # depth walk for nearly every event.

    def _count_list(self, obj: list[Any]) -> list[Any]:
        self._containers += 1
        self._values += len(obj) + 1
        if self._values > self._values_left:
            self._too_many_values()
        return obj

    def _count_map(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._containers += 1
        self._values += 2 * len(obj) + 1
        if self._values > self._values_left:
            self._too_many_values()
        if not _STR_ONLY.issuperset(map(type, obj)):
            bad = next(k for k in obj if type(k) is not str)
            raise _Reject(f"corrupt: a map key is {_kind_of(bad)}, not str")
        return obj

    def _too_many_values(self) -> None:
        limits = self.limits
        if self._values > limits.max_values:
            raise _Reject(f"too large: more than {limits.max_values} values in one object")
        raise _Reject(f"too large: more than {limits.max_total_values} values in the cassette "
                      "(a cassette of many tiny values takes far more memory than its size)")

    def _checked(self, obj: Any, what: str) -> None:
        """Depth check for a freshly decoded object (types and keys were checked while
        decoding)."""
        if self._containers > self.limits.max_depth:
            _walk(obj, self.limits, what, _Reject, decoded=True)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn every failure into a CassetteError (and release the file)."""
        try:
            yield
        except CassetteError:
            self.close()
            raise
        except _Reject as e:
            self.close()
            raise CassetteError(self.path, str(e)) from None
        except ValueError as e:
            # Header.from_wire and the msgpack decoder (bad UTF-8, limits) raise ValueError.
            self.close()
            reason = str(e)
            if "exceeds max_ext_len" in reason:  # max_ext_len=0 is how ext types are refused
                reason = "corrupt: msgpack extension type (a cassette holds plain data only)"
            elif "exceeds max_" in reason:  # msgpack refused a length prefix
                reason = f"too large: a length prefix claims {reason}"
            elif not reason.startswith(_REASONS):
                reason = f"corrupt: {reason}"
            raise CassetteError(self.path, reason) from None
        except OSError as e:
            self.close()
            raise CassetteError(self.path, f"cannot read: {e.strerror or e}") from None
        except MemoryError:
            self.close()
            raise CassetteError(self.path, "too large: out of memory while decoding") from None
        except Exception as e:  # a cassette is untrusted input: nothing else may escape
            self.close()
            raise CassetteError(self.path, f"corrupt: {type(e).__name__}: {e}") from None


_EOF: Any = object()
_REASONS = (
    "truncated",
    "corrupt",
    "too large",
    "too deeply nested",
    "not an acp-fuzz cassette",
    "unsupported format version",
    "cannot read",
)


def open_cassette(
    path: str | os.PathLike[str], *, limits: Limits = _DEFAULT_LIMITS
) -> CassetteReader:
    """Open a cassette for streaming; see :class:`CassetteReader`."""
    return CassetteReader(path, limits=limits)


def iter_events(
    path: str | os.PathLike[str], *, limits: Limits = _DEFAULT_LIMITS
) -> Iterator[Event]:
    """Yield a cassette's events one at a time, in bounded memory.

    The checksum is verified after the last event, so a corrupt file raises
    :class:`CassetteError` only at the end; see :class:`CassetteReader` (which also gives
    the header and attachments)."""
    with open_cassette(path, limits=limits) as reader:
        yield from reader


def read_cassette(path: str | os.PathLike[str], *, limits: Limits = _DEFAULT_LIMITS) -> Cassette:
    """Read a whole cassette, verifying its structure and checksum.

    Raises :class:`CassetteError`, and nothing else, for any unreadable, truncated,
    corrupt, oversized or foreign file."""
    with open_cassette(path, limits=limits) as reader:
        events = list(reader)
        return Cassette(header=reader.final_header, events=events, attachments=reader.attachments)


# -- validation shared by the writer and the reader ----------------------------------------


def _check_header(obj: Mapping[str, Any]) -> None:
    Header.from_wire(obj)  # raises ValueError with a reason


def _check_event(obj: Mapping[str, Any], index: int, exc: type[Exception] = ValueError) -> None:
    seq = obj.get("seq")
    if not _is_int(seq) or seq != index:
        raise exc(f"corrupt: event {index} has seq {_show(seq)} (expected {index})")
    t = obj.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool):
        raise exc(f"corrupt: event {index} has t {_show(t)}, not a number")
    kind = obj.get("kind")
    if kind not in EVENT_KINDS:
        raise exc(f"corrupt: event {index} has unknown kind {_show(kind)}")
    data = obj.get("data")
    if not isinstance(data, dict):
        raise exc(f"corrupt: event {index} data is {_kind_of(data)}, not a map")
    fields = _DATA_FIELDS[kind]
    for key, value in data.items():
        check = fields.get(key)
        if check is not None and not check[0](value):
            raise exc(f"corrupt: event {index} ({kind}) field {key!r} {_is_not(value, check[1])}")


_SCALARS = (str, int, float, bytes, bool, type(None))


def _walk(
    obj: Any,
    limits: Limits,
    what: str,
    exc: type[Exception] = ValueError,
    *,
    decoded: bool = False,
) -> int:
    """Check, without recursion, that ``obj`` nests no more than ``limits.max_depth``
    containers deep, that map keys are ``str``, and (unless ``decoded``) that it holds only
    plain msgpack values. Values fresh from the reader's decoder need no type check: with
    extension types refused it can only produce plain values. Returns how many values the
    reader counts for ``obj`` (``Limits.max_total_values``): per list its length plus one,
    per map twice its length plus one.

    It goes level by level, so the per-node work stays in C-level comprehensions; this is
    the reader's hottest loop."""
    max_depth = limits.max_depth
    level: list[Any] = [obj] if type(obj) in _CONTAINERS else []
    if not decoded and not level and not isinstance(obj, _SCALARS):
        raise exc(f"corrupt: {what} holds a value of unsupported type {_kind_of(obj)}")
    depth = 1
    count = 0
    while level:
        if depth > max_depth:
            raise exc(f"too deeply nested: {what} nests deeper than {max_depth} levels")
        children: list[Any] = []
        for node in level:
            count += 2 * len(node) + 1 if isinstance(node, dict) else len(node) + 1
            if type(node) is dict:
                if not decoded and not _STR_ONLY.issuperset(map(type, node)):
                    bad = next(k for k in node if type(k) is not str)
                    raise exc(f"corrupt: {what} has a map key of type {_kind_of(bad)}")
                values: Iterable[Any] = node.values()
            else:
                values = node
            if decoded:
                children.extend([v for v in values if type(v) in _CONTAINERS])
                continue
            for v in values:
                if type(v) in _CONTAINERS or isinstance(v, dict | list | tuple):
                    children.append(v)
                elif not isinstance(v, _SCALARS):
                    raise exc(f"corrupt: {what} holds a value of unsupported type {_kind_of(v)}")
        level = children
        depth += 1
    return count


_CONTAINERS = frozenset({dict, list, tuple})
_STR_ONLY = frozenset({str})


_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def _check_size(n: int, limit: int, what: str, exc: type[Exception] = ValueError) -> None:
    if n > limit:
        raise exc(f"too large: {what} is {_size(n)} > limit {_size(limit)}")


def _check_bytes(total: int, limit: int, what: str, exc: type[Exception] = ValueError
                 ) -> None:
    if total > limit:
        raise exc(f"too large: with {what} the header and events take more than "
                  f"{_size(limit)}")


def _check_values(total: int, what: str) -> None:
    limit = _DEFAULT_LIMITS.max_total_values
    if total > limit:
        raise ValueError(f"too large: with {what} the cassette holds more than {limit} values")


def _refuse_ext(code: int, data: bytes) -> Any:
    raise _Reject(f"corrupt: msgpack extension type {code} (a cassette holds plain data only)")


def _field(obj: Mapping[str, Any], name: str, typ: type) -> Any:
    value = obj.get(name)
    if not isinstance(value, typ):
        raise ValueError(f"corrupt: header field {name!r} is {_kind_of(value)}, not {typ.__name__}")
    return value


def _name(what: str | int) -> str:
    return f"event {what}" if isinstance(what, int) else what


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _kind_of(x: object) -> str:
    return "nil" if x is None else type(x).__name__


def _show(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    for unit, scale in (("GiB", _GiB), ("MiB", _MiB), ("KiB", 1024)):
        if n >= scale:
            value = n / scale
            return (
                f"{value:.0f} {unit}"
                if math.isclose(value, round(value))
                else (f"{value:.1f} {unit}")
            )
    raise AssertionError("unreachable")


# -- what each kind's data holds -----------------------------------------------------------
#
# The fields acp-fuzz itself writes into an event's data (history.py documents them), with
# the type each must have when it is there. The reader refuses a cassette whose data says
# otherwise, so that every consumer (show, report, replay, the oracles) can trust them; the
# writer refuses them too. A field may be missing (consumers fall back to a default) and
# unknown keys are kept as they are. The values inside what the agent chose (an ACP message,
# a model request's body, an agent's error or stop reason) are free-form: any msgpack value,
# there as in a live run, and every consumer handles whatever it finds there.


def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _is_map(v: object) -> bool:
    return isinstance(v, dict)


def _is_bool(v: object) -> bool:
    return isinstance(v, bool)


def _is_int_or_nil(v: object) -> bool:
    return v is None or _is_int(v)


def _is_str_or_nil(v: object) -> bool:
    return v is None or isinstance(v, str)


def _is_str_list(v: object) -> bool:
    return isinstance(v, list | tuple) and all(isinstance(x, str) for x in v)


def _is_str_map(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


def _is_segments(v: object) -> bool:
    return isinstance(v, list | tuple) and all(
        isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("slot", "path", "text"))
        for s in v)


def _is_step_args(v: object) -> bool:
    # The step as data (steps.py): its op and its session handles name things everywhere.
    return isinstance(v, dict) and all(isinstance(v[k], str) for k in ("op", "session", "new")
                                       if k in v)


_STR = (_is_str, "str")
_INT = (_is_int, "an integer")
_BOOL = (_is_bool, "a bool")
_MAP = (_is_map, "a map")
_INT_OR_NIL = (_is_int_or_nil, "int or nil")
_DATA_FIELDS: dict[str, dict[str, tuple[Any, str]]] = {
    "acp": {"dir": _STR, "raw": _STR, "error": _STR, "size": _INT},
    "model": {"api": _STR, "method": _STR, "path": _STR,
              "headers": (_is_str_map, "a map of strings"),
              "segments": (_is_segments, "a list of {slot, path, text} string maps"),
              "session": (_is_str_or_nil, "str or nil"), "turn": _INT_OR_NIL,
              "side": _BOOL, "status": _INT, "reply_text": _STR, "upstream": _BOOL,
              "side_kind": (_is_str_or_nil, "str or nil"),
              "pressure": (_is_str_or_nil, "str or nil"),
              "fault": (_is_str_or_nil, "str or nil"), "held": (_is_str_or_nil, "str or nil")},
    "process": {"what": _STR, "pid": _INT_OR_NIL, "argv": (_is_str_list, "a list of strings"),
                "returncode": _INT_OR_NIL, "generation": _INT,
                "pgid": _INT, "signal": _INT_OR_NIL, "reason": _STR,
                "sandbox": _STR},
    "stderr": {"text": _STR, "generation": _INT, "truncated": _BOOL, "limit": _INT},
    "step": {"index": _INT, "name": _STR,
             "args": (_is_step_args, "a map whose op, session and new are strings"),
             "class": _MAP, "nonce": _STR, "turn": _INT},
    "verdict": {"step": _INT, "what": _STR, "sessions": (_is_str_list, "a list of strings")},
}

# The recorded findings (``meta["findings"]``, each one Finding.to_wire()) likewise.
_FINDING_FIELDS: dict[str, tuple[Any, str]] = {
    "oracle": _STR, "severity": _STR, "rule": _STR, "message": _STR, "step": _INT,
    "session": (_is_str_or_nil, "str or nil"), "evidence": _MAP,
}


def _check_findings(meta: Mapping[str, Any]) -> None:
    findings = meta.get("findings")
    if findings is None:
        return
    if not isinstance(findings, list | tuple):
        raise ValueError(f"corrupt: header meta 'findings' is {_kind_of(findings)}, not a list")
    for i, f in enumerate(findings):
        if not isinstance(f, dict):
            raise ValueError(f"corrupt: recorded finding {i} is {_kind_of(f)}, not a map")
        for key, (check, what) in _FINDING_FIELDS.items():
            if key in f and not check(f[key]):
                raise ValueError(f"corrupt: recorded finding {i} field {key!r} "
                                 f"{_is_not(f[key], what)}")


def _is_not(value: object, what: str) -> str:
    # "is str, not an integer"; for a list or map of the wrong content, "is not a list of...".
    if isinstance(value, list | tuple | dict) and what.startswith(("a list", "a map")):
        return f"is not {what}"
    return f"is {_kind_of(value)}, not {what}"
