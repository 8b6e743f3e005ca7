"""What the harness, as the ACP client, answers to the agent's own requests (engine).

An agent asks its client for things: permission to run a tool (``session/request_permission``),
a file's text (``fs/read_text_file``), a write (``fs/write_text_file``), a terminal
(``terminal/*``). The agent, and the model behind it, are untrusted (a replayed cassette or a
real model may steer them), so the answers are the cautious ones, the same in ``target`` and
``replay``::

    policy = ClientPolicy([session_cwd])   # opens session_cwd now: make it before the agent
    agent = AgentProcess(argv, ..., client_handler=policy)   # the transport also tells the
                                                             # policy what it sends
    ...
    agent.close()
    policy.close()                         # closes the descriptor

``session/request_permission``
    Refused: the first option of kind ``reject_once`` is selected; with none, the outcome is
    ``cancelled``. After the harness sends ``session/cancel`` for a session, every permission
    request of that session is answered ``{"outcome": {"outcome": "cancelled"}}``
    (CANCEL-CLIENT-PERMISSION-MUST) until the harness sends that session its next
    ``session/prompt``. Nothing is ever approved. The fake model never asks for a tool, so a
    refusal costs the fuzzer nothing: a refusal is an answer, and the turn goes on. Approving
    would let a real model (``--model-upstream``) or a replayed cassette run commands as you;
    it would be defensible only inside a filesystem sandbox, and judging how an agent applies
    a system prompt never needs it.
``fs/read_text_file``
    Served only for an absolute path below one of the session directories, reached without
    any symbolic link below that directory (every component is opened with ``O_NOFOLLOW``, so
    a link swapped in after a check cannot redirect the read), naming a regular file (a FIFO,
    device or socket is refused without blocking). ``line`` (1-based) and ``limit`` (lines,
    ending at ``\\n``) are honoured while reading: the file is never read whole first. At most
    :data:`MAX_READ_BYTES` of text is answered and :data:`MAX_SCAN_BYTES` read to find it; past
    either the answer is an error that says so.
``fs/write_text_file``
    The same path rules; missing parent directories are created below the session
    directory; the target must be (or become) a regular file.
``terminal/*`` and anything else
    ``-32601`` (method not found): the harness advertises no terminal.

Each session directory is opened once, when the policy is made, and every path is walked
from that descriptor, never from the directory's name: an agent that renames the directory
(or a folder above it) and puts a link in its place still gets the files of the directory
the harness made, wherever it now is. :meth:`ClientPolicy.close` closes the descriptors (they
are closed when the policy is collected too); a directory that cannot be opened when the
policy is made is never served.

Errors: ``-32602`` for a path outside the session directories, through a link, a directory,
a special file, or bad ``line``/``limit``; ``-32002`` for a missing file; ``-32603`` for
other I/O errors and for reads past the caps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from acp_fuzz.engine.process.transport import RpcError

__all__ = ["MAX_READ_BYTES", "MAX_SCAN_BYTES", "ClientPolicy", "default_client_handler"]

#: The most text one ``fs/read_text_file`` answer carries (bytes, before decoding).
MAX_READ_BYTES = 1024 * 1024
#: The most bytes read from one file to answer one request (skipping to ``line`` included).
MAX_SCAN_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


class ClientPolicy:
    """The harness's answers to agent requests (see the module docs); a
    :data:`~acp_fuzz.engine.process.transport.ClientHandler` that also watches what the harness
    sends (:meth:`sent`), to answer ``cancelled`` after a ``session/cancel``.

    ``cwd_roots``: the session directories that ``fs/*`` requests may touch, opened here
    (make the policy before the agent starts); :meth:`close` it when the agent is gone."""

    def __init__(self, cwd_roots: Sequence[str], *, max_read_bytes: int = MAX_READ_BYTES,
                 max_scan_bytes: int = MAX_SCAN_BYTES) -> None:
        self._held: dict[str, int] = {}  # each spelling of a root -> its descriptor
        self._finalizer = weakref.finalize(self, _close_all, self._held)
        for r in cwd_roots:
            fd = _open_root(r)
            if fd is None:
                continue
            # Both spellings: the agent got the directory as given, which may sit under a
            # symlink (/tmp on some systems); the harness made it, so it is trusted.
            for form in (os.path.normpath(os.path.abspath(r)), os.path.realpath(r)):
                self._held.setdefault(form, fd)
            if fd not in self._held.values():  # both spellings were another root's
                os.close(fd)
        self.roots = tuple(self._held)
        self.max_read_bytes = max_read_bytes
        self.max_scan_bytes = max_scan_bytes
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def forget_sessions(self) -> None:
        """Forget which sessions were cancelled (for a new agent process on the same
        directories)."""
        with self._lock:
            self._cancelled.clear()

    def close(self) -> None:
        """Close the session directories' descriptors; ``fs/*`` requests are refused from
        then on. Safe to call more than once (and done when the policy is collected)."""
        with self._lock:
            self._finalizer()

    def __enter__(self) -> ClientPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the harness sends --------------------------------------------------------------

    def sent(self, method: str, params: Any) -> None:
        """Called by the transport for each request or notification it queues for the agent.
        A ``session/cancel`` marks its session cancelled; the session's next
        ``session/prompt`` clears the mark."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(sid, str):
            return
        with self._lock:
            if method == "session/cancel":
                self._cancelled.add(sid)
            elif method == "session/prompt":
                self._cancelled.discard(sid)

    # -- what the agent asks -----------------------------------------------------------------

    def __call__(self, method: str, params: Any) -> Any:
        if method == "session/request_permission":
            return self.permission(params)
        if method == "fs/read_text_file":
            return self.read_text_file(params)
        if method == "fs/write_text_file":
            return self.write_text_file(params)
        raise RpcError(-32601, "Method not found", {"method": method})

    def permission(self, params: Any) -> dict[str, Any]:
        """Refuse: ``cancelled`` after a cancel of the session, else ``reject_once``, else
        ``cancelled``."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        with self._lock:
            cancelled = isinstance(sid, str) and sid in self._cancelled
        options = params.get("options") if isinstance(params, dict) else None
        reject = next((o for o in options if isinstance(o, dict)
                       and o.get("kind") == "reject_once"), None) \
            if isinstance(options, list) else None
        if cancelled or reject is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": reject.get("optionId")}}

    def read_text_file(self, params: Any) -> dict[str, Any]:
        path = _path_of(params)
        line = _optional_int(params, "line", 1)
        limit = _optional_int(params, "limit", 0)
        flags = os.O_RDONLY | os.O_NONBLOCK  # a FIFO must not block the open
        with self._open(path, flags) as fd:
            data = self._read_lines(fd, path, (line or 1) - 1, limit)
        return {"content": data.decode("utf-8", errors="replace")}

    def write_text_file(self, params: Any) -> dict[str, Any]:
        path = _path_of(params)
        content = params.get("content")
        if not isinstance(content, str):
            raise RpcError(-32602, "Invalid params: content must be a string")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise RpcError(-32602, "Invalid params: content is not valid Unicode") from None
        # Truncated only once it is known to be a regular file of its own (see _open).
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        with self._open(path, flags, create_dirs=True) as fd:
            _io(path, os.ftruncate, fd, 0)
            view = memoryview(data)
            while view:
                view = view[_io(path, os.write, fd, view):]
        return {}

    # -- internals ---------------------------------------------------------------------------

    def _read_lines(self, fd: int, path: str, begin: int, limit: int | None) -> bytes:
        out = bytearray()
        lineno = taken = scanned = 0
        with os.fdopen(os.dup(fd), "rb", buffering=_CHUNK) as f:
            while limit is None or taken < limit:
                piece = _io(path, f.readline, _CHUNK)
                if not piece:
                    break
                scanned += len(piece)
                if scanned > self.max_scan_bytes:
                    raise RpcError(-32603, f"the file is read no further than "
                                           f"{self.max_scan_bytes} bytes", {"path": path})
                if lineno >= begin:
                    out += piece
                    if len(out) > self.max_read_bytes:
                        raise RpcError(-32603, f"the text asked for is over "
                                               f"{self.max_read_bytes} bytes; ask for fewer "
                                               "lines (line, limit)", {"path": path})
                if piece.endswith(b"\n"):
                    if lineno >= begin:
                        taken += 1
                    lineno += 1
        return bytes(out)

    @contextmanager
    def _open(self, path: str, flags: int, *, create_dirs: bool = False) -> Iterator[int]:
        """``path`` opened with ``flags``, walking down from its session directory's
        descriptor one component at a time without following any link; a regular file, or
        an error."""
        root, parts = self._inside(path)
        if not parts:
            raise RpcError(-32602, "Invalid params: path is a directory", {"path": path})
        fd = self._root_fd(root, path)
        try:
            for part in parts[:-1]:
                parent, fd = fd, -1
                fd = _step(parent, part, path, create_dirs)  # closes parent
            leaf = _io(path, os.open, parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                       dir_fd=fd)
        finally:
            if fd >= 0:
                os.close(fd)
        try:
            st = os.fstat(leaf)
            if not stat.S_ISREG(st.st_mode):
                raise RpcError(-32602, "Invalid params: not a regular file", {"path": path})
            if flags & os.O_WRONLY and st.st_nlink > 1:
                # A hard link may lead to a file outside the session directory.
                raise RpcError(-32602, "Invalid params: the file has other hard links",
                               {"path": path})
            # Blocking again for the actual I/O (O_NONBLOCK only kept the open from hanging).
            os.set_blocking(leaf, True)
            yield leaf
        finally:
            os.close(leaf)

    def _root_fd(self, root: str, path: str) -> int:
        """A descriptor of the directory ``root`` named when the policy was made, to walk
        from and close. Never opened by name again: the agent may have renamed the folder,
        or one above it, and put a link in its place since."""
        with self._lock:  # close() may run meanwhile: a dup stays valid after it
            held = self._held.get(root)
            if held is None:
                raise RpcError(-32603, "Internal error: the session directories are closed",
                               {"path": path})
            fd: int = _io(path, os.dup, held)
            return fd

    def _inside(self, path: str) -> tuple[str, list[str]]:
        """The root ``path`` lies under (lexically) and the components below it."""
        norm = os.path.normpath(path)
        for root in self.roots:
            if norm == root or norm.startswith(root.rstrip("/") + "/"):
                rel = os.path.relpath(norm, root)
                return root, [] if rel == "." else rel.split("/")
        raise RpcError(-32602, "Invalid params: path is outside the session directories",
                       {"path": path})


def default_client_handler(cwd_roots: Sequence[str]) -> ClientPolicy:
    """The client policy for fuzzing and replay runs: a :class:`ClientPolicy`."""
    return ClientPolicy(cwd_roots)


def _open_root(path: str) -> int | None:
    """A descriptor of the directory ``path`` (``None`` if it cannot be opened: requests
    below it are then refused as outside the session directories)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        # The resolved name, so that O_NOFOLLOW refuses a link put there since realpath.
        fd: int = os.open(os.path.realpath(path), flags)
    except OSError:
        return None
    return fd


def _close_all(held: dict[str, int]) -> None:
    for fd in set(held.values()):
        os.close(fd)
    held.clear()


def _path_of(params: Any) -> str:
    if not isinstance(params, dict):
        raise RpcError(-32602, "Invalid params: expected an object")
    path = params.get("path")
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        raise RpcError(-32602, "Invalid params: path must be an absolute path", {"path": path})
    return path


def _optional_int(params: dict[str, Any], name: str, minimum: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if type(value) is not int or value < minimum:
        raise RpcError(-32602, f"Invalid params: {name} must be an integer >= {minimum}",
                       {name: value})
    return value


def _step(parent: int, part: str, path: str, create: bool) -> int:
    """The directory ``part`` below the descriptor ``parent``, opened without following a
    link (made first if missing and ``create``). Always closes ``parent``."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd: int = os.open(part, flags, dir_fd=parent)
            return fd
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: opened just below
                os.mkdir(part, 0o777, dir_fd=parent)
            fd = os.open(part, flags, dir_fd=parent)
            return fd
    except OSError as exc:
        raise _error(exc, path) from None
    finally:
        os.close(parent)


def _io(path: str, call: Any, *args: Any, **kw: Any) -> Any:
    """``call(*args, **kw)`` with every ``OSError`` turned into the JSON-RPC error for it."""
    try:
        return call(*args, **kw)
    except OSError as exc:
        raise _error(exc, path) from None


def _error(exc: OSError, path: str) -> RpcError:
    if exc.errno == errno.ENOENT:
        return RpcError(-32002, "Resource not found", {"path": path})
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return RpcError(-32602, "Invalid params: the path goes through a symbolic link or "
                                "a non-directory", {"path": path})
    if exc.errno == errno.EISDIR:
        return RpcError(-32602, "Invalid params: path is a directory", {"path": path})
    if exc.errno in (errno.ENXIO, errno.ENODEV):
        return RpcError(-32602, "Invalid params: not a regular file", {"path": path})
    return RpcError(-32603, "Internal error", {"path": path, "reason": exc.strerror})
