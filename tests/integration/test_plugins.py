"""A check of the user's own, in a file outside the package (issue #24 §3): loaded with
``--plugin``, it finds a planted bug of the reference agent, the campaign shrinks and confirms
it and writes its cassette, ``replay --offline`` re-judges that cassette with the plugin (and
will not call it FIXED without), and worker processes load it too."""

from __future__ import annotations

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
