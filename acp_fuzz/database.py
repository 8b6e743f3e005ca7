"""Where a campaign keeps its Hypothesis examples: ``--db FOLDER`` or ``--db redis://…``.

Off by default, so that a campaign is a pure function of its seed and agent. With a database,
the failing and interesting examples of one run are replayed first by the next run and by the
other workers that share it: a folder on one machine or on a shared file system, or a Redis
server for machines that share nothing else (``pip install 'acp-fuzz[redis]'``). See
``docs/scaling.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

__all__ = ["DatabaseError", "check_database", "open_database"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class DatabaseError(ValueError):
    """The ``--db`` value cannot be used (one line, for the user)."""


def is_redis(spec: str) -> bool:
    return spec.startswith(_REDIS_SCHEMES)


def check_database(spec: str) -> None:
    """Reject a database spec that cannot work before a campaign starts: a Redis URL without
    the ``redis`` package or with no server answering, or a folder path that is a file."""
    if is_redis(spec):
        client = _redis_client(spec)
        try:
            client.ping()
        except Exception as e:  # redis raises its own ConnectionError, TimeoutError, ...
            raise DatabaseError(f"--db {spec}: the Redis server does not answer "
                                f"({type(e).__name__}: {e})") from None
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
    return DirectoryBasedExampleDatabase(spec)


def _redis_client(spec: str) -> Any:  # redis is an optional extra: typed loosely
    try:
        import redis
    except ImportError:
        raise DatabaseError(f"--db {spec}: a Redis database needs the redis package "
                            "(pip install 'acp-fuzz[redis]')") from None
    try:
        return redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as e:
        raise DatabaseError(f"--db {spec}: {e}") from None
