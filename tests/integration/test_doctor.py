"""``acp-fuzz doctor`` and the diagnosis after a calibration failure (issue #21 §2), end to
end: each diagnosis case has a tiny agent that behaves that way
(tests/hostile_agents/model_trouble.py MODE), run as a user runs acp-fuzz."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _support import run_cli

pytestmark = pytest.mark.integration

AGENT = Path(__file__).resolve().parents[1] / "hostile_agents" / "model_trouble.py"
EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "profiles" / "config-home.toml"
REFERENCE = (sys.executable, "-m", "acp_fuzz.reference_agent")


def _doctor(tmp_path: Path, *args: str) -> tuple[int, list[str], str]:
    proc = run_cli(tmp_path, "doctor", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def _trouble(*mode: str) -> tuple[str, ...]:
    return ("--", sys.executable, str(AGENT), *mode)


def test_an_agent_that_reaches_the_model_passes(tmp_path: Path, no_orphans: object) -> None:
    code, lines, stderr = _doctor(tmp_path, "--", *REFERENCE)
    assert code == 0, "\n".join(lines) + stderr
    assert lines[0] == "agent: acp-fuzz-reference-agent 0.1.0"
    assert any(line.startswith("  systemPrompt: {") for line in lines)
    assert "session/prompt: ok (stopReason end_turn)" in lines
    assert "  [1] POST /v1/chat/completions -> 200 (openai.chat): tied to session A turn 1" in lines
    assert any(line.startswith("  model requests: 1 tied to the turn, 0 side, 0 untied")
               for line in lines)
    assert lines[-1].startswith("ok: the turn reached the fake model")


def test_an_agent_that_never_calls_the_model(tmp_path: Path, no_orphans: object) -> None:
    code, lines, _ = _doctor(tmp_path, *_trouble("no-model"))
    assert code == 1
    text = "\n".join(lines)
    assert "the gateway saw no request at all" in text
    # The variables it was given, each value shown, the token as <token>.
    env = {line.strip().split("=", 1)[0]: line.strip().split("=", 1)[1]
           for line in lines if line.startswith("    ") and "=" in line}
    assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["OPENAI_BASE_URL"].endswith("/v1")
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == "<token>"
    assert "acpfuzz-token-" not in text
    assert "config file in HOME" in text and "docs/profiles.md" in text
    assert not any(line.startswith("ok:") for line in lines)


def test_an_agent_that_calls_without_the_token(tmp_path: Path, no_orphans: object) -> None:
    code, lines, _ = _doctor(tmp_path, *_trouble("no-token"))
    assert code == 1
    text = "\n".join(lines)
    assert "  [1] POST /v1/chat/completions -> 401 (openai.chat): refused: no token" in lines
    assert "1 request(s) did not carry the run's token" in text
    assert "Authorization: Bearer <token>" in text and "x-api-key" in text
    assert "OPENAI_API_KEY" in text and "never reached" not in text
    assert "sk-from-my-config" not in text  # the agent's own key is not echoed


def test_an_agent_that_calls_a_path_the_gateway_does_not_serve(
        tmp_path: Path, no_orphans: object) -> None:
    code, lines, _ = _doctor(tmp_path, *_trouble("bad-path"))
    assert code == 1
    assert "  [1] POST /api/generate -> 404 (unknown): not served" in lines
    assert "    POST /api/generate (404)" in lines
    assert any(line.startswith("  It serves OpenAI Chat Completions") for line in lines)


def test_an_agent_that_answers_the_turn_with_an_error(tmp_path: Path, no_orphans: object) -> None:
    proc = run_cli(tmp_path, "doctor", *_trouble("error"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # Its request was tied: what failed is the answer, shown escaped.
    assert "tied to session A turn 1" in proc.stdout
    assert "diagnosis: the agent answered session/prompt with an error" in proc.stdout
    assert "  The agent's error: -32603: model backend said no \\x1b[31mRED\\u202e" in \
        proc.stdout.splitlines()
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout


def test_an_agent_whose_requests_carry_no_nonce(tmp_path: Path, no_orphans: object) -> None:
    code, lines, _ = _doctor(tmp_path, *_trouble("untied"))
    assert code == 1
    assert "    1 untied: none carried the turn's nonce (acpfuzz-...) in its newest user " \
           "message" in lines


def test_doctor_runs_a_profile_file(tmp_path: Path, no_orphans: object) -> None:
    # The worked example of docs/profiles.md reaches the model through the file it writes ...
    code, lines, stderr = _doctor(tmp_path, "--profile", str(EXAMPLE))
    assert code == 0, "\n".join(lines) + stderr
    # ... and without that file, it never does: the "agent with a config file".
    text = EXAMPLE.read_text()
    bare = tmp_path / "bare.toml"
    bare.write_text(text.split("[[files]]")[0] + "[timeouts]" + text.split("[timeouts]")[1])
    code, lines, _ = _doctor(tmp_path, "--profile", str(bare))
    assert code == 1
    assert "  The agent never reached the fake model: the gateway saw no request at all." \
        in lines


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    code, lines, stderr = _doctor(tmp_path)
    assert code == 2 and stderr.startswith("acp-fuzz: error: no agent given") and not lines
    code, _, stderr = _doctor(tmp_path, "--protocol", "9", "--", *REFERENCE)
    assert code == 2 and "--protocol must be one of" in stderr
    code, _, stderr = _doctor(tmp_path, "--", "./no-such-agent")
    assert code == 2 and stderr.strip() == "acp-fuzz: error: agent not found: ./no-such-agent"


def test_a_calibration_failure_prints_the_diagnosis(tmp_path: Path, no_orphans: object) -> None:
    # The case: the agent reads its endpoint elsewhere, never calls the fake model,
    # and never answers the turn.
    proc = run_cli(tmp_path, "target", "--timeout", "1", "--cassette-dir", str(tmp_path / "c"),
                   *_trouble("no-model", "hang"))
    assert proc.returncode == 2
    # Still one error line on stderr; the diagnosis follows on stdout.
    assert proc.stderr.strip().splitlines() == [
        "acp-fuzz: error: calibration: the first prompt turn failed: no answer within 1s"]
    lines = proc.stdout.splitlines()
    assert "diagnosis: the agent did not answer session/prompt within 1s" in lines
    assert "  The agent never reached the fake model: the gateway saw no request at all." \
        in lines
    assert "    OPENAI_API_KEY=<token>" in lines
    assert any(line.startswith("    OPENAI_BASE_URL=http://127.0.0.1:") for line in lines)
    assert "acpfuzz-token-" not in proc.stdout


def test_a_calibration_failure_after_refused_requests(tmp_path: Path,
                                                      no_orphans: object) -> None:
    # It found a key of its own somewhere, not the run's token: 401, and it waits on.
    proc = run_cli(tmp_path, "target", "--timeout", "1", "--cassette-dir", str(tmp_path / "c"),
                   *_trouble("no-token", "hang"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  1 request(s) did not carry the run's token (answered 401 \"this request does " \
           "not carry the run's token\"):" in lines
    assert "    POST /v1/chat/completions" in lines
    assert "never reached" not in proc.stdout


def test_a_campaign_of_untied_requests_ends_with_a_warning(tmp_path: Path,
                                                          no_orphans: object) -> None:
    proc = run_cli(tmp_path, "target", "-n", "2", "--cassette-dir", str(tmp_path / "c"),
                   *_trouble("untied"))
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    (i,) = [i for i, line in enumerate(lines) if line.startswith("model requests: ")]
    assert lines[i].startswith("model requests: 0 turn (tied to a session, judged by every "
                               "oracle), 0 side, ")
    assert lines[i + 1].startswith("warning: ") and "(100%) were untied" in lines[i + 1]
    assert "docs/profiles.md" in lines[i + 2]
