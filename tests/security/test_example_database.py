"""The example database (``--db``) is the user's, but what is in it and what its URL holds must
not hurt them: a FIFO among the folder's files does not hang a campaign, and a Redis password
is never printed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ._hostile import run_acp_fuzz
from .test_hostile_outputs import _one_error_line

pytestmark = pytest.mark.integration

PASSWORD = "Pa55w0rd-not-for-logs"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: a connection is refused at once


@pytest.mark.parametrize("url", [
    "redis://user:{pw}@127.0.0.1:{port}/0",
    "redis://:{pw}@127.0.0.1:{port}/0",
    "redis://{pw}@127.0.0.1:{port}/0",
    "redis://127.0.0.1:{port}/0?password={pw}",
    "rediss://user:{pw}@[::1:{port}/0",
    "redis://user:{pw}@127.0.0.1:port/0",
])
def test_redis_password_is_not_printed(tmp_path: Path, url: str) -> None:
    spec = url.format(pw=PASSWORD, port=_closed_port())
    proc = run_acp_fuzz(tmp_path, "target", "--profile", "reference", "-n", "1",
                        "--cassette-dir", str(tmp_path / "c"), "--db", spec)
    line = _one_error_line(proc)
    assert PASSWORD not in proc.stderr + proc.stdout
    assert "<redacted>" in line and line.startswith("acp-fuzz: error: --db redis"), line


def test_shown_keeps_what_is_not_secret() -> None:
    from acp_fuzz.engine.campaign.database import shown

    assert shown("redis://alice:pw@db.example:6380/3") == "redis://alice:<redacted>@db.example:6380/3"
    assert shown("redis://db.example:6379/0") == "redis://db.example:6379/0"
    assert shown("./examples") == "./examples"


FETCH = """
import sys
from acp_fuzz.engine.campaign.database import open_database
db = open_database(sys.argv[1])
print(sorted(v.hex() for v in db.fetch(b"key")))
"""


def test_a_fifo_in_a_folder_database_is_skipped(tmp_path: Path) -> None:
    from acp_fuzz.engine.campaign.database import open_database

    folder = tmp_path / "db"
    db = open_database(str(folder))
    db.save(b"key", b"one")
    db.save(b"key", b"two")
    (key_dir,) = [p for p in folder.iterdir() if len(list(p.iterdir())) == 2]
    os.mkfifo(key_dir / "a-fifo")  # no writer: opening it for reading blocks
    os.symlink("/dev/zero", key_dir / "endless")
    with open(key_dir / "huge", "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: large to fstat, nothing on disk
    # In a child process: the old reader blocks in open() for good, which is this
    # test's failure (the timeout only ends it).
    proc = subprocess.run([sys.executable, "-c", FETCH, str(folder)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sorted([b"one".hex(), b"two".hex()]))
