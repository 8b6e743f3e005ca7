"""Where a campaign keeps its Hypothesis examples: ``--db FOLDER`` or ``--db redis://…``.

Off by default, so that a campaign is a pure function of its seed and agent. With a database,
the failing and interesting examples of one run are replayed first by the next run and by the
other workers that share it: a folder on one machine or on a shared file system, or a Redis
server for machines that share nothing else (``pip install 'acp-fuzz[redis]'``). See
``docs/scaling.md``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from acp_fuzz.core.errors import DatabaseError

__all__ = ["AgentScoped", "DatabaseError", "FolderDatabase", "check_database", "open_database",
           "shown"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis(spec: str) -> bool:
    return spec.startswith(_REDIS_SCHEMES)


def shown(spec: str) -> str:
    """``spec`` as acp-fuzz prints it: a Redis URL's password (``redis://user:PASSWORD@host``,
    or a bare ``redis://:PASSWORD@host``) and secret query parameters (``?password=``) become
    ``<redacted>``; a folder is shown as it is."""
    from acp_fuzz.core.scrub import REDACTED, redact_url

    if not is_redis(spec):
        return spec
    try:
        parts = urlsplit(spec)
    except ValueError:  # a bracket that is not an IPv6 host: show nothing of the URL
        return spec.partition("://")[0] + "://" + REDACTED
    userinfo, at, host = parts.netloc.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        # Without a colon, redis-py takes the one word as the password.
        userinfo = f"{user}:{REDACTED}" if colon else REDACTED
        parts = parts._replace(netloc=f"{userinfo}@{host}")
    return redact_url(urlunsplit(parts))


def _said(spec: str, e: BaseException) -> str:
    """An exception's text with the URL's password taken out, should redis-py quote it."""
    from acp_fuzz.core.scrub import REDACTED

    text = f"{type(e).__name__}: {e}"
    try:
        password = urlsplit(spec).password
    except ValueError:
        password = None
    return text.replace(password, REDACTED) if password else text


def check_database(spec: str) -> None:
    """Reject a database spec that cannot work before a campaign starts: a Redis URL without
    the ``redis`` package or with no server answering, or a folder path that is a file."""
    if is_redis(spec):
        client = _redis_client(spec)
        try:
            client.ping()
        except Exception as e:  # redis raises its own ConnectionError, TimeoutError, ...
            raise DatabaseError(f"--db {shown(spec)}: the Redis server does not answer "
                                f"({_said(spec, e)})") from None
        finally:
            client.close()
        return
    if Path(spec).exists() and not Path(spec).is_dir():
        raise DatabaseError(f"--db {spec}: exists and is not a folder")


def open_database(spec: str) -> ExampleDatabase:
    """The example database that ``spec`` names: a Redis URL (``redis://host:port/db``,
    ``rediss://`` for TLS, ``unix://`` for a socket) or a folder, created on first use."""
    if is_redis(spec):
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(_redis_client(spec))
    return FolderDatabase(spec)


class FolderDatabase(DirectoryBasedExampleDatabase):
    """Hypothesis' folder database, reading only what it could have written: regular files
    of at most :attr:`max_bytes` each. Anything else in a key's folder (a FIFO, a device, a
    socket, a symbolic link, a file too large) is skipped, so a file planted in a shared
    folder can neither hang the campaign nor fill its memory."""

    #: An example is a few kilobytes of choices; nothing Hypothesis writes comes near this.
    max_bytes = 4 * 1024 * 1024

    def fetch(self, key: bytes) -> Iterable[bytes]:
        folder = self._key_path(key)
        try:
            names = os.listdir(folder)
        except OSError:  # no such key yet (or the folder went away)
            return
        for name in names:
            value = self._read(os.path.join(folder, name))
            if value is not None:
                yield value

    def _read(self, path: str) -> bytes | None:
        # Opened without blocking and then checked with fstat (not a stat of the path
        # first, which could be swapped in between): opening a FIFO for reading blocks
        # until a writer comes.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
                         | getattr(os, "O_NOCTTY", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                return None
            data = bytearray()
            # At most one byte past the bound: a file that grew since fstat is skipped too.
            while len(data) <= self.max_bytes:
                chunk = os.read(fd, self.max_bytes + 1 - len(data))
                if not chunk:
                    return bytes(data)
                data += chunk
            return None
        except OSError:
            return None
        finally:
            os.close(fd)


class AgentScoped(ExampleDatabase):
    """An example database view whose keys are prefixed with a scope: an agent's identity
    (:func:`acp_fuzz.engine.campaign.search.agent_scope`), or a client's scenario
    (:func:`acp_fuzz.engine.client.campaign.client_scope`), so that one database serves
    many campaigns without one replaying another's examples."""

    def __init__(self, inner: ExampleDatabase, scope: str) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = hashlib.sha256(scope.encode()).digest()[:8]

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def _redis_client(spec: str) -> Any:  # redis is an optional extra: typed loosely
    try:
        import redis
    except ImportError:
        raise DatabaseError(f"--db {shown(spec)}: a Redis database needs the redis package "
                            "(pip install 'acp-fuzz[redis]')") from None
    try:
        return redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as e:
        raise DatabaseError(f"--db {shown(spec)}: {_said(spec, e)}") from None
