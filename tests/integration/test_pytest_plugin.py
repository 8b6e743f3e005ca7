"""The pytest plugin runs a campaign as an ordinary test item (in a child pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _pytest(tmp_path: Path, agent: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # An empty test folder: the only item is the one the plugin adds.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path), "--acp-agent", agent,
         "--acp-max-examples", "15", "--acp-cassette-dir", str(tmp_path / "found"), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1"})


@pytest.mark.slow
def test_campaign_item_fails_on_a_planted_bug(tmp_path: Path) -> None:
    agent = f"{sys.executable} -m acp_fuzz.reference_agent --bug accept-unknown-mode"
    proc = _pytest(tmp_path, agent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "payload.invalid-accepted" in proc.stdout
    assert "acp-fuzz replay" in proc.stdout
    assert list((tmp_path / "found").glob("*.cassette")), "the finding cassette is written"


@pytest.mark.slow  # campaign-sized (a whole campaign, 7 s): the long tier, which CI runs
def test_campaign_item_passes_on_the_correct_agent(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, f"{sys.executable} -m acp_fuzz.reference_agent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_acp_protocol_reaches_the_campaign_and_a_harness_error_is_one_line(
        tmp_path: Path) -> None:
    # --acp-protocol 2 against an agent that speaks only v1: the negotiation ends the item
    # with the CLI's one-line error, not a traceback into acp-fuzz.
    agent = f"{sys.executable} -m acp_fuzz.reference_agent --variant v1-only"
    proc = _pytest(tmp_path, agent, "--acp-protocol", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "acp-fuzz: error: the agent answered protocolVersion 1 to an offer of 2" \
        in proc.stdout
    assert "Traceback" not in proc.stdout and "runner.py" not in proc.stdout
    # The same agent under auto: v1, and a clean pass.
    proc = _pytest(tmp_path, agent, "--acp-protocol", "auto", "--acp-max-examples", "3")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


CORPUS = Path(__file__).resolve().parents[2] / "cassettes" / "reference"


def _corpus(tmp_path: Path) -> Path:
    """Two cassettes of one name in two folders (the leak: FAILED against --bug leak) and one
    other (the user-turn bug, which that agent does not have: FIXED)."""
    corpus = tmp_path / "corpus"
    for sub in ("a", "b"):
        (corpus / sub).mkdir(parents=True)
        (corpus / sub / "leak.cassette").write_bytes((CORPUS / "leak.cassette").read_bytes())
    (corpus / "user-turn.cassette").write_bytes((CORPUS / "user-turn.cassette").read_bytes())
    return corpus


def _replay(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "acp_fuzz", "-q", "-rA", "--rootdir",
         str(tmp_path), str(tmp_path / "tests"), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1"})


def test_cassette_ids_are_unique_and_lf_reruns_only_the_failed(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    (tmp_path / "tests").mkdir()
    agent = f"{sys.executable} -m acp_fuzz.reference_agent --bug leak"
    args = ("--acp-agent", agent, "--acp-max-examples", "0", "--acp-cassettes", str(corpus))
    first = _replay(tmp_path, *args)
    out = first.stdout
    assert first.returncode == 1, out + first.stderr
    assert "FAILED ::acp-fuzz-replay[a/leak.cassette]" in out
    assert "FAILED ::acp-fuzz-replay[b/leak.cassette]" in out
    assert "PASSED ::acp-fuzz-replay[user-turn.cassette]" in out
    again = _replay(tmp_path, *args, "--lf")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "2 failed" in again.stdout and "1 deselected" in again.stdout, again.stdout
    assert "user-turn.cassette" not in again.stdout.replace("deselected", "")


def test_options_can_live_in_the_ini_file_and_the_command_line_wins(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n"
        f"acp_agent = \"{sys.executable} -m acp_fuzz.reference_agent --bug leak\"\n"
        "acp_max_examples = \"0\"\n"
        f"acp_cassettes = \"{corpus / 'user-turn.cassette'}\"\n")
    proc = _replay(tmp_path, "-p", "no:cacheprovider")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED ::acp-fuzz-replay[user-turn.cassette]" in proc.stdout
    # The command line's --acp-cassettes replaces the ini file's.
    proc = _replay(tmp_path, "-p", "no:cacheprovider", "--acp-cassettes",
                   str(corpus / "a" / "leak.cassette"))
    assert proc.returncode == 1 and "FAILED ::acp-fuzz-replay[leak.cassette]" in proc.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n"
                                             "acp_max_examples = \"many\"\n")
    bad = _replay(tmp_path, "-p", "no:cacheprovider")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "--acp-max-examples: must be a whole number, not 'many'" in bad.stderr


def test_a_client_cassette_in_the_corpus_is_skipped_with_the_way_to_replay_it(
        tmp_path: Path) -> None:
    from acp_fuzz.core.cassette import Header, write_cassette
    from acp_fuzz.core.history import History

    corpus = _corpus(tmp_path)
    write_cassette(corpus / "client.cassette", Header(target=["client"], kind="client-finding"),
                   History())
    (tmp_path / "tests").mkdir()
    proc = _replay(tmp_path, "-p", "no:cacheprovider", "--acp-agent",
                   f"{sys.executable} -m acp_fuzz.reference_agent", "--acp-max-examples", "0",
                   "--acp-cassettes", str(corpus))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every leak FIXED, client skipped
    assert "3 passed, 1 skipped" in proc.stdout
    assert "SKIPPED" in proc.stdout and "replay --client CASSETTE" in proc.stdout


CLIENT = f"{sys.executable} -m acp_fuzz.reference_client"


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_a_client_campaign_and_its_cassette_run_as_tests(tmp_path: Path) -> None:
    """``--acp-client`` (#35): the client's campaign is an item that fails on a planted bug
    with the command's report; the cassette it wrote, in the corpus, is replayed against the
    client named (FAILED with the bug, FIXED without), and an agent cassette beside it is
    skipped: no agent was named."""
    (tmp_path / "tests").mkdir()
    bad = f"{CLIENT} --bug unadvertised-prompt"
    first = _replay(tmp_path, "-p", "no:cacheprovider", "--acp-client", bad,
                    "--acp-max-examples", "5", "--acp-cassette-dir", str(tmp_path / "found"))
    assert first.returncode == 1, first.stdout + first.stderr
    assert "FAILED ::acp-fuzz-client-campaign" in first.stdout
    assert "FAILED: client.prompt-unadvertised (MUST, SP-CLIENT-GATE-MUSTNOT)" in first.stdout
    (found,) = (tmp_path / "found").glob("*.cassette")
    (tmp_path / "found" / "leak.cassette").write_bytes((CORPUS / "leak.cassette").read_bytes())
    args = ("-p", "no:cacheprovider", "--acp-max-examples", "0", "--acp-cassettes",
            str(tmp_path / "found"))
    again = _replay(tmp_path, *args, "--acp-client", bad)
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"FAILED ::acp-fuzz-replay[{found.name}]" in again.stdout
    assert "SKIPPED" in again.stdout and "an agent cassette" in again.stdout
    fixed = _replay(tmp_path, *args, "--acp-client", CLIENT)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"PASSED ::acp-fuzz-replay[{found.name}]" in fixed.stdout


def test_a_bad_client_scenario_is_a_usage_error_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "bad.toml").write_text("command = 3\n")
    proc = _replay(tmp_path, "-p", "no:cacheprovider", "--acp-client-scenario",
                   str(tmp_path / "bad.toml"))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--acp-client-scenario:" in proc.stderr and "command must be" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
