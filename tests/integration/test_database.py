"""``--db``: a shared Hypothesis example database, in a folder or on a real Redis server.

What is shared must make a difference: a campaign that could not find the bug on its own
(another seed, one example) finds it at once from the database a first campaign filled.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from _support import free_port, run_cli
from hypothesis.database import DirectoryBasedExampleDatabase

from acp_fuzz.engine.campaign.database import DatabaseError, check_database, open_database

pytestmark = pytest.mark.integration

# A bug the search finds, so that a one-example campaign finds it only from the database.
# The campaigns run with --strict, so that a SHOULD finding would exit 1 too, and with
# --no-cover: what the database shares is what the search found (a covering example's
# failure is found again by the covering examples at every seed, and is not stored).
AGENT = ["--", sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "drop-last-block"]


_cli = run_cli


def _target(tmp_path: Path, name: str, db: str, *args: str) -> tuple[int, dict[str, object]]:
    report = tmp_path / f"{name}.json"
    proc = _cli(tmp_path, "target", "--db", db, "--cassette-dir", str(tmp_path / name),
                "--report", f"json:{report}", "--strict", "--no-cover", *args, *AGENT)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(report.read_text())


def _shares(tmp_path: Path, db: str, empty: str) -> None:
    # -x: the first failure only (a campaign goes on to other failures; the 1-example
    # campaigns below replay the first one the database holds).
    code, first = _target(tmp_path, "first", db, "--seed", "0", "-x")
    assert code == 1 and first["findings"], first
    # The same one-example campaign at another seed: nothing on its own (an empty database:
    # one drawn example), the failure at once from the database the first campaign filled.
    code, control = _target(tmp_path, "control", empty, "--seed", "99", "--max-examples", "1")
    assert (code, control["findings"]) == (0, []), control
    code, second = _target(tmp_path, "second", db, "--seed", "99", "--max-examples", "1")
    assert code == 1, second
    assert [f["oracle"] for f in second["findings"]] == \
        [f["oracle"] for f in first["findings"]]


@pytest.mark.slow
def test_a_folder_database_is_shared_between_campaigns(tmp_path: Path,
                                                       no_orphans: object) -> None:
    _shares(tmp_path, str(tmp_path / "db"), str(tmp_path / "empty-db"))


@pytest.mark.slow  # a real redis server and two campaigns: the long tier (the folder
# database's sharing, the same code path above it, stays in the quick loop)
def test_a_redis_database_is_shared_between_campaigns(tmp_path: Path, redis_url: str,
                                                      no_orphans: object) -> None:
    import redis

    _shares(tmp_path, f"{redis_url}/0", f"{redis_url}/1")
    client = redis.Redis.from_url(f"{redis_url}/0")
    try:
        assert client.dbsize() > 0  # the examples are on the server, not in a local folder
    finally:
        client.close()
    assert not (tmp_path / ".hypothesis").exists()


def test_a_redis_url_with_no_server_is_a_one_line_usage_error(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.raises(DatabaseError, match="does not answer"):
        check_database(url)
    proc = _cli(tmp_path, "target", "--db", url, *AGENT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not answer" in lines[0], proc.stderr


def test_bad_database_values_are_rejected(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(DatabaseError, match="not a folder"):
        check_database(str(a_file))
    with pytest.raises(DatabaseError, match=re.escape("redis://127.0.0.1:notaport")):
        check_database("redis://127.0.0.1:notaport/0")
    check_database(str(tmp_path / "new-db"))  # a folder that does not exist yet is fine
    # Hypothesis' folder database, reading only regular files (a FIFO there hung a campaign).
    db = open_database(str(tmp_path / "new-db"))
    assert isinstance(db, DirectoryBasedExampleDatabase) and type(db).__name__ == "FolderDatabase"
