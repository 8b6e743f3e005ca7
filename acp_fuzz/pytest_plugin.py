"""pytest plugin: run an acp-fuzz campaign and a cassette corpus as ordinary tests.

Installed with acp-fuzz (entry point ``pytest11``); it does nothing unless asked::

    pytest --acp-agent "npx my-agent"                             # a bounded fuzz campaign
    pytest --acp-agent "npx my-agent" --acp-cassettes cassettes/  # + one test per cassette
    pytest --acp-agent "./agent" --acp-max-examples 0 --acp-cassettes cassettes/  # replay only
    pytest --acp-agent "./agent" --acp-max-examples 50 --acp-seed 1 --junitxml=acp.xml
    pytest --acp-profile ./my-agent.toml --acp-cassettes cassettes/  # an agent as a profile file
    pytest --acp-client "my-client --agent {agent}"                # a client's campaign
    pytest --acp-client "my-client --agent {agent}" --acp-cassettes client-cassettes/

The campaign runs with a CI profile: a fixed seed (derandomized: the same agent gives the same
run), a bounded number of examples, no example database. It fails on any MUST finding (and on
SHOULD findings with ``--acp-strict``), with the minimal reproduction and the cassette path in
the failure message. ``--acp-max-examples 0`` runs no campaign.

Each cassette is replayed against ``--acp-agent``, never against the command stored in the
cassette: a pull request that adds a ``.cassette`` file must not be able to run code in CI.
A client cassette (``acp-fuzz client``'s) is replayed against ``--acp-client`` the same way,
with the scenario of ``--acp-client-scenario`` when it recorded steps (a stranger's steps are
words appended to your client's command: never run unasked); ``--acp-client`` alone runs the
client's campaign as ``acp-fuzz client`` does (docs/clients.md).
Without ``--acp-agent`` the cassette tests are skipped, with that reason (see ``-rs``). They are
not checked offline instead: an offline check re-judges the recording, so every bug ever
recorded would fail it, fixed or not, and the run would say nothing about your agent.

``--acp-sandbox-net`` runs each campaign and replay in a network namespace with only loopback
(``acp-fuzz target|replay --sandbox-net``, in a child process, since pytest itself cannot move
into one). ``--acp-sandbox-fs`` runs each agent under the file-system sandbox
(``--sandbox-fs``: it sees its sandbox and the system folders, not your files).
``--acp-recorded-model-replies`` serves the model replies a cassette recorded from a
real model (``--model-upstream``) instead of the fake model's; see ``acp-fuzz replay --help``.

Every option is also an ini option, named with ``_`` (the command line wins)::

    [tool.pytest.ini_options]
    acp_agent = "node dist/index.js"
    acp_cassettes = "cassettes/"
    acp_max_examples = "50"

Each cassette test is named by its path under the corpus folder
(``acp-fuzz-replay[real/leak.cassette]``), so ids are unique and ``--lf`` reruns just the
cassettes that failed.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from acp_fuzz.core.scenarios import Scenario

__all__ = ["pytest_addoption", "pytest_collection_modifyitems"]

#: Why a client cassette (``acp-fuzz client``'s) in the corpus is skipped: no client is named.
CLIENT_CASSETTE = ("a client cassette (acp-fuzz client): no agent can replay it; name the client "
                   "with --acp-client, or replay it with `acp-fuzz replay --client CASSETTE -- "
                   "CLIENT-CMD`")
#: Why an agent cassette is skipped when only a client is named.
AGENT_CASSETTE = ("an agent cassette: no --acp-agent or --acp-profile given to replay it "
                  "against")

#: Why a cassette test is skipped when no agent is named.
NO_AGENT = ("no --acp-agent or --acp-profile given: acp-fuzz replays cassettes only against "
            "the agent you name, never the command a cassette records")


#: Every option: (flag, kind, default, metavar, help). Each is also an ini option of the
#: same name with ``_`` for ``-`` (``acp_agent = ...`` under ``[tool.pytest.ini_options]`` or
#: ``[pytest]``); the command line wins. ``kind``: ``str``, ``int``, ``bool`` (a flag) or
#: ``list`` (repeatable; the ini form is one value a line, added to the command line's).
OPTIONS: tuple[tuple[str, str, Any, str | None, str], ...] = (
    ("--acp-agent", "str", None, "CMD",
     "agent command to fuzz and to replay cassettes against (a shell-style string)"),
    ("--acp-profile", "str", None, "NAME|FILE",
     "a known agent or a profile file (docs/profiles.md): how to run the agent; with "
     "--acp-agent too, that command run the profile's way"),
    ("--acp-max-examples", "int", 50, "N", "examples in the campaign (default 50; 0: no "
     "campaign)"),
    ("--acp-seed", "int", 0, "N", "campaign seed"),
    ("--acp-strict", "bool", False, None, "fail on SHOULD findings too"),
    ("--acp-protocol", "str", None, "1|2|auto",
     "ACP version the campaign offers: 1, 2 or auto (default: the profile's, else 1)"),
    ("--acp-cassette-dir", "str", None, "DIR",
     "where finding cassettes go (default: pytest's tmp dir)"),
    ("--acp-cassettes", "str", None, "PATH",
     "a cassette or a folder of cassettes to replay against --acp-agent"),
    ("--acp-sandbox-net", "bool", False, None,
     "run the agent in a network namespace with only loopback"),
    ("--acp-sandbox-fs", "bool", False, None,
     "the agent sees its sandbox and system folders, not your files (needs bubblewrap)"),
    ("--acp-plugin", "list", [], "MODULE|PATH",
     "load your checks from this module or .py file (repeatable; also $ACP_FUZZ_PLUGINS and "
     "acp_fuzz entry points; docs/extending.md)"),
    ("--acp-client", "str", None, "CMD",
     "client command to test (acp-fuzz plays the agent; {agent} becomes its command line) "
     "and to replay client cassettes against (a shell-style string; docs/clients.md)"),
    ("--acp-client-scenario", "str", None, "FILE",
     "the client's scenario (TOML, docs/clients.md): its command lines; --acp-client "
     "replaces its command"),
    ("--acp-recorded-model-replies", "bool", False, None,
     "serve a cassette's recorded real-model replies during its replay (default: the fake "
     "model answers)"),
)


def _ini_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acp-fuzz", "acp-fuzz: fuzz and replay ACP agents")
    for flag, kind, _default, metavar, text in OPTIONS:
        # No default here: an option not given on the command line is then taken from the
        # ini file, and only then from OPTIONS (pytest_configure).
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, help=text)
        elif kind == "list":
            group.addoption(flag, action="append", default=None, metavar=metavar, help=text)
        else:
            group.addoption(flag, default=None, metavar=metavar, help=text)
        if kind == "list":
            parser.addini(_ini_name(flag), f"{text} (the ini form of {flag})", type="linelist")
        else:
            parser.addini(_ini_name(flag), f"{text} (the ini form of {flag})", type="string")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Each option's value: the command line's, else the ini file's, else the default; a
    bad value is a usage error in one line."""
    for flag, kind, default, _metavar, _text in OPTIONS:
        dest = _ini_name(flag)
        given = getattr(config.option, dest, None)
        raw = config.getini(_ini_name(flag))
        if kind == "list":
            value: Any = [*(raw or []), *(given or [])]
        elif given is not None:
            value = given
        elif raw not in ("", None):
            value = _from_ini(flag, kind, str(raw))
        else:
            value = default
        if kind == "int":
            value = _as_int(flag, value)
        if flag == "--acp-protocol" and value not in (None, "1", "2", "auto"):
            raise pytest.UsageError(f"{flag}: must be 1, 2 or auto, not {value!r}")
        setattr(config.option, dest, value)


def _from_ini(flag: str, kind: str, raw: str) -> Any:
    if kind != "bool":
        return raw.strip()
    word = raw.strip().lower()
    if word not in ("true", "false", "1", "0", "yes", "no"):
        raise pytest.UsageError(f"{_ini_name(flag)}: must be true or false, not {raw!r}")
    return word in ("true", "1", "yes")


def _as_int(flag: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{flag}: must be a whole number, not {value!r}") from None


def _load_plugins(config: pytest.Config) -> None:
    """The users' checks, as the CLI loads them: entry points, $ACP_FUZZ_PLUGINS and
    ``--acp-plugin`` (put into $ACP_FUZZ_PLUGINS too, for the runs that go through the CLI
    under ``--acp-sandbox-net``). A plugin that cannot load fails the item in one line."""
    import os

    from acp_fuzz.engine.campaign.plugins import ENV, load_all

    extra = [p for p in config.getoption("--acp-plugin") or [] if p]
    if extra:
        have = [p for p in os.environ.get(ENV, "").split(",") if p]
        os.environ[ENV] = ",".join(dict.fromkeys([*have, *extra]))
    load_all()


class _AcpItem(pytest.Item):
    """Shows an acp-fuzz failure as its report, not as a traceback into acp-fuzz."""

    def start(self, default: str) -> Path:
        """Load the users' checks; the folder finding cassettes go to (``--acp-cassette-dir``,
        else a new one named ``default`` in pytest's tmp dir)."""
        _load_plugins(self.config)
        cdir = self.config.getoption("--acp-cassette-dir")
        return Path(cdir) if cdir else self.config._tmp_path_factory.mktemp(  # type: ignore[attr-defined]
            default)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        from acp_fuzz.core.errors import AcpFuzzError
        from acp_fuzz.core.escaping import terminal

        if isinstance(excinfo.value, AcpFailure):
            # Agent and cassette text (names, messages, paths): shown, never interpreted.
            return terminal(str(excinfo.value), newlines=True)
        if isinstance(excinfo.value, AcpFuzzError):
            # The agent could not be driven (it did not start, or speaks another protocol
            # version): one line, as the CLI says it, not a traceback into acp-fuzz.
            return f"acp-fuzz: error: {terminal(str(excinfo.value))}"
        return str(super().repr_failure(excinfo))


def _target_args(config: pytest.Config, argv: list[str]) -> list[str]:
    """The CLI's form of the agent options (for the --sandbox-net child process)."""
    profile = config.getoption("--acp-profile")
    return [*(["--profile", profile] if profile else []), *(["--", *argv] if argv else [])]


class AcpCampaignItem(_AcpItem):
    def __init__(self, *, argv: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.argv = argv

    def runtest(self) -> None:
        opt = self.config.getoption
        cassette_dir = self.start("acp-fuzz-cassettes")
        if opt("--acp-sandbox-net"):
            args = ["target", "--sandbox-net", "--max-examples", str(opt("--acp-max-examples")),
                    "--seed", str(opt("--acp-seed")), "--cassette-dir", str(cassette_dir)]
            _run_cli([*args, *(["--protocol", opt("--acp-protocol")]
                               if opt("--acp-protocol") else []),
                      *(["--strict"] if opt("--acp-strict") else []),
                      *(["--sandbox-fs"] if opt("--acp-sandbox-fs") else []),
                      *_target_args(self.config, self.argv)])
            return

        from acp_fuzz.engine.campaign.runner import TargetSpec
        from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

        cfg = CampaignSettings(max_examples=opt("--acp-max-examples"), seed=opt("--acp-seed"),
                               strict=opt("--acp-strict"), cassette_dir=cassette_dir)
        kw: dict[str, Any] = {"sandbox_fs": opt("--acp-sandbox-fs")}
        if opt("--acp-protocol"):
            kw["protocol"] = opt("--acp-protocol")
        profile = opt("--acp-profile")
        spec = TargetSpec.resolve(self.argv, profile, **kw)
        result = run_campaign(spec, cfg)
        if result.failing():
            from acp_fuzz.reporting.text import campaign_lines

            # The same report as `acp-fuzz target` prints, without the colours.
            lines = campaign_lines(result, lambda c: shlex.join(
                [str(c), *_target_args(self.config, self.argv)]))
            raise AcpFailure("\n".join(line.text for line in lines).strip())

    def reportinfo(self) -> tuple[str, int, str]:
        shown = " ".join(_target_args(self.config, self.argv))
        return ("acp-fuzz", 0, f"acp-fuzz campaign: {shown}")


class AcpReplayItem(_AcpItem):
    def __init__(self, *, cassette: Path, argv: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.cassette = cassette
        self.argv = argv

    def runtest(self) -> None:
        _load_plugins(self.config)
        opt = self.config.getoption
        model = opt("--acp-recorded-model-replies")
        if opt("--acp-sandbox-net"):
            _run_cli(["replay", "--sandbox-net",
                      *(["--recorded-model-replies"] if model else []),
                      *(["--sandbox-fs"] if opt("--acp-sandbox-fs") else []),
                      str(self.cassette), *_target_args(self.config, self.argv)])
            return

        from acp_fuzz.engine.campaign.replay import replay_cassette

        # The agent is the one the user named; the cassette's recorded command is never used.
        res = replay_cassette(self.cassette, target=self.argv or None,
                              profile=opt("--acp-profile"), recorded_model_replies=model,
                              sandbox_fs=opt("--acp-sandbox-fs"))
        if res.verdict not in ("FIXED", "PASSED"):
            raise AcpFailure(res.line())

    def reportinfo(self) -> tuple[str, int, str]:
        from acp_fuzz.core.escaping import terminal

        shown = terminal(str(self.cassette))  # a file name may hold ESC or a newline
        return (shown, 0, f"acp-fuzz replay {shown}")


#: The client's scenario, read once at collection (a usage error there) and used by every
#: client item.
_SCENARIO = pytest.StashKey["Scenario"]()


def _scenario(config: pytest.Config) -> Scenario:
    """The client's scenario: ``--acp-client-scenario`` (its command replaced by
    ``--acp-client``), else ``--acp-client`` run once; a usage error in one line otherwise."""
    if _SCENARIO in config.stash:
        return config.stash[_SCENARIO]
    from acp_fuzz.core.scenarios import Scenario, ScenarioError
    from acp_fuzz.engine.client.scenario_file import read_scenario

    client = config.getoption("--acp-client")
    command = shlex.split(client) if client else []
    path = config.getoption("--acp-client-scenario")
    try:
        # read_scenario checks the file's steps; a command alone is checked here.
        sc = read_scenario(Path(path), command) if path else Scenario(tuple(command))
        sc.check()
    except ScenarioError as e:
        raise pytest.UsageError(f"--acp-client-scenario: {e}") from None
    config.stash[_SCENARIO] = sc
    return sc


class AcpClientItem(_AcpItem):
    """``acp-fuzz client`` as a test: the client's campaign, failing on a failing finding
    with the report the command prints."""

    def runtest(self) -> None:
        opt = self.config.getoption
        cassette_dir = self.start("acp-fuzz-client-cassettes")
        sc = _scenario(self.config)
        if opt("--acp-sandbox-net"):
            scenario = opt("--acp-client-scenario")
            _run_cli(["client", "--sandbox-net", "--max-examples", str(opt("--acp-max-examples")),
                      "--seed", str(opt("--acp-seed")), "--cassette-dir", str(cassette_dir),
                      *(["--strict"] if opt("--acp-strict") else []),
                      *(["--sandbox-fs"] if opt("--acp-sandbox-fs") else []),
                      *(["--scenario", scenario] if scenario else []), "--", *sc.command])
            return
        from acp_fuzz.engine.client.campaign import (
            ClientSettings,
            replay_command,
            run_client_campaign,
        )
        from acp_fuzz.reporting.client import client_lines

        cfg = ClientSettings(max_examples=opt("--acp-max-examples"), seed=opt("--acp-seed"),
                             strict=opt("--acp-strict"), cassette_dir=cassette_dir,
                             sandbox_fs=opt("--acp-sandbox-fs"))
        result = run_client_campaign(sc, cfg)
        if result.exit_code:
            lines = client_lines(result, lambda c: replay_command(c, "", sc.command))
            raise AcpFailure("\n".join(line.text for line in lines).strip())

    def reportinfo(self) -> tuple[str, int, str]:
        return ("acp-fuzz", 0, f"acp-fuzz client: {self.config.getoption('--acp-client')}")


class AcpClientReplayItem(_AcpItem):
    """A client cassette replayed against the client the user named (never the command it
    records): FIXED passes, FAILED or FLAKY fails."""

    def __init__(self, *, cassette: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.cassette = cassette

    def runtest(self) -> None:
        _load_plugins(self.config)
        from acp_fuzz.core.cassette import read_cassette
        from acp_fuzz.core.escaping import terminal
        from acp_fuzz.engine.client.campaign import recorded_client, replay_client

        cassette = read_cassette(self.cassette)
        caps, recorded, oracles = recorded_client(cassette)
        sc = _scenario(self.config)
        if not self.config.getoption("--acp-client-scenario") and any(
                s.args or s.stdin for s in recorded.steps):
            # A stranger's steps are words appended to your client's command: never run
            # unasked (`acp-fuzz replay --client` refuses them the same way).
            pytest.skip(f"the cassette recorded a scenario of {len(recorded.steps)} step(s): "
                        "give them with --acp-client-scenario FILE")
        sc = recorded.with_command(sc.command) if not self.config.getoption(
            "--acp-client-scenario") else sc
        res = replay_client(cassette, sc, sandbox_fs=self.config.getoption("--acp-sandbox-fs"))
        if res.verdict != "FIXED":
            raise AcpFailure(terminal(
                f"{res.verdict} {self.cassette}: {', '.join(oracles) or 'no recorded failure'} "
                f"under {caps.describe()} ({res.rate})"))

    def reportinfo(self) -> tuple[str, int, str]:
        from acp_fuzz.core.escaping import terminal

        shown = terminal(str(self.cassette))
        return (shown, 0, f"acp-fuzz replay --client {shown}")


class AcpFailure(AssertionError):
    """A failing campaign or replay; its message is the whole report."""


def _run_cli(args: list[str]) -> None:
    """Run ``acp-fuzz ARGS`` in a child process (``--sandbox-net`` moves the whole harness
    into a namespace, which this pytest process cannot do); its output is the failure
    message when it exits non-zero."""
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", *args], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise AcpFailure(f"acp-fuzz {args[0]} exited {proc.returncode}\n"
                         + (proc.stdout + proc.stderr).strip())


def _cassettes(path: Path) -> Iterator[tuple[Path, str]]:
    """Each cassette and its id: the path under the corpus folder (``real/a.cassette``), so
    two cassettes of one name in two folders are two tests (the file name alone collided)."""
    if path.is_dir():
        for c in sorted(path.rglob("*.cassette")):
            yield c, c.relative_to(path).as_posix()
    else:
        yield path, path.name


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    agent = config.getoption("--acp-agent")
    argv = shlex.split(agent) if agent else []
    named = bool(argv) or bool(config.getoption("--acp-profile"))
    client = bool(config.getoption("--acp-client") or config.getoption("--acp-client-scenario"))
    if client:
        _scenario(config)  # a scenario that cannot run is a usage error, before any item
    if named and config.getoption("--acp-max-examples") > 0:
        items.append(AcpCampaignItem.from_parent(session, name="acp-fuzz-campaign",
                                                 argv=argv))
    if client and config.getoption("--acp-max-examples") > 0:
        items.append(AcpClientItem.from_parent(session, name="acp-fuzz-client-campaign"))
    corpus = config.getoption("--acp-cassettes")
    if corpus:
        for c, cid in _cassettes(Path(corpus)):
            items.append(_replay_item(session, c, cid, argv, named=named, client=client))


def _replay_item(session: pytest.Session, c: Path, cid: str, argv: list[str], *, named: bool,
                 client: bool) -> pytest.Item:
    """The test of one cassette: an agent's replayed against the agent named, a client's
    against the client named, each skipped with why when that side is not named."""
    from acp_fuzz.core.escaping import terminal
    from acp_fuzz.engine.campaign.replay import is_client_cassette

    # The item's name is its id, which pytest prints as it is: a file name chosen by
    # whoever added the cassette is shown escaped (ESC, newlines), never interpreted.
    name = f"acp-fuzz-replay[{terminal(cid)}]"
    # The id given as the string pytest's cache writes (`::name[params]`), so that `--lf`
    # and `--ff` find the item again: built from the name alone, the bracket stays part of
    # the name, and pytest 9's parsed ids then never match.
    if is_client_cassette(c):
        item: pytest.Item = AcpClientReplayItem.from_parent(session, name=name,
                                                            nodeid=f"::{name}", cassette=c)
        if not client:
            item.add_marker(pytest.mark.skip(reason=CLIENT_CASSETTE))
        return item
    item = AcpReplayItem.from_parent(session, name=name, nodeid=f"::{name}", cassette=c,
                                     argv=argv)
    if not named:
        item.add_marker(pytest.mark.skip(reason=AGENT_CASSETTE if client else NO_AGENT))
    return item
