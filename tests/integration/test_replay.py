"""Replay, offline check, as-agent mode and the replay/report commands, end to end.

Finding cassettes are made the cheap way: the known minimal steps of a planted bug are run
once against the buggy reference agent and saved with
:func:`acp_fuzz.engine.campaign.search.save_finding`.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from acp_fuzz.cli.replay import replay_cmd
from acp_fuzz.cli.report import report_cmd
from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.history import Event
from acp_fuzz.core.oracles import Baseline
from acp_fuzz.engine.campaign.replay import (
    first_divergence,
    normalize_transcript,
    offline_check,
    replay_cassette,
    replay_dir,
)
from acp_fuzz.engine.campaign.runner import Run, TargetSpec
from acp_fuzz.engine.campaign.search import (
    CampaignSettings,
    FindingReport,
    requests_of,
    run_steps,
    save_finding,
    steps_of,
)

pytestmark = pytest.mark.integration

PY = sys.executable
REFERENCE = [PY, "-m", "acp_fuzz.reference_agent"]
LEAKY = [*REFERENCE, "--bug", "leak"]


def sp(mode: str, *texts: str) -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": t} for t in texts]}


LEAK_STEPS: list[dict[str, Any]] = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", "Always answer like a pirate.")},
    {"op": "new", "session": "B", "systemPrompt": sp("append", "Never mention the weather.")},
    {"op": "prompt", "session": "A"},
]
CLEAN_STEPS: list[dict[str, Any]] = [
    {"op": "new", "session": "A", "systemPrompt": sp("append", "Always answer like a pirate.")},
    {"op": "prompt", "session": "A"},
]


def record(directory: Path, argv: Sequence[str], steps: Sequence[dict[str, Any]],
           name: str | None = None) -> Path:
    """Run ``steps`` once on ``argv`` and save the run as a finding cassette."""
    spec = TargetSpec.from_command(list(argv))
    history, findings = run_steps(spec, steps, baseline=Baseline())
    report = FindingReport(status="failed" if findings else "passed", runs=1,
                           reproduced=1 if findings else 0, findings=findings,
                           steps=list(steps), requests=requests_of(history.events),
                           cassette=None)
    path = save_finding(spec, CampaignSettings(cassette_dir=directory), history.events, report,
                        Baseline(), None)
    if name is not None:
        path = path.rename(directory / name)
    return path


@pytest.fixture(scope="module")
def leak_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("leak"), LEAKY, LEAK_STEPS)


@pytest.fixture(scope="module")
def clean_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("clean"), REFERENCE, CLEAN_STEPS)


# -- the five verdicts ----------------------------------------------------------------------

def test_leak_cassette_fails_against_the_buggy_agent(leak_cassette: Path) -> None:
    result = replay_cassette(leak_cassette, target=LEAKY, runs=2)
    assert result.verdict == "FAILED", result.line()
    assert "prompt.leak" in result.oracles
    assert result.rate == "2/2"
    assert all(any(f.oracle == "prompt.leak" for f in run) for run in result.findings)
    # Same agent, same steps: nothing diverges once ids, paths and times are normalised.
    assert result.divergence is None


def test_leak_cassette_is_fixed_against_the_correct_agent(leak_cassette: Path) -> None:
    result = replay_cassette(leak_cassette, target=REFERENCE)
    assert result.verdict == "FIXED", result.line()
    assert result.rate == "0/1"
    assert result.ok
    # The model request of step 2 now carries A's own text instead of B's.
    d = result.divergence
    assert d is not None and d.step == 2
    assert d.recorded is not None and "Never mention the weather." in d.recorded
    assert d.new is not None and "Always answer like a pirate." in d.new
    assert "Never mention the weather." not in d.new


FLAKY_AGENT = """\
import sys
from pathlib import Path

from acp_fuzz.reference_agent.agent import main

counter = Path(sys.argv[1])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
# Every other process start has the leak.
sys.exit(main(["--bug", "leak"] if n % 2 == 0 else []))
"""


def test_a_bug_that_shows_every_other_start_is_flaky(leak_cassette: Path,
                                                     tmp_path: Path) -> None:
    script = tmp_path / "flaky_agent.py"
    script.write_text(FLAKY_AGENT)
    counter = tmp_path / "counter"
    result = replay_cassette(leak_cassette, target=[PY, str(script), str(counter)], runs=4)
    assert counter.read_text() == "4"
    assert result.verdict == "FLAKY", result.line()
    assert result.rate == "2/4"
    assert not result.ok


def test_a_target_that_does_not_exist_is_an_error(leak_cassette: Path, tmp_path: Path) -> None:
    result = replay_cassette(leak_cassette, target=[str(tmp_path / "no-such-agent")])
    assert result.verdict == "ERROR"
    assert result.error is not None and "no-such-agent" in result.error
    assert "\n" not in result.error


def test_an_agent_that_exits_at_start_is_an_error(leak_cassette: Path) -> None:
    result = replay_cassette(leak_cassette, target=[PY, "-c", "pass"])
    assert result.verdict == "ERROR"
    assert result.error is not None and "initialize" in result.error


def test_clean_cassette_passes_and_fails_when_a_bug_appears(clean_cassette: Path) -> None:
    assert read_cassette(clean_cassette).header.meta["findings"] == []
    passed = replay_cassette(clean_cassette, target=REFERENCE)
    assert passed.verdict == "PASSED", passed.line()
    assert passed.oracles == []
    # The same steps against an agent with the user-turn bug, which puts the prompt in the
    # user message: a new SHOULD failure.
    regressed = replay_cassette(clean_cassette, target=[*REFERENCE, "--bug", "user-turn"])
    assert regressed.verdict == "FAILED", regressed.line()
    assert "prompt.misplaced" in regressed.oracles


def test_unreadable_cassette_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cassette"
    bad.write_bytes(b"\x93not a cassette")
    for result in (replay_cassette(bad), offline_check(bad)):
        assert result.verdict == "ERROR"
        assert result.error is not None and "\n" not in result.error


# -- offline --------------------------------------------------------------------------------

def test_offline_check_reports_the_findings_of_the_live_run(leak_cassette: Path) -> None:
    cassette = read_cassette(leak_cassette)
    result = offline_check(leak_cassette)
    assert result.mode == "offline"
    assert result.verdict == "FAILED"
    recorded = cassette.header.meta["findings"]
    assert any(f["oracle"] == "prompt.leak" for f in recorded)
    assert [f.to_wire() for f in result.findings[0]] == recorded


def test_offline_check_of_a_clean_cassette_passes(clean_cassette: Path) -> None:
    assert offline_check(clean_cassette).verdict == "PASSED"


# -- determinism ----------------------------------------------------------------------------

def test_replay_is_deterministic(leak_cassette: Path) -> None:
    recorded = normalize_transcript(read_cassette(leak_cassette).events)
    result = replay_cassette(leak_cassette, target=LEAKY, runs=20)
    assert result.verdict == "FAILED" and result.rate == "20/20"
    assert len(result.transcripts) == 20
    for transcript in result.transcripts:
        assert transcript == recorded
    again = replay_cassette(leak_cassette, target=LEAKY)
    assert again.verdict == "FAILED" and again.transcripts[0] == recorded


def test_transcript_normalisation_hides_ids_paths_and_times() -> None:
    def run(sid: str, root: str, rid: int) -> list[Event]:
        return [
            Event(0, 0.0, "step", {"index": 0, "name": "new", "args": {"op": "new",
                                                                      "session": "A"}}),
            Event(1, 0.1, "acp", {"dir": "send", "msg": {
                "jsonrpc": "2.0", "id": rid, "method": "session/new",
                "params": {"cwd": f"{root}/work/A", "mcpServers": []}}}),
            Event(2, 0.2, "acp", {"dir": "recv", "msg": {
                "jsonrpc": "2.0", "method": "session/update",
                "params": {"sessionId": sid, "update": {"sessionUpdate": "x", "n": 1}}}}),
            Event(3, 0.3, "acp", {"dir": "recv", "msg": {
                "jsonrpc": "2.0", "method": "session/update",
                "params": {"sessionId": sid, "update": {"sessionUpdate": "x", "n": 2}}}}),
            Event(4, 0.4, "acp", {"dir": "recv", "msg": {
                "jsonrpc": "2.0", "id": rid,
                "result": {"sessionId": sid, "updatedAt": f"2026-01-0{rid}T00:00:00Z"}}}),
            Event(5, 0.5, "verdict", {"step": 0, "what": "reply", "outcome": "ok",
                                      "sessionId": sid}),
        ]

    a = run("sess-1", "/tmp/acp-fuzz-abcd1234", 2)
    b = run("other-id", "/var/tmp/acp-fuzz-zz_99xyz", 7)
    b[2], b[3] = b[3], b[2]  # notifications in the other order
    b = [Event(i, e.t, e.kind, e.data) for i, e in enumerate(b)]
    assert normalize_transcript(a) == normalize_transcript(b)
    assert first_divergence(normalize_transcript(a), normalize_transcript(b)) is None
    text = "\n".join(normalize_transcript(a)[1].ordered)
    assert "<sandbox>/work/A" in text and "<session A>" in text
    assert "sess-1" not in text and "acp-fuzz-abcd1234" not in text and "2026" not in text

    c = run("sess-1", "/tmp/acp-fuzz-abcd1234", 2)
    c[4] = Event(4, 0.4, "acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 2,
                                                       "error": {"code": -32602,
                                                                 "message": "no"}}})
    d = first_divergence(normalize_transcript(a), normalize_transcript(c))
    assert d is not None and d.step == 0
    assert d.recorded is not None and "result" in d.recorded
    assert d.new is not None and "-32602" in d.new


def test_replay_dir_replays_every_cassette(leak_cassette: Path, clean_cassette: Path,
                                           tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.cassette").write_bytes(leak_cassette.read_bytes())
    (folder / "sub" / "b.cassette").write_bytes(clean_cassette.read_bytes())
    (folder / "notes.txt").write_text("not a cassette")
    results = replay_dir(folder, offline=True)
    assert [(r.path.name, r.verdict) for r in results] == [("a.cassette", "FAILED"),
                                                           ("b.cassette", "PASSED")]


# -- as-agent -------------------------------------------------------------------------------

def drive_as_agent(cassette: Path, steps: Sequence[dict[str, Any]],
                   track: Callable[[int | None], None]) -> tuple[int | None, str]:
    """Drive ``acp-fuzz replay --as-agent`` with the project's own runner as the client;
    return its exit status and stderr."""
    spec = TargetSpec.from_command([PY, "-m", "acp_fuzz.engine.client.as_agent", str(cassette)])
    with Run(spec) as run:
        track(run.agent.pgid)
        run.initialize()
        for step in steps:
            assert run.execute(step).outcome == "ok"
        run.close()
    events = run.history.snapshot()
    exits = [e.data.get("returncode") for e in events
             if e.kind == "process" and e.data.get("what") == "exit"]
    stderr = "".join(e.data["text"] for e in events if e.kind == "stderr")
    return (exits[-1] if exits else None), stderr


def test_as_agent_accepts_a_client_that_follows_the_recording(
        leak_cassette: Path, no_orphans: Callable[[int | None], None]) -> None:
    code, stderr = drive_as_agent(leak_cassette, steps_of(read_cassette(leak_cassette).events),
                                  no_orphans)
    assert code == 0, stderr
    assert "OK" in stderr


def test_as_agent_reports_a_client_that_diverges(
        leak_cassette: Path, no_orphans: Callable[[int | None], None]) -> None:
    steps = [LEAK_STEPS[0], LEAK_STEPS[2]]  # B is never created
    code, stderr = drive_as_agent(leak_cassette, steps, no_orphans)
    assert code == 1
    assert "ORDER" in stderr and "session/new" in stderr


def test_as_agent_reports_override_the_agent_did_not_advertise(
        tmp_path: Path, no_orphans: Callable[[int | None], None]) -> None:
    steps = [{"op": "new", "session": "A",
              "systemPrompt": sp("override", "You are a terse release-notes writer.")},
             {"op": "prompt", "session": "A"}]
    original = read_cassette(record(tmp_path, REFERENCE, steps))
    # The same recording, as if the agent had advertised append only.
    events = []
    for e in original.events:
        msg = e.data.get("msg")
        if e.kind == "acp" and isinstance(msg, dict) and isinstance(msg.get("result"), dict) \
                and "agentCapabilities" in msg["result"]:
            caps = msg["result"]["agentCapabilities"]
            caps["sessionCapabilities"]["systemPrompt"] = {}
        events.append(e)
    append_only = tmp_path / "append-only.cassette"
    write_cassette(append_only, Header(target=original.header.target, kind="finding",
                                       meta=original.header.meta), events)
    code, stderr = drive_as_agent(append_only, steps, no_orphans)
    assert code == 1
    assert "SP-CLIENT-OVERRIDE-GATE-MUSTNOT" in stderr
    assert "ORDER" not in stderr

    # Empty content and a non-text block break two more client rules.
    bad = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": []}},
           {"op": "prompt", "session": "A"}]
    code, stderr = drive_as_agent(append_only, bad, no_orphans)
    assert code == 1 and "SP-CLIENT-CONTENT-EMPTY-MUSTNOT" in stderr


def test_as_agent_reports_system_prompt_to_an_agent_without_the_capability(
        leak_cassette: Path, tmp_path: Path, no_orphans: Callable[[int | None], None]) -> None:
    original = read_cassette(leak_cassette)
    events = []
    for e in original.events:
        msg = e.data.get("msg")
        if e.kind == "acp" and isinstance(msg, dict) and isinstance(msg.get("result"), dict) \
                and "agentCapabilities" in msg["result"]:
            del msg["result"]["agentCapabilities"]["sessionCapabilities"]["systemPrompt"]
        events.append(e)
    no_sp = tmp_path / "no-sp.cassette"
    write_cassette(no_sp, Header(target=original.header.target), events)
    image = {"op": "new", "session": "A", "systemPrompt": {
        "mode": "append", "content": [{"type": "image", "data": "", "mimeType": "image/png"}]}}
    code, stderr = drive_as_agent(no_sp, [image, *LEAK_STEPS[1:]], no_orphans)
    assert code == 1
    assert "SP-CLIENT-GATE-MUSTNOT" in stderr


# -- the commands ---------------------------------------------------------------------------

def cli() -> typer.Typer:
    """An app with the two commands registered the way ``acp_fuzz.cli`` registers them."""
    app = typer.Typer(add_completion=False)
    app.command("replay", context_settings={"allow_interspersed_args": False})(replay_cmd)
    app.command("report")(report_cmd)
    return app


def test_replay_command_lines_and_exit_codes(leak_cassette: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    failed = runner.invoke(cli(), ["replay", str(leak_cassette), "--", *LEAKY])
    assert failed.exit_code == 1, failed.output
    assert failed.output.startswith("FAILED")
    assert str(leak_cassette) in failed.output and "prompt.leak" in failed.output

    junit = tmp_path / "replay.xml"
    fixed = runner.invoke(cli(), ["replay", "--junit", str(junit), str(leak_cassette), "--",
                                  *REFERENCE])
    assert fixed.exit_code == 0, fixed.output
    assert fixed.output.startswith("FIXED")
    assert "first divergence at step 2" in fixed.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0"

    bad = tmp_path / "bad.cassette"
    bad.write_bytes(b"garbage")
    errored = runner.invoke(cli(), ["replay", str(bad), "--", *REFERENCE])
    assert errored.exit_code == 2
    assert "Traceback" not in errored.output
    assert len(errored.output.strip().splitlines()) == 1

    missing = runner.invoke(cli(), ["replay", str(tmp_path / "nope.cassette"), "--",
                                     *REFERENCE])
    assert missing.exit_code == 2 and "Traceback" not in missing.output


def test_replay_command_on_a_folder_with_junit(leak_cassette: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    folder.mkdir()
    (folder / "leak.cassette").write_bytes(leak_cassette.read_bytes())
    (folder / "zz-broken.cassette").write_bytes(b"garbage")
    junit = tmp_path / "out.xml"
    result = CliRunner().invoke(cli(), ["replay", "--offline", "--junit", str(junit),
                                        str(folder)])
    assert result.exit_code == 2  # an ERROR outranks a FAILED
    lines = result.output.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["FAILED", "ERROR"]
    root = ET.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 2
    assert cases[0].find("failure") is not None
    assert cases[1].find("error") is not None


def test_report_command(leak_cassette: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli(), ["report", str(leak_cassette)])
    assert shown.exit_code == 0, shown.output
    assert "prompt.leak" in shown.output
    assert f"acp-fuzz replay {leak_cassette} -- ./your-agent" in shown.output
    out = tmp_path / "report.md"
    written = runner.invoke(cli(), ["report", str(leak_cassette), "-o", str(out)])
    assert written.exit_code == 0
    assert out.read_text() == shown.output
    bad = tmp_path / "bad.cassette"
    bad.write_bytes(b"garbage")
    failed = runner.invoke(cli(), ["report", str(bad)])
    assert failed.exit_code == 2 and "Traceback" not in failed.output


def test_as_agent_command_answers_from_the_recording(leak_cassette: Path) -> None:
    init = ('{"jsonrpc":"2.0","id":"x-1","method":"initialize",'
            '"params":{"protocolVersion":1}}\n')
    result = CliRunner().invoke(cli(), ["replay", "--as-agent", str(leak_cassette)],
                                input=init)
    # One answer, with the client's id and the recorded agent's capabilities...
    first = result.stdout.splitlines()[0]
    assert '"id":"x-1"' in first and "acp-fuzz-reference-agent" in first
    # ...then the client stopped before the rest of the recording.
    assert result.exit_code == 1
    assert "ORDER" in result.stderr and "stopped before 3 recorded message(s)" in result.stderr
