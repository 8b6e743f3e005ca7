"""The CLI's manners: where it writes, and what its errors say."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from _support import run_cli
from hypothesis.database import InMemoryExampleDatabase

from acp_fuzz.engine.campaign.database import AgentScoped

pytestmark = pytest.mark.integration
HOSTILE = Path(__file__).resolve().parents[1] / "hostile_agents"


_cli = run_cli


def test_no_hypothesis_folder_in_the_users_directory(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "target", "--max-examples", "2", "--cassette-dir",
                str(tmp_path / "c"), "--", sys.executable, "-m", "acp_fuzz.reference_agent")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / ".hypothesis").exists()


def test_a_calibration_failure_says_what_happened(tmp_path: Path) -> None:
    # Answers initialize, then dies on the first session/new: calibration cannot finish.
    agent = tmp_path / "dies_on_new.py"
    agent.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m['method'] == 'initialize':\n"
        "        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': "
        "{'protocolVersion': 1}}), flush=True)\n"
        "    else:\n"
        "        print('fatal: no sessions today', file=sys.stderr, flush=True)\n"
        "        sys.exit(3)\n")
    proc = _cli(tmp_path, "target", "--", sys.executable, str(agent))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "the agent exited" in lines[0] and "no sessions today" in lines[0]
    assert "None" not in lines[0]


def test_a_shared_database_keeps_each_agents_examples_apart() -> None:
    shared = InMemoryExampleDatabase()
    a, b = AgentScoped(shared, "agent-a@1|x"), AgentScoped(shared, "agent-b@1|x")
    a.save(b"k", b"from-a")
    assert list(a.fetch(b"k")) == [b"from-a"]
    assert list(b.fetch(b"k")) == []
    a.move(b"k", b"k2", b"from-a")
    assert list(a.fetch(b"k2")) == [b"from-a"] and list(a.fetch(b"k")) == []
    a.delete(b"k2", b"from-a")
    assert list(shared.fetch(a.prefix + b"k2")) == []


def test_your_own_build_runs_under_a_known_agents_profile(tmp_path: Path) -> None:
    # A maintainer's local build: it notes what the codex-acp profile gave it (CODEX_HOME,
    # the config.toml pointing at the gateway), then is the reference agent.
    seen = tmp_path / "seen.txt"
    build = tmp_path / "my_build.py"
    build.write_text(
        "import os, pathlib, runpy, sys\n"
        "home = os.environ['CODEX_HOME']\n"
        "config = pathlib.Path(home, 'config.toml').read_text()\n"
        "pathlib.Path(sys.argv[1]).write_text(home + '\\n' + config)\n"
        "sys.argv = ['reference_agent']\n"
        "runpy.run_module('acp_fuzz.reference_agent', run_name='__main__')\n")
    proc = _cli(tmp_path, "target", "--profile", "codex-acp", "--max-examples", "1",
                "--cassette-dir", str(tmp_path / "c"), "--", sys.executable, str(build),
                str(seen))
    assert proc.returncode == 0, proc.stderr
    home, config = seen.read_text().split("\n", 1)
    assert home.endswith("/.codex")
    assert 'model_provider = "fakellm"' in config and "127.0.0.1" in config


@pytest.mark.slow
def test_portable_cassettes_for_a_bug_report_hold_no_interpreter_path(tmp_path: Path) -> None:
    from acp_fuzz.core.cassette import read_cassette

    proc = _cli(tmp_path, "target", "-x", "--portable", "--cassette-dir", str(tmp_path / "c"),
                "--", sys.executable, "-m", "acp_fuzz.reference_agent",
                "--bug", "accept-unknown-mode")
    assert proc.returncode == 1, proc.stderr
    (cassette,) = (tmp_path / "c").glob("*.cassette")
    assert sys.executable.encode() not in cassette.read_bytes()
    assert read_cassette(cassette).header.target[:3] == ["python", "-m",
                                                         "acp_fuzz.reference_agent"]


def test_a_profile_with_a_missing_build_says_so(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "target", "--profile", "codex-acp", "--", "./no-such-build")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "acp-fuzz: error: agent not found: ./no-such-build"


# -- acp-fuzz agents install|status --------------------------------------------------------------

def test_agents_status_says_what_is_missing_and_fails(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "agents", "status", env={"ACP_FUZZ_AGENT_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["claude-agent-acp", "codex-acp", "gemini-cli",
                                               "hermes-agent", "pi-acp", "qwen-code"]
    assert all(ln.endswith("not installed") for ln in lines), lines


def test_profiles_lists_every_built_in_agent_with_its_registrys_pin(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "profiles", env={"ACP_FUZZ_AGENT_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 0, proc.stderr
    rows = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines()}
    assert sorted(rows) == ["claude-agent-acp", "codex-acp", "gemini-cli", "hermes-agent",
                            "pi-acp", "qwen-code", "reference", "reference-compacting"]
    # npm spells a pin name@version, pip name==version (with the extras pip installs).
    assert rows["hermes-agent"][1:4] == ["not", "installed", "hermes-agent[acp]==0.19.0"]
    assert rows["codex-acp"][1:4] == ["not", "installed", "@agentclientprotocol/codex-acp@2.6.0"]
    assert rows["reference"][1:4] == ["built", "in", "-"]


def test_agents_install_rejects_an_unknown_profile_in_one_line(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "agents", "install", "codex-acp", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "acp-fuzz: error: unknown agent profile 'nope'; known profiles: claude-agent-acp, "
        "codex-acp, gemini-cli, hermes-agent, pi-acp, qwen-code, reference, "
        "reference-compacting (or a profile file: --profile ./my-agent.toml)"]
    assert not (tmp_path / ".cache").exists()  # nothing was installed before the check


def test_agents_install_without_npm_is_a_one_line_error_per_agent(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _cli(tmp_path, "agents", "install", "codex-acp", "reference",
                env={"PATH": str(empty), "ACP_FUZZ_AGENT_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "acp-fuzz: error: cannot install @agentclientprotocol/codex-acp@2.6.0: 'npm' is not on "
        "PATH"]
    assert proc.stdout.strip() == "reference: nothing to install (its profile names no package)"


# -- --help --------------------------------------------------------------------------------------

def _commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    out: list[tuple[tuple[str, ...], object]] = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _commands(sub, (*path, name))
    return out


def test_no_help_page_shows_a_bool_metavar_and_shared_options_say_one_thing() -> None:
    from typer.main import get_command
    from typer.testing import CliRunner

    from acp_fuzz.cli import app

    commands = _commands(get_command(app))
    assert len(commands) >= 16, [p for p, _ in commands]
    runner = CliRunner()
    for path, _ in commands:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, path
    # target, replay, matrix, client and doctor declare their sandbox options once: one help
    # text each.
    helps: dict[str, set[object]] = {}
    where: dict[str, set[str]] = {}
    for path, command in commands:
        for param in getattr(command, "params", []):
            for opt in ("--sandbox-net", "--sandbox-fs"):
                if opt in param.opts:
                    helps.setdefault(opt, set()).add(param.help)
                    where.setdefault(opt, set()).add(path[-1])
    assert where == {opt: {"target", "replay", "matrix", "client", "doctor"}
                     for opt in ("--sandbox-net", "--sandbox-fs")}
    assert {opt: len(texts) for opt, texts in helps.items()} == {"--sandbox-net": 1,
                                                                 "--sandbox-fs": 1}


def test_shell_completion_is_on_and_its_options_show_no_bool(tmp_path: Path) -> None:
    """`acp-fuzz --install-completion` and --show-completion are typer's; their help has no
    `<bool>` (the test above reads every page), and the completion they install answers: the
    commands, a command's options, and the report group's own commands."""
    from typer.testing import CliRunner

    from acp_fuzz.cli import app

    shown = CliRunner().invoke(app, ["--help"]).output
    assert "--install-completion" in shown and "--show-completion" in shown
    for words, cword, expected in (("acp-fuzz ta", "1", "target"),
                                   ("acp-fuzz target --sha", "2", "--shard"),
                                   ("acp-fuzz report me", "2", "merge")):
        proc = run_cli(tmp_path, env={"_ACP_FUZZ_COMPLETE": "complete_bash",
                                      "COMP_WORDS": words, "COMP_CWORD": cword})
        assert proc.returncode == 0 and proc.stdout.split() == [expected], proc


def test_the_printed_replay_line_runs_the_agent_as_it_was_found(tmp_path: Path,
                                                               no_orphans: object) -> None:
    # `--profile reference -- CMD` runs CMD the profile's way: the replay line must name the
    # command too (it named the profile alone, whose own agent has no bug: FIXED), and the
    # sandbox the failure was found in.
    from acp_fuzz.engine.process.sandbox import bwrap_works
    from tests.security._isolation import missing

    if bwrap_works() is None:
        missing("bubblewrap", "`bwrap` is not installed or cannot create namespaces here")
    agent = [sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "leak"]
    proc = _cli(tmp_path, "target", "--sandbox-fs", "--profile", "reference", "-x",
                "--max-examples", "10", "--cassette-dir", "c", "--", *agent)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("replay:"))
    printed = shlex.split(line.split("replay:", 1)[1])
    assert printed[:5] == ["acp-fuzz", "replay", "--sandbox-fs", "--profile", "reference"]
    assert printed[-len(agent) - 1:] == ["--", *agent]
    again = _cli(tmp_path, *printed[1:])
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.startswith("FAILED"), again.stdout


def test_an_option_of_ours_after_the_double_dash_is_named_when_the_agent_exits(
        tmp_path: Path) -> None:
    # The `--` trap: `--max-examples 3` after `--` reaches the agent, which refuses it and
    # exits; the one error line says which option went astray and where it belongs.
    proc = _cli(tmp_path, "target", "--", sys.executable, "-m", "acp_fuzz.reference_agent",
                "--max-examples", "3", "--seed=1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "the agent exited" in lines[0]
    assert "--max-examples, --seed came after '--'" in lines[0]
    assert "put acp-fuzz's options before '--'" in lines[0]


def test_no_such_note_when_the_agent_runs(tmp_path: Path) -> None:
    # An agent may take options named like ours: while it runs, nothing is said of them.
    agent = tmp_path / "agent.py"
    agent.write_text("import sys, runpy\n"
                     "sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != '--strict']\n"
                     "runpy.run_module('acp_fuzz.reference_agent', run_name='__main__')\n")
    proc = _cli(tmp_path, "target", "--max-examples", "1", "--cassette-dir",
                str(tmp_path / "c"), "--", sys.executable, str(agent), "--strict")
    assert proc.returncode == 0, proc.stderr
    assert "came after '--'" not in proc.stderr + proc.stdout


# Campaign-sized (four campaigns, 15 s): the long tier, which CI runs.
@pytest.mark.slow
def test_oracle_selects_and_color_is_chosen(tmp_path: Path) -> None:
    agent = ["--", sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "leak"]
    # --oracle keeps only the named oracle's findings: the leak is no duplicate.
    proc = _cli(tmp_path, "target", "-n", "5", "--cassette-dir", str(tmp_path / "c"),
                "--oracle", "prompt.duplicated", *agent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prompt.leak" not in proc.stdout
    proc = _cli(tmp_path, "--color", "always", "target", "-n", "5", "--cassette-dir",
                str(tmp_path / "c"), "--oracle", "prompt.leak", *agent)
    assert proc.returncode == 1 and "prompt.leak" in proc.stdout
    assert "\x1b[" in proc.stdout  # a CI log that renders colour gets it, though not a tty
    proc = _cli(tmp_path, "target", "-n", "1", "--oracle", "no.such", *agent)
    assert proc.returncode == 2 and "--oracle: unknown oracle 'no.such'" in proc.stderr
    proc = _cli(tmp_path, "--color", "never", "target", "-n", "5", "--cassette-dir",
                str(tmp_path / "c"), *agent, env={"FORCE_COLOR": "1"})
    assert proc.returncode == 1 and "\x1b[" not in proc.stdout
    # NO_COLOR (no-color.org): under the default --color auto, no colour even where colour
    # is forced, though bold text may stay.
    proc = _cli(tmp_path, "target", "-n", "5", "--cassette-dir", str(tmp_path / "c"), *agent,
                env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    sgr = re.findall(r"\x1b\[([0-9;]*)m", proc.stdout)
    assert proc.returncode == 1 and sgr, proc.stdout[-2000:]  # styled, forced
    assert not [c for c in sgr if re.search(r"(^|;)(3[0-8]|9[0-7])(;|$)", c)], sgr


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_time_budget_stops_the_search_and_says_so(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "target", "-n", "100000", "--time-budget", "2", "--cassette-dir",
                str(tmp_path / "c"), "--report", f"json:{tmp_path / 'r.json'}", "--",
                sys.executable, "-m", "acp_fuzz.reference_agent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith("stopped at --time-budget 2 s"), last
    import json

    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["out_of_time"] is True and doc["examples_run"] < 100000
