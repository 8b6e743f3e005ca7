"""The one way acp-fuzz writes an output file at a name it is given (interface layer): a
report (``--report json:PATH``, ``--junit``, ``report --output``), the matrix's files.

:func:`write_atomic` writes to a new temporary file beside the name (a random name, created
with ``O_EXCL``, so nothing planted there is opened, not even a symlink), syncs it to disk,
and renames it onto the name. Readers see the old file or the new one, never half of one; a
symlink planted at the name is replaced, not written through (a rename replaces the link
itself), so ``r.json -> ~/.bashrc`` leaves ``~/.bashrc`` as it was. Cassettes are written
the same way by :class:`acp_fuzz.core.cassette.CassetteWriter`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from acp_fuzz.core.cassette import fsync_dir

__all__ = ["write_atomic"]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8) and return it. Raises
    ``OSError`` (``path`` is a folder, the disk is full, ...); on any failure the temporary
    file is removed and ``path`` is left as it was."""
    path = Path(path)
    # A lone surrogate (an agent's broken text) is written as its escape, \udc80, which in a
    # JSON string is what it was: the write never fails on the text.
    blob = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    while True:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            # 0o666: the file gets the permissions the umask gives any new file.
            fd = os.open(tmp, _FLAGS, 0o666)
        except FileExistsError:
            continue  # something is there already (planted or not): never open it
        break
    try:
        try:
            f = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path
