"""The SDK clients under ``acp-fuzz client``: the verdicts reviewed in docs/findings.md.

Two small clients, ``tests/clients/ts-sdk/client.mjs`` on ``@agentclientprotocol/sdk`` 2.4.0
and ``tests/clients/py-sdk/client.py`` on ``agent-client-protocol`` 0.12.1, installed outside
git by ``python -m tests.clients.install`` (``.ci/run`` does). Each short campaign must give
what the review found ("2026-12-02: SDK clients" in docs/findings.md):

- both careful clients, in one command line and as a two-step scenario that reattaches, give no
  finding, and are judged on gating, shape and re-sending;
- the TS SDK sends whatever systemPrompt it is given (``--ungated``: MUST
  ``client.prompt-unadvertised`` at "nothing advertised", the script's fault, kept to show that
  the SDK neither strips nor refuses it);
- the Python SDK's typed lifecycle methods send a ``systemPrompt=`` keyword as
  ``_meta.systemPrompt`` (``--via kwargs``: SHOULD ``client.legacy-meta-prompt``), and its
  typed ``initialize`` answer hides the capability (``--via typed``: the prompt is never sent, so
  no prompt rule has a case);
- each kept cassette under ``cassettes/real/clients/{ts-sdk,py-sdk}/`` still replays FAILED.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clients import install

pytestmark = pytest.mark.realagent

ROOT = Path(__file__).resolve().parents[2]
CASSETTES = ROOT / "cassettes" / "real" / "clients"
#: The prompt rules a client that sends the standard field gets judged on.
PROMPT_ORACLES = {"client.prompt-unadvertised", "client.override-unadvertised",
                  "client.prompt-empty", "client.prompt-non-text", "client.prompt-malformed",
                  "client.legacy-meta-prompt"}
RESEND_ORACLES = {"client.prompt-not-resent", "client.prompt-changed"}


def _command(name: str) -> list[str]:
    cmd = install.command(name)
    if cmd is None:
        pytest.skip(f"the {name} client is not installed: python -m tests.clients.install")
    return cmd


def _campaign(tmp_path: Path, args: list[str], *, examples: int = 12) -> tuple[int, Any]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "client", "--seed", "0", "--max-examples",
         str(examples), "--cassette-dir", str(tmp_path / "c"), "--report", f"json:{report}",
         *args], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode in (0, 1), (
        f"exit {proc.returncode} (harness error?)\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.returncode, json.loads(report.read_text(encoding="utf-8"))


def _judged(data: Any) -> set[str]:
    return {j["oracle"] for j in data["judged"] if j["checks"] > 0}


def _found(data: Any) -> dict[str, str]:
    return {f["oracle"]: f["severity"] for f in data["findings"]}


SCENARIOS = {
    "one-line": ["hello"],
    "override": ["--override", "hello"],
}
STEPS = ["--step", "new hello", "--step", "reattach again"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("client", ["ts-sdk", "py-sdk"])
@pytest.mark.parametrize("scenario", ["one-line", "override", "steps"])
def test_careful_sdk_client_gives_no_finding(client: str, scenario: str,
                                             tmp_path: Path) -> None:
    cmd = _command(client)
    args = [*STEPS, "--", *cmd, "--override"] if scenario == "steps" \
        else ["--", *cmd, *SCENARIOS[scenario]]
    code, data = _campaign(tmp_path, args)
    assert (code, _found(data)) == (0, {}), data["findings"]
    assert data["client_info"]["name"] == f"acp-fuzz-{client}-client"
    judged = _judged(data)
    assert {"client.before-initialize", "client.capability-unadvertised"} <= judged
    assert judged >= PROMPT_ORACLES, judged
    assert judged >= RESEND_ORACLES, judged  # a reattach with the prompt was drawn and judged


@pytest.mark.timeout(900)
def test_ts_sdk_passes_an_ungated_system_prompt_through(tmp_path: Path) -> None:
    code, data = _campaign(tmp_path, ["--", *_command("ts-sdk"), "--ungated", "hello"])
    assert (code, _found(data)) == (1, {"client.prompt-unadvertised": "MUST"})
    (f,) = data["findings"]
    assert f["capabilities"]["system_prompt"] is False
    assert f["evidence"]["method"] == "session/new"
    assert f["status"] == "failed"


@pytest.mark.timeout(900)
def test_py_sdk_typed_kwargs_send_the_prompt_as_meta(tmp_path: Path) -> None:
    code, data = _campaign(tmp_path, ["--", *_command("py-sdk"), "--via", "kwargs", "hello"])
    assert (code, _found(data)) == (0, {"client.legacy-meta-prompt": "SHOULD"})
    (f,) = data["findings"]
    assert f["evidence"]["keys"] == ["systemPrompt"]
    assert f["capabilities"]["system_prompt"] is True
    assert f["status"] == "failed"
    # the standard field never goes out, so its shape rules have no case
    assert "client.override-unadvertised" not in _judged(data)


@pytest.mark.timeout(900)
def test_py_sdk_typed_api_never_sees_the_capability(tmp_path: Path) -> None:
    code, data = _campaign(tmp_path, ["--", *_command("py-sdk"), "--via", "typed", "hello"])
    assert (code, _found(data)) == (0, {})
    judged = _judged(data)
    assert "client.prompt-unadvertised" in judged  # lifecycle requests without the field
    assert not {"client.override-unadvertised", "client.prompt-empty"} & judged


#: Each kept cassette, the client it came from and the arguments it was recorded with.
KEPT = {
    "ts-sdk/client.prompt-unadvertised-seed0": ("ts-sdk", ["--ungated", "hello"]),
    "py-sdk/client.legacy-meta-prompt-seed0": ("py-sdk", ["--via", "kwargs", "hello"]),
}


def test_every_sdk_client_cassette_is_listed() -> None:
    kept = {f"{p.parent.name}/{p.stem}" for d in ("ts-sdk", "py-sdk")
            for p in (CASSETTES / d).glob("*.cassette")}
    assert kept == set(KEPT)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(KEPT))
def test_sdk_client_finding_still_fails_on_replay(name: str) -> None:
    client, args = KEPT[name]
    cmd = _command(client)
    proc = subprocess.run(
        [sys.executable, "-m", "acp_fuzz", "replay", "--client",
         str(CASSETTES / f"{name}.cassette"), "--", *cmd, *args],
        capture_output=True, text=True, timeout=550, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("FAILED "), proc.stdout[-2000:]
