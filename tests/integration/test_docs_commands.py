"""Every runnable command of README.md and docs/*.md runs as written, against the reference agent
and client: a doc command that fails as written fails this test.

How the blocks are read, and what a command must do (its exit code, no traceback, what a
console block shows), is :mod:`tests._docblocks`. Each page's runnable blocks run in order in
one temporary folder (a command may use what one before it wrote, as a reader following the
page would), with ``bash``, and with these stand-ins for what the docs leave to you:

* ``./my-agent``, ``./my-agent-v2``, ``my-agent`` (on PATH), ``node dist/index.js``: your
  agent, here the reference agent (it takes ``--acp`` as agents like it do); ``npx NAME``
  runs ``NAME`` from PATH (npx itself would fetch from the network); ``my-client`` and
  ``./a-client-you-do-not-know``: your client, here the reference client;
* ``./my-agent.toml``: the reference profile; ``cassettes/x.cassette`` and
  ``cassettes/prompt.leak-seed0.cassette``: a leak cassette of the reference agent
  (docs/examples/leak.cassette); ``shard-1.json`` ... ``shard-3.json``: the reports of three
  shards; ``docs/examples/``: a copy of the repository's; ``$EDITOR``: ``true``; ``$WORKER``:
  ``0``; the folder is a git repository whose committed cassette has since changed;
* the budget: the folder's settings file (``acp-fuzz.toml``, a feature the docs describe)
  gives every campaign 2 examples, and a ``--max-examples N`` (``-n N``) written on the
  command line above 3 runs with 3. What this test checks is that each command runs as
  written, not how far a campaign searches: that is tests/quality's business.

Some commands run otherwise, each for the reason :data:`INSTEAD` gives: an install from the
network, a real third-party agent or client (the realagent tier runs those), a host or folder
that exists only on your machines (a local Redis and a folder here). The blocks no test runs
at all are :data:`tests._docblocks.NOT_RUN`, with their reasons."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._docblocks import ROOT, Block, Command, blocks, pages

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass(frozen=True)
class Skip:
    reason: str


REAL_AGENT = Skip("a real third-party agent (npm): the realagent tier runs the profiles")
#: Commands that run otherwise than written (by their text in the docs), and why.
INSTEAD: dict[str, str | Skip] = {
    # The install is scripts/check-release's (a clean venv from the built wheel, as CI runs
    # it); here acp-fuzz is installed already, and its commands are this venv's.
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/acp-fuzz target "
    "-- .venv/bin/acp-fuzz-reference-agent --bug leak":
        "acp-fuzz target -- acp-fuzz-reference-agent --bug leak",
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/python -m pytest":
        Skip("the quick test loop: this test is part of the test suite it runs"),
    "acp-fuzz target --profile codex-acp --sandbox-net # a known third-party agent (see "
    "`acp-fuzz profiles`)": REAL_AGENT,
    "acp-fuzz replay --profile codex-acp cassettes/real/codex-acp/   # against a known agent":
        REAL_AGENT,
    "acp-fuzz replay --junit replay.xml --profile codex-acp cassettes/    # or a known agent":
        REAL_AGENT,
    "acp-fuzz doctor --profile codex-acp --timeout 60 # a known agent": REAL_AGENT,
    "acp-fuzz client --step 'sessions new' --step 'prompt hi' -- acpx --agent '{agent}' "
    "--system-prompt 'Be terse.'":
        Skip("acpx, a third-party client from npm: tests/clients runs the clients"),
    'acp-fuzz client -- my-client --agent {agent} chat --once "hello"     # your client':
        Skip("a client of your own, with arguments of its own: the reference client's run of "
             "the same command is the line above"),
    # CASSETTE: the cassette the page's first block wrote.
    "acp-fuzz replay --client --step new --step 'prompt hi' CASSETTE -- my-client --agent "
    "{agent}":
        "acp-fuzz replay --client --step new --step 'prompt hi' "
        "client-cassettes/client.prompt-not-resent-seed0.cassette -- my-client --agent {agent}",
    # A folder every machine shares, and a Redis host: here a folder and a local redis-server.
    'acp-fuzz target --seed "$WORKER" --max-examples 500 --db /shared/acp-fuzz-db/my-agent-1.4 '
    '--cassette-dir "cassettes/worker-$WORKER" --report "json:report-$WORKER.json" -- ./my-agent':
        'acp-fuzz target --seed "$WORKER" --max-examples 500 --db shared/acp-fuzz-db/my-agent-1.4 '
        '--cassette-dir "cassettes/worker-$WORKER" --report "json:report-$WORKER.json" '
        '-- ./my-agent',
    'acp-fuzz target --seed "$WORKER" --max-examples 500 --db redis://fuzz-db.internal:6379/0 '
    '--cassette-dir "cassettes/worker-$WORKER" -- ./my-agent':
        'acp-fuzz target --seed "$WORKER" --max-examples 500 --db {redis}/0 '
        '--cassette-dir "cassettes/worker-$WORKER" -- ./my-agent',
}

_BUDGET = re.compile(r"(--max-examples|-n) (\d+)\b")
AGENT_SCRIPT = """#!/bin/sh
# Your agent: here the reference agent, which takes --acp as agents like it do.
for a; do shift; [ "$a" = --acp ] || set -- "$@" "$a"; done
exec acp-fuzz-reference-agent "$@"
"""
CLIENT_SCRIPT = "#!/bin/sh\n# Your client: here the reference client.\n" \
                'exec acp-fuzz-reference-client "$@"\n'
NODE_AGENT = """// Your agent, built: here the reference agent behind node.
const { spawn } = require("child_process");
const child = spawn("acp-fuzz-reference-agent", process.argv.slice(2), { stdio: "inherit" });
child.on("exit", (code) => process.exit(code === null ? 1 : code));
"""


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _shard_reports(folder: Path) -> None:
    """Three shards' JSON reports of one campaign (what `target --shard K/3` writes)."""
    import json

    from acp_fuzz.core.payloads import Capabilities
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings
    from acp_fuzz.reporting.campaign import result_to_json

    init = {"protocolVersion": 1, "agentInfo": {"name": "my-agent", "version": "1.4"}}
    for k in range(3):
        cfg = CampaignSettings(shard=(k, 3), cover_share=(k, 3))
        result = CampaignResult(agent={}, initialize=init, caps=Capabilities(), settings=cfg,
                                examples_run=100, steps_run=600)
        (folder / f"shard-{k + 1}.json").write_text(json.dumps(result_to_json(result)))


def _folder(tmp_path: Path, page: list[Block]) -> tuple[Path, dict[str, str]]:
    """The page's folder, with the stand-ins of the module docs, and the environment."""
    folder, home, bin_ = tmp_path / "work", tmp_path / "home", tmp_path / "bin"
    for d in (folder, home, bin_):
        d.mkdir()
    for where in (folder, bin_):
        _script(where / "my-agent", AGENT_SCRIPT)
        _script(where / "my-agent-v2", AGENT_SCRIPT)
        _script(where / "my-client", CLIENT_SCRIPT)
        _script(where / "a-client-you-do-not-know", CLIENT_SCRIPT)
    _script(bin_ / "npx", "#!/bin/sh\n# npx, offline: the command from PATH\nexec \"$@\"\n")
    (folder / "dist").mkdir()
    (folder / "dist" / "index.js").write_text(NODE_AGENT)
    from acp_fuzz.engine.agents.profiles import builtin_text

    (folder / "my-agent.toml").write_text(builtin_text("reference"))
    (folder / "acp-fuzz.toml").write_text("max-examples = 2\n")
    (folder / "pytest.ini").write_text("[pytest]\nacp_max_examples = 2\n")
    (folder / "cassettes").mkdir()
    for name in ("x.cassette", "prompt.leak-seed0.cassette"):
        shutil.copyfile(ROOT / "docs" / "examples" / "leak.cassette", folder / "cassettes" / name)
    shutil.copytree(ROOT / "docs" / "examples", folder / "docs" / "examples")
    _shard_reports(folder)
    for block in page:  # what the page tells you to save
        if block.marker and block.marker.startswith("file: "):
            (folder / block.marker.removeprefix("file: ")).write_text(block.body)
    env = {"PATH": os.pathsep.join([str(bin_), str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "/usr/bin:/bin")]),
           "HOME": str(home), "LANG": "C.UTF-8", "ACP_REF_QUIET": "1", "EDITOR": "true",
           "WORKER": "0", "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis"),
           "GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.invalid",
           "GIT_COMMITTER_NAME": "docs", "GIT_COMMITTER_EMAIL": "docs@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}
    for git in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the corpus"]):
        subprocess.run(["git", *git], cwd=folder, env=env, check=True, capture_output=True)
    shutil.copyfile(ROOT / "cassettes" / "reference" / "crash-on-image.cassette",
                    folder / "cassettes" / "x.cassette")  # changed since: git diff shows it
    return folder, env


def _shows(shows: tuple[str, ...], output: str) -> bool:
    """Whether ``output`` holds the lines a console block shows, in order: ``...`` is any
    lines (or, in a line, any text), and a number any number."""
    lines = output.splitlines()
    at = 0
    for shown in shows:
        if shown.strip() == "...":
            continue
        pattern = re.escape(shown).replace(r"\.\.\.", ".*")
        pattern = re.sub(r"\d+", r"\\d+", pattern)
        while at < len(lines) and not re.fullmatch(pattern, lines[at].strip()):
            at += 1
        if at == len(lines):
            return False
        at += 1
    return True


def _run(command: Command, folder: Path, env: dict[str, str],
         fill: Callable[[str], str]) -> str | None:
    """Run one command; what is wrong with how it ended, or None."""
    instead = INSTEAD.get(command.text, command.text)
    if isinstance(instead, Skip):
        return None
    text = _BUDGET.sub(lambda m: f"{m.group(1)} {min(int(m.group(2)), 3)}", fill(instead))
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    said = f"{text!r} exited {proc.returncode}:\n{output[-3000:]}"
    if "Traceback (most recent call last)" in output:
        return "a traceback: " + said
    if command.exit is not None and proc.returncode != command.exit:
        return f"expected exit {command.exit}: " + said
    if command.exit is None and proc.returncode not in (0, 1):
        return said
    if command.shows and not _shows(command.shows, output):
        return f"the output is not what the page shows ({command.shows}): " + said
    return None


def _runnable() -> dict[str, list[Block]]:
    """The pages with a runnable block, and all their blocks."""
    out = {str(p.relative_to(ROOT)): blocks(p) for p in pages()}
    return {p: bs for p, bs in out.items() if any(b.marker == "runnable" for b in bs)}


RUNNABLE = _runnable()


@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_every_runnable_command_of_the_page_runs_as_written(
        page: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    folder, env = _folder(tmp_path, RUNNABLE[page])
    redis = request.getfixturevalue("redis_url") if page == "docs/scaling.md" else ""
    failures = []
    for block in RUNNABLE[page]:
        if block.marker != "runnable":
            continue
        for command in block.commands:
            wrong = _run(command, folder, env, lambda t: t.replace("{redis}", redis))
            if wrong:
                failures.append(f"{page}:{block.line}: {wrong}")
    assert not failures, "\n\n".join(failures)


def test_every_instead_names_a_runnable_command() -> None:
    """No stale entry: each command :data:`INSTEAD` changes is in a runnable block."""
    runnable = {c.text for bs in RUNNABLE.values() for b in bs if b.marker == "runnable"
                for c in b.commands}
    assert set(INSTEAD) - runnable == set()
