"""``acp-fuzz client`` end to end, as a user runs it: exit codes, the JSON and JUnit reports,
``--step`` and ``--scenario``, ``--replay``, and one-line errors for bad arguments (never a
traceback). The client is the reference client (``python -m acp_fuzz.reference_client``),
against the stand-in agent."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import History

pytestmark = pytest.mark.integration

CLIENT = [sys.executable, "-m", "acp_fuzz.reference_client"]
ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(proc: object, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)  # type: ignore[attr-defined]
    err = proc.stderr.strip()  # type: ignore[attr-defined]
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("acp-fuzz: error: ")
    for n in needles:
        assert n in lines[0], lines[0]


def test_a_correct_client_exits_0_with_a_passing_report(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "client", "-n", "4", "--report", f"json:{tmp_path}/r.json",
                   "--report", f"junit:{tmp_path}/r.xml", "--", *CLIENT)
    assert proc.returncode == 0, proc.stderr
    assert "no finding" in proc.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (doc["findings"], doc["exit_code"], doc["examples_run"]) == ([], 0, 4)
    assert doc["role"] == "client"
    assert doc["client_info"]["name"] == "acp-fuzz-reference-client"
    assert doc["stand_in"]["agentInfo"]["name"] == "acp-fuzz-stand-in"
    assert {j["oracle"] for j in doc["judged"]} >= {"client.prompt-unadvertised",
                                                    "client.before-initialize"}
    # One passing case per client rule checked, as an agent campaign's JUnit has.
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("failures") == "0" and suite.get("tests") == str(len(doc["judged"]))
    assert {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")} == {
        (f"acp-fuzz.{j['oracle']}", j["rule"]) for j in doc["judged"]}
    assert not (tmp_path / ".hypothesis").exists()


def test_client_cassettes_have_a_default_folder_of_their_own(tmp_path: Path) -> None:
    # target writes ./cassettes, which `replay cassettes/ -- AGENT` takes whole: a client
    # cassette there is one that no agent can replay.
    proc = run_cli(tmp_path, "client", "-n", "5", "--", *CLIENT, "--bug", "unadvertised-prompt")
    assert proc.returncode == 1, proc.stderr
    assert [p.parent.name for p in tmp_path.rglob("*.cassette")] == ["client-cassettes"]
    assert "client-cassettes/client." in proc.stdout


def test_a_must_finding_exits_1_with_its_report_and_cassette(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "client", "-n", "5", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{tmp_path}/r.json", "--report",
                   f"junit:{tmp_path}/r.xml", "--", *CLIENT, "--bug", "unadvertised-prompt")
    assert proc.returncode == 1, proc.stderr
    assert ("FAILED: client.prompt-unadvertised (MUST, SP-CLIENT-GATE-MUSTNOT), reproduced 3/3"
            in proc.stdout)
    assert "smallest capability set: v1: nothing advertised" in proc.stdout
    # The progress, from the events both directions share (acp_fuzz.core.events).
    assert "first example ran (v" in proc.stderr
    assert "found a failure (client.prompt-unadvertised) under v" in proc.stderr
    assert "shrunk to v1: nothing advertised; confirming" in proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    (f,) = doc["findings"]
    assert {"oracle", "severity", "rule", "message", "step", "session", "evidence", "status",
            "rate", "steps", "capabilities", "capability_set", "cassette"} <= set(f)
    assert (f["oracle"], f["severity"], f["rule"], f["status"], f["rate"]) == (
        "client.prompt-unadvertised", "MUST", "SP-CLIENT-GATE-MUSTNOT", "failed", "3/3")
    assert f["evidence"]["method"] == "session/new"
    assert f["capabilities"]["system_prompt"] is False
    assert doc["exit_code"] == 1
    cassette = Path(f["cassette"])
    assert cassette.is_file() and cassette.parent == tmp_path / "c"
    assert read_cassette(cassette).header.kind == "client-finding"
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("failures") == "1"
    (failed,) = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert (failed.get("classname"), failed.get("name")) == (
        "acp-fuzz.client.prompt-unadvertised", "SP-CLIENT-GATE-MUSTNOT")
    assert "capabilities: v1: nothing advertised" in failed.find("failure").text
    # The printed replay line runs it again: FAILED with the bug, FIXED without.
    line = next(x for x in proc.stdout.splitlines() if "replay:" in x)
    assert line.split("replay:")[1].split() == ["acp-fuzz", "replay", "--client", str(cassette),
                                                "--", *CLIENT, "--bug", "unadvertised-prompt"]
    assert read_cassette(cassette).header.meta["replay"] == line.split("replay:")[1].strip()
    replay = run_cli(tmp_path, "replay", "--client", str(cassette), "--", *CLIENT, "--bug",
                     "unadvertised-prompt")
    assert replay.returncode == 1, replay.stderr
    assert replay.stdout.startswith("FAILED ") and "(3/3)" in replay.stdout
    fixed = run_cli(tmp_path, "replay", "--client", str(cassette), "--", *CLIENT)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.startswith("FIXED ")
    # The older spelling runs the same replay.
    old = run_cli(tmp_path, "client", "--replay", str(cassette), "--", *CLIENT, "--bug",
                  "unadvertised-prompt")
    assert old.returncode == 1 and old.stdout == replay.stdout, old.stderr
    # Not an agent cassette: `acp-fuzz replay` without --client says to add it.
    _one_line_error(run_cli(tmp_path, "replay", str(cassette), "--", *CLIENT),
                    "is a client cassette", "acp-fuzz replay --client")


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_a_should_finding_fails_only_under_strict(tmp_path: Path) -> None:
    args = ["client", "-n", "4", "--cassette-dir", str(tmp_path / "c"), "--", *CLIENT,
            "--bug", "legacy-meta-only"]
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert "FAILED: client.legacy-meta-prompt (SHOULD" in proc.stdout
    strict = run_cli(tmp_path, *args[:1], "--strict", *args[1:])
    assert strict.returncode == 1, strict.stderr


@pytest.mark.slow  # campaign-sized (a client campaign, 9 s): the long tier, which CI runs
def test_steps_share_the_sessions_across_command_lines(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(tmp_path, "client", "-n", "5", "--strict", "--step", "new", "--step",
                   "prompt 'hello there'", "--cassette-dir", str(tmp_path / "c"), "--report",
                   f"json:{report}", "--", *CLIENT, "--bug", "no-resend")
    assert proc.returncode == 1, proc.stderr
    (f,) = json.loads(report.read_text())["findings"]
    assert f["oracle"] == "client.prompt-not-resent"
    assert (f["step"], f["evidence"]["connection"], f["steps"]) == (1, 1, 2)
    # Its replay needs the steps again; the printed line gives them.
    cassette = f["cassette"]
    line = next(x for x in proc.stdout.splitlines() if "replay:" in x)
    printed = shlex.split(line.split("replay:", 1)[1])
    assert printed == ["acp-fuzz", "replay", "--client", "--step", "new", "--step",
                       "prompt 'hello there'", cassette, "--", *CLIENT, "--bug", "no-resend"]
    missing = run_cli(tmp_path, "replay", "--client", cassette, "--", *CLIENT)
    _one_line_error(missing, "2 step(s)", "--step")
    # The printed line, run as printed.
    again = run_cli(tmp_path, *printed[1:])
    assert again.returncode == 1 and again.stdout.startswith("FAILED"), again.stderr


@pytest.mark.slow  # campaign-sized (a client campaign, 8 s): the long tier, which CI runs
def test_a_scenario_file_with_a_whole_command_line_per_step(tmp_path: Path) -> None:
    client = " ".join(CLIENT)
    (tmp_path / "s.toml").write_text(
        f'timeout = 30\n[[step]]\nrun = "{client} --bug no-resend new"\n'
        f'[[step]]\nargs = {json.dumps([*CLIENT, "--bug", "no-resend", "prompt", "hi"])}\n'
        'stdin = "ignored\\n"\n')
    proc = run_cli(tmp_path, "client", "-n", "5", "--strict", "--scenario", "s.toml",
                   "--cassette-dir", str(tmp_path / "c"))
    assert proc.returncode == 1, proc.stderr
    assert "client.prompt-not-resent" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if "replay:" in x)
    printed = shlex.split(line.split("replay:", 1)[1])
    assert printed[:5] == ["acp-fuzz", "replay", "--client", "--scenario", "s.toml"]
    again = run_cli(tmp_path, *printed[1:])
    assert again.returncode == 1 and again.stdout.startswith("FAILED"), again.stderr


def test_the_agent_placeholder_is_replaced(tmp_path: Path) -> None:
    # The client reads the agent from --agent only: ACP_FUZZ_AGENT is emptied first.
    proc = run_cli(tmp_path, "client", "-n", "2", "--", "env", "ACP_FUZZ_AGENT=", *CLIENT,
                   "--agent", "{agent}")
    assert proc.returncode == 0, proc.stderr


def test_an_interrupt_exits_130(tmp_path: Path) -> None:
    # The client, in a PID namespace of its own, cannot signal acp-fuzz: it says it started
    # on a FIFO, and the test sends the SIGINT. No sleep, no race: the next example's client
    # waits on the FIFO, which nobody reads any more, until acp-fuzz is interrupted.
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    cmd = f"echo started > {shlex.quote(str(fifo))}; exec {shlex.join(CLIENT)}"
    (tmp_path / "home").mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "ACP_REF_QUIET": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "acp_fuzz", "client", "-n", "3", "--",
                             "sh", "-c", cmd], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open(fifo, encoding="utf-8") as f:
            assert f.read() == "started\n"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr
    assert "interrupted" in stdout + stderr


@pytest.mark.parametrize("args, needles", [
    ([], ["no client given"]),
    (["--report", "xml:r", "--", *CLIENT],
     ["--report takes json:PATH, junit:PATH, html:PATH or markdown:PATH"]),
    (["--report", "json:/nonexistent/dir/r.json", "--", *CLIENT], ["folder does not exist"]),
    (["--step", "new", "--scenario", "s.toml", "--", *CLIENT], ["not both"]),
    (["--scenario", "missing.toml", "--", *CLIENT], ["cannot be read"]),
    (["--step", "'unclosed", "--", *CLIENT], ["--step", "quotation"]),
    (["--exclude-oracle", "prompt.leak", "--", *CLIENT], ["unknown client oracle"]),
    (["--trust-recorded-command", "--", *CLIENT], ["goes with --replay"]),
    (["--", "/nonexistent/client"], ["cannot start the client"]),
    (["-n", "2", "--", "true"], ["never started the agent", "{agent}"]),
    (["--replay", "missing.cassette", "--", *CLIENT], ["missing.cassette"]),
    # target's error for a database that cannot be used, and exit code
    (["--db", str(ROOT / "pyproject.toml"), "--", *CLIENT], ["exists and is not a folder"]),
    (["--db", "db", "--replay", "c.cassette", "--", *CLIENT], ["--db is for a search"]),
    (["--workers", "2", "--replay", "c.cassette", "--", *CLIENT],
     ["--workers is for a search"]),
])
def test_bad_arguments_are_one_line_errors(tmp_path: Path, args: list[str],
                                           needles: list[str]) -> None:
    _one_line_error(run_cli(tmp_path, "client", *args), *needles)


def test_a_bad_scenario_file_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text("[[step]]\nrun = 'a'\ncmd = 'b'\n")
    _one_line_error(run_cli(tmp_path, "client", "--scenario", "s.toml", "--", *CLIENT),
                    "s.toml: step 1: unknown key 'cmd'")


def _client_cassette(tmp_path: Path) -> Path:
    """A client cassette recording nothing failing: the reference client under v1."""
    return write_cassette(tmp_path / "c.cassette", Header(
        target=[*CLIENT], kind="client-finding",
        settings={"capabilities": {"protocol": 1},
                  "scenario": {"command": [*CLIENT], "steps": [{"args": []}]}}), History())


@pytest.mark.parametrize("replay", [["replay", "--client"], ["client", "--replay"]])
def test_replay_refuses_an_agent_cassette_and_a_missing_client(tmp_path: Path,
                                                               replay: list[str]) -> None:
    agent = write_cassette(tmp_path / "a.cassette", Header(target=["x"]), History())
    _one_line_error(run_cli(tmp_path, *replay, str(agent), "--", *CLIENT),
                    "not a client cassette", "without --client")
    client = _client_cassette(tmp_path)
    _one_line_error(run_cli(tmp_path, *replay, str(client)),
                    "no client given", "--trust-recorded-command")
    trusted = run_cli(tmp_path, *replay[:1], "--trust-recorded-command", *replay[1:],
                      str(client))
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout.startswith("FIXED")


@pytest.mark.parametrize("args, needles", [
    (["--client", "--profile", "reference"], ["--profile: not with --client"]),
    (["--client", "--offline", "--junit", "j.xml"], ["--offline, --junit: not with --client"]),
    (["--client", "--as-agent"], ["--as-agent: not with --client"]),
    (["--client", "--recorded-model-replies"], ["--recorded-model-replies: not with"]),
    (["--step", "new"], ["--step goes with --client"]),
    (["--pass-env", "HOME"], ["--pass-env goes with --client"]),
    ([], ["is a client cassette", "replay --client CASSETTE"]),
    (["--offline"], ["is a client cassette"]),
])
def test_replay_of_a_client_cassette_refuses_what_does_not_apply(
        tmp_path: Path, args: list[str], needles: list[str]) -> None:
    cassette = _client_cassette(tmp_path)
    command = [] if "--offline" in args else ["--", *CLIENT]
    _one_line_error(run_cli(tmp_path, "replay", *args, str(cassette), *command), *needles)


def test_a_client_cassette_in_a_folder_is_left_out_with_a_note(tmp_path: Path) -> None:
    # A folder that holds both kinds replays its agent cassettes; the client one, which no
    # agent can replay, is left out with one note that says how to replay it (it was an
    # ERROR, so `replay cassettes/ -- AGENT` exited 2 on a folder both commands wrote to).
    cassette = _client_cassette(tmp_path)
    agent_one = cassette.parent / "leak.cassette"
    agent_one.write_bytes((ROOT / "cassettes" / "reference" / "leak.cassette").read_bytes())
    proc = run_cli(tmp_path, "replay", "--offline", str(cassette.parent))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the leak, re-judged: FAILED
    assert cassette.name not in proc.stdout
    assert "FAILED" in next(x for x in proc.stdout.splitlines() if "leak.cassette" in x)
    assert "1 client cassette(s)" in proc.stderr and "replay --client FOLDER" in proc.stderr
    live = run_cli(tmp_path, "replay", str(cassette.parent), "--", sys.executable, "-m",
                   "acp_fuzz.reference_agent")
    assert live.returncode == 0, live.stdout + live.stderr  # the leak is FIXED there
    agent_one.unlink()
    _one_line_error(run_cli(tmp_path, "replay", "--offline", str(cassette.parent)),
                    "no agent cassettes under", "(1 client cassette(s): replay them with")


def test_replay_client_of_a_folder_replays_each_client_cassette(tmp_path: Path) -> None:
    # The other half of a folder both commands wrote to: --client replays its client
    # cassettes, each with its verdict, leaves the agent ones out with a note, and exits
    # with the worst verdict.
    found = run_cli(tmp_path, "client", "-n", "2", "--cassette-dir", "mixed", "--", *CLIENT,
                    "--bug", "unadvertised-prompt")
    assert found.returncode == 1, found.stdout + found.stderr
    folder = tmp_path / "mixed"
    (failing,) = folder.glob("*.cassette")
    _client_cassette(folder)
    (folder / "leak.cassette").write_bytes(
        (ROOT / "cassettes" / "reference" / "leak.cassette").read_bytes())
    proc = run_cli(tmp_path, "replay", "--client", "--runs", "1", str(folder), "--", *CLIENT,
                   "--bug", "unadvertised-prompt")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = {line.split()[1].rstrip(":"): line.split()[0]
                for line in proc.stdout.splitlines()
                if line.startswith(("FIXED", "FAILED", "FLAKY"))}
    # The buggy client fails under both recorded capability sets (v1, nothing advertised).
    assert verdicts == {str(failing): "FAILED", str(folder / "c.cassette"): "FAILED"}
    assert "1 file(s) under" in proc.stderr and "not client cassettes left out" in proc.stderr
    assert "without --client" in proc.stderr
    fixed = run_cli(tmp_path, "replay", "--client", "--runs", "1", str(folder), "--", *CLIENT)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    (tmp_path / "agents").mkdir()
    _one_line_error(run_cli(tmp_path, "replay", "--client", str(tmp_path / "agents"), "--",
                            *CLIENT), "no client cassettes under")


def test_portable_cassettes_name_no_path_of_this_machine(tmp_path: Path) -> None:
    """``--portable``, as ``target``'s: the interpreter recorded in the client command, the
    scenario, the steps and the stand-in's command line becomes ``python``, the sandbox
    ``<sandbox>``; without it they are this machine's paths (the control)."""
    if not sys.executable.endswith(("/bin/python", "/bin/python3")):
        pytest.skip(f"the interpreter {sys.executable} is not one --portable rewrites")
    args = ["-n", "2", "--", *CLIENT, "--bug", "unadvertised-prompt"]
    paths = {}
    for name, options in (("plain", []), ("portable", ["--portable"])):
        proc = run_cli(tmp_path, "client", "--cassette-dir", name, *options, *args)
        assert proc.returncode == 1, proc.stderr
        (cassette,) = (tmp_path / name).glob("*.cassette")
        c = read_cassette(cassette)
        blob = json.dumps([c.header.target, c.header.settings,
                           [e.data for e in c.events if e.kind in ("step", "process")]])
        paths[name] = (sys.executable in blob, "/acp-fuzz-" in blob)
        if name == "portable":
            assert c.header.target == ["python", *CLIENT[1:], "--bug", "unadvertised-prompt"]
            assert c.header.settings["scenario"]["command"] == c.header.target
            spawns = [e.data["argv"] for e in c.events if e.kind == "process"
                      and e.data.get("what") == "spawn" and e.data["role"] == "stand-in"]
            assert spawns and all(a[:3] == ["python", "-m", "acp_fuzz.engine.client.stand_in"]
                                  and a[3] == "<sandbox>/stand-in" for a in spawns)
    assert paths == {"plain": (True, True), "portable": (False, False)}
    _one_line_error(run_cli(tmp_path, "client", "--portable", "--replay", "x.cassette", "--",
                            *CLIENT), "--portable is for a search")


def test_db_keeps_a_drawn_failure_in_a_folder(tmp_path: Path) -> None:
    """``--db``, as ``target`` takes it: a failure the search drew is stored in the folder
    (tests/quality/test_client_bugs.py: the next run tries it first)."""
    assert "--db" in run_cli(tmp_path, "client", "--help").stdout
    proc = run_cli(tmp_path, "client", "-x", "--db", "db", "--", *CLIENT, "--mode", "override",
                   "--bug", "null-is-advertised")
    assert proc.returncode == 1, proc.stderr
    assert any(p.is_file() for p in (tmp_path / "db").rglob("*"))
