"""``acp-fuzz doctor`` runs an agent as ``target`` does, so it must be confinable the same way:
``--sandbox-fs``, ``--sandbox-net`` and ``--pass-env``, and every other option of ``target``
that shapes a single turn."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import typer.main

from acp_fuzz.cli.app import app
from acp_fuzz.engine.process.sandbox import bwrap_works

from ._hostile import run_acp_fuzz
from ._isolation import missing

pytestmark = pytest.mark.integration

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- acp-fuzz-doctor-7e31"

#: ``target``'s options that belong to a campaign (many examples, files written), not to the
#: one turn doctor runs. A new option of ``target`` must be added to doctor or here.
CAMPAIGN_ONLY = {"--max-examples", "--seed", "--strict", "--max-steps", "--cassette-dir",
                 "--report", "--db", "--workers", "--model-upstream", "--max-failures",
                 "--exitfirst", "--exclude-oracle", "--keep-info", "--portable", "--plugin",
                 "--oracle", "--time-budget", "--no-cover", "--cover-only", "--shard"}


def _options(name: str) -> set[str]:
    importlib.import_module("acp_fuzz.cli.doctor")  # registers doctor and target

    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    return {o for p in command.params for o in p.opts if o.startswith("--")}


def test_doctor_takes_every_single_turn_option_of_target() -> None:
    turn = _options("target") - CAMPAIGN_ONLY - {"--help"}
    assert {"--sandbox-fs", "--sandbox-net", "--pass-env"} <= turn
    assert turn - _options("doctor") == set()


# An agent that leaves if it can read the key (printing it, so that a leak shows), and is the
# reference agent otherwise. The key's path goes in hex: the file-system sandbox shows the
# folder of a path it sees on the command line.
AGENT = """
import os, sys
path = bytes.fromhex(sys.argv[1]).decode()
try:
    text = open(path).read()
except OSError:
    os.execv(sys.executable, [sys.executable, "-m", "acp_fuzz.reference_agent"])
sys.stderr.write("read it: " + text + "\\n")
sys.exit(3)
"""


def _doctor(tmp_path: Path, *options: str) -> tuple[int, str]:
    home = tmp_path / "home"  # run_acp_fuzz's HOME: the user's, here
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text(SECRET)
    proc = run_acp_fuzz(tmp_path, "doctor", *options, "--", sys.executable, "-c", AGENT,
                        str(key).encode().hex())
    return proc.returncode, proc.stdout + proc.stderr


def test_doctor_under_sandbox_fs_cannot_read_home(tmp_path: Path, no_orphans: object) -> None:
    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    code, said = _doctor(tmp_path, "--sandbox-fs", "--sandbox-net")
    assert code == 0, said  # the key was not there, and the turn reached the fake model
    assert SECRET not in said and "read it" not in said
    # The control: unconfined, the same agent reads the key and leaves.
    code, said = _doctor(tmp_path)
    assert code != 0 and "read it" in said, said
