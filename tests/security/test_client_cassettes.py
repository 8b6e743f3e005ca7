"""A client cassette is a stranger's data too: the step timeout it records is the one
``acp-fuzz replay --client`` (and ``client --replay``) waits for each step of the client,
when no ``--timeout`` is given. It used to be taken as it was, ``inf`` included: a step of a
client that never exits then held the replay for good. It is now at most
``MAX_RECORDED_TIMEOUT`` (600 s), and a timeout that is not a positive finite number of
seconds is a one-line error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import History
from acp_fuzz.engine.client.campaign import MAX_RECORDED_TIMEOUT, recorded_client
from tests.security._hostile import run_acp_fuzz

pytestmark = pytest.mark.integration

CLIENT = [sys.executable, "-m", "acp_fuzz.reference_client"]


def _cassette(tmp_path: Path, timeout: float) -> Path:
    """A client cassette of the reference client under v1, recording ``timeout``."""
    return write_cassette(tmp_path / "c.cassette", Header(
        target=[*CLIENT], kind="client-finding",
        settings={"capabilities": {"protocol": 1},
                  "scenario": {"command": [*CLIENT], "steps": [{"args": []}],
                               "timeout": timeout}}), History())


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1.0, 0.0])
@pytest.mark.parametrize("replay", [["replay", "--client"], ["client", "--replay"]])
def test_a_timeout_that_is_no_number_of_seconds_is_one_error_line(
        tmp_path: Path, timeout: float, replay: list[str]) -> None:
    cassette = _cassette(tmp_path, timeout)
    proc = run_acp_fuzz(tmp_path, *replay[:1], "--trust-recorded-command", *replay[1:],
                        str(cassette))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("acp-fuzz: error: the cassette's client settings are broken: "
                           "the step timeout must be"), line


def test_a_long_timeout_is_cut_to_the_bound(tmp_path: Path) -> None:
    _caps, scenario, _ = recorded_client(read_cassette(_cassette(tmp_path, 1e9)))
    assert scenario.timeout == MAX_RECORDED_TIMEOUT == 600.0
    _caps, scenario, _ = recorded_client(read_cassette(_cassette(tmp_path, 90.0)))
    assert scenario.timeout == 90.0


def test_the_clamped_cassette_still_replays(tmp_path: Path) -> None:
    proc = run_acp_fuzz(tmp_path, "replay", "--client", "--trust-recorded-command",
                        str(_cassette(tmp_path, 1e300)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("FIXED")
