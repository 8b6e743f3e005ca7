"""A check of the user's own, in a file outside the package (issue #24 §3): loaded with
``--plugin``, it finds a planted bug of the reference agent, the campaign shrinks and confirms
it and writes its cassette, ``replay --offline`` re-judges that cassette with the plugin (and
will not call it FIXED without), and worker processes load it too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support import run_cli

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.steps import steps_of

pytestmark = pytest.mark.integration

PY = sys.executable
REFERENCE = [PY, "-m", "acp_fuzz.reference_agent"]
CHECK = '''
from acp_fuzz import check


@check("myorg.prompt-in-user-turn", severity="SHOULD",
       rule="SP-AGENT-APPEND-PLACEMENT-SHOULD",
       summary="a client prompt's text reaches the model in a user turn")
def prompt_in_user_turn(ctx, event):
    if event.kind != "model":
        return
    x = ctx.exchange(event)
    if x.session is None or x.side:
        return
    ctx.judge()
    for text in x.texts("user"):
        for block in ctx.client_blocks(x.session):
            if block in text:
                ctx.report(f"session {x.session}: its prompt is in a user turn",
                           session=x.session, model_event=event.seq)
                return
'''
ORACLE = "myorg.prompt-in-user-turn"


def _plugin(tmp_path: Path) -> Path:
    path = tmp_path / "myorg_checks.py"
    path.write_text(CHECK, encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_plugin_check_finds_shrinks_records_and_replays(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path)
    # The built-in oracle that sees the same bug is excluded: only the user's check fails it
    # (a SHOULD check, so --strict: SHOULD findings fail the run there, as for a built-in).
    proc = run_cli(tmp_path, "target", "--strict", "--plugin", str(plugin), "--exclude-oracle",
                "prompt.misplaced", "-n", "30", "-x", "--cassette-dir", "found", "--",
                *REFERENCE, "--bug", "user-turn")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"SHOULD {ORACLE} [SP-AGENT-APPEND-PLACEMENT-SHOULD]" in proc.stdout
    (cassette,) = (tmp_path / "found").glob("*.cassette")
    assert cassette.name == f"{ORACLE}-seed0.cassette"
    c = read_cassette(cassette)
    assert [f["oracle"] for f in c.header.meta["findings"]
            if f["severity"] != "info"] == [ORACLE]
    assert c.header.meta["reproduced"] == c.header.meta["runs"] == 3  # confirmed
    # Shrunk to its minimum: a session with a prompt, and one turn.
    assert [s["op"] for s in steps_of(c.events)] == ["new", "prompt"]
    # replay --offline re-judges it with the plugin loaded...
    again = run_cli(tmp_path, "replay", "--offline", str(cassette),
                 env={"ACP_FUZZ_PLUGINS": str(plugin)})
    assert again.returncode == 1 and again.stdout.startswith("FAILED"), again.stdout
    # ... as with --plugin, which replay takes as target does ...
    again = run_cli(tmp_path, "replay", "--offline", "--plugin", str(plugin), str(cassette))
    assert again.returncode == 1 and again.stdout.startswith("FAILED"), again.stdout
    # ...and without it, will not say FIXED: the check that found it is not there.
    blind = run_cli(tmp_path, "replay", "--offline", str(cassette))
    assert blind.returncode == 2, blind.stdout + blind.stderr
    assert f"checks that are not loaded ({ORACLE})" in blind.stdout + blind.stderr


@pytest.mark.slow
def test_a_plugin_check_gives_nothing_on_a_correct_agent(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--strict", "--plugin", str(_plugin(tmp_path)), "-n", "15",
                "--cassette-dir", "found", "--", *REFERENCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ORACLE not in proc.stdout


@pytest.mark.slow
def test_worker_processes_load_the_plugin_too(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--strict", "--workers", "2", "-n", "30", "-x",
                "--exclude-oracle",
                "prompt.misplaced", "--cassette-dir", "found", "--", *REFERENCE, "--bug",
                "user-turn", env={"ACP_FUZZ_PLUGINS": str(_plugin(tmp_path))})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ORACLE in proc.stdout
    assert list((tmp_path / "found").glob(f"{ORACLE}-*.cassette"))


@pytest.mark.parametrize("how", ["missing", "raises", "entry-in-env"])
def test_a_plugin_that_cannot_load_is_one_line(tmp_path: Path, how: str) -> None:
    if how == "missing":
        args, env = ["target", "--plugin", str(tmp_path / "nope.py"), "--", *REFERENCE], {}
    elif how == "raises":
        bad = tmp_path / "bad.py"
        bad.write_text("raise RuntimeError('the plugin\\nis broken')\n", encoding="utf-8")
        args, env = ["target", "--plugin", str(bad), "--", *REFERENCE], {}
    else:
        args, env = ["show", "x.cassette"], {"ACP_FUZZ_PLUGINS": "no_such_module_xyz"}
    proc = run_cli(tmp_path, *args, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("acp-fuzz: error: plugin ")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


ALWAYS = '''
from acp_fuzz import check


@check("myorg.always", severity="MUST", rule="MYORG-HOUSE-RULE", summary="fails every turn")
def always(ctx, event):
    if event.kind == "model":
        ctx.judge()
        ctx.report("a house rule that every turn breaks", model_event=event.seq)
'''


@pytest.mark.slow
def test_the_pytest_plugin_loads_acp_plugin(tmp_path: Path) -> None:
    """``--acp-plugin``: a check that fails every turn fails the campaign item of a correct
    agent, which passes without it."""
    plugin = tmp_path / "always.py"
    plugin.write_text(ALWAYS, encoding="utf-8")
    tests = tmp_path / "tests"
    tests.mkdir()

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider",
             "--rootdir", str(tests), str(tests), "--acp-agent", " ".join(REFERENCE),
             "--acp-max-examples", "3", *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ACP_REF_QUIET": "1",
                 "HOME": str(tmp_path)})

    with_it = run("--acp-plugin", str(plugin))
    assert with_it.returncode == 1, with_it.stdout + with_it.stderr
    assert "MUST   myorg.always [MYORG-HOUSE-RULE]" in with_it.stdout
    without = run()
    assert without.returncode == 0, without.stdout + without.stderr


# -- one plugin, checks of both sides (issue #35) ---------------------------------------------

CLIENT = [PY, "-m", "acp_fuzz.reference_client"]
BOTH = '''
from acp_fuzz import check


@check("myorg.agent-turn", severity="MUST", rule="MYORG-HOUSE-RULE",
       summary="fails every agent turn (a test)")
def agent_turn(ctx, event):
    if event.kind == "model":
        ctx.judge()
        ctx.report("a house rule that every turn breaks", model_event=event.seq)


@check("myorg.client-new", severity="MUST", rule="MYORG-CLIENT-RULE",
       summary="fails every session/new a client sends after initialize (a test)",
       direction="client")
def client_new(ctx, event):
    msg = event.data.get("msg") if event.kind == "acp" else None
    if event.data.get("dir") != "send" or not isinstance(msg, dict):
        return
    if msg.get("method") == "session/new" and ctx.initialize(event) is not None:
        ctx.judge()
        ctx.report(f"session/new on connection {ctx.connection(event)}", event=event.seq)
'''
AGENT_CHECK, CLIENT_CHECK = "myorg.agent-turn", "myorg.client-new"


def _judged(report: Path) -> dict[str, int]:
    """oracle -> the cases it judged, from a JSON report of ``target`` or ``client``."""
    return {row["oracle"]: row["checks"]
            for row in json.loads(report.read_text(encoding="utf-8"))["judged"]}


def test_one_plugin_judges_agents_and_clients_each_with_its_own_check(
        tmp_path: Path) -> None:
    """One file with an agent check and a client check: ``target`` runs the agent's only,
    ``client`` the client's only, ``replay`` (of either cassette) judges again with it, and
    will not say FIXED without it."""
    plugin = tmp_path / "both.py"
    plugin.write_text(BOTH, encoding="utf-8")
    agent = run_cli(tmp_path, "target", "--plugin", str(plugin), "-n", "3", "-x",
                    "--cassette-dir", "found", "--report", "json:agent.json", "--",
                    *REFERENCE)
    assert agent.returncode == 1, agent.stdout + agent.stderr
    assert f"MUST   {AGENT_CHECK} [MYORG-HOUSE-RULE]" in agent.stdout
    judged = _judged(tmp_path / "agent.json")
    assert judged[AGENT_CHECK] > 0 and CLIENT_CHECK not in judged
    (agent_cassette,) = (tmp_path / "found").glob(f"{AGENT_CHECK}-*.cassette")
    again = run_cli(tmp_path, "replay", "--offline", "--plugin", str(plugin),
                    str(agent_cassette))
    assert again.returncode == 1 and again.stdout.startswith("FAILED"), again.stdout

    client = run_cli(tmp_path, "client", "--plugin", str(plugin), "-n", "2", "-x",
                     "--cassette-dir", "cfound", "--report", "json:client.json", "--", *CLIENT)
    assert client.returncode == 1, client.stdout + client.stderr
    assert f"FAILED: {CLIENT_CHECK} (MUST, MYORG-CLIENT-RULE)" in client.stdout
    assert AGENT_CHECK not in client.stdout
    judged = _judged(tmp_path / "client.json")
    assert judged[CLIENT_CHECK] > 0 and AGENT_CHECK not in judged
    (client_cassette,) = (tmp_path / "cfound").glob(f"{CLIENT_CHECK}-*.cassette")
    replay = run_cli(tmp_path, "replay", "--client", "--plugin", str(plugin), "--runs", "1",
                     str(client_cassette), "--", *CLIENT)
    assert replay.returncode == 1 and replay.stdout.startswith("FAILED"), replay.stdout
    assert f"MUST {CLIENT_CHECK}: session/new on connection 0" in replay.stdout
    blind = run_cli(tmp_path, "replay", "--client", "--runs", "1", str(client_cassette), "--",
                    *CLIENT)
    assert blind.returncode == 2, blind.stdout + blind.stderr
    assert f"checks that are not loaded ({CLIENT_CHECK})" in blind.stderr
    # Without the plugin the same client passes: the finding was the plugin's.
    clean = run_cli(tmp_path, "client", "-n", "2", "--cassette-dir", "cfound2", "--", *CLIENT)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_the_pytest_plugin_loads_a_plugin_of_both_sides(tmp_path: Path) -> None:
    """``--acp-plugin`` with the same file: its agent check fails the campaign item."""
    plugin = tmp_path / "both.py"
    plugin.write_text(BOTH, encoding="utf-8")
    tests = tmp_path / "tests"
    tests.mkdir()
    proc = subprocess.run(
        [PY, "-m", "pytest", "-p", "acp_fuzz", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tests), str(tests), "--acp-agent", " ".join(REFERENCE), "--acp-max-examples", "2",
         "--acp-plugin", str(plugin)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ACP_REF_QUIET": "1",
             "HOME": str(tmp_path)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"MUST   {AGENT_CHECK} [MYORG-HOUSE-RULE]" in proc.stdout
    assert CLIENT_CHECK not in proc.stdout
