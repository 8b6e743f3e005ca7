"""pytest plugin: run an acp-fuzz campaign and a cassette corpus as ordinary tests.

Installed with acp-fuzz (entry point ``pytest11``); it does nothing unless asked::

    pytest --acp-agent "npx my-agent"                 # one test: a bounded fuzz campaign
    pytest --acp-cassettes cassettes/                 # one test per cassette: replay it
    pytest --acp-agent "./agent" --acp-max-examples 50 --acp-seed 1 --junitxml=acp.xml

The campaign runs with a CI profile: a fixed seed (derandomized: the same agent gives the same
run), a bounded number of examples, no example database. It fails on any MUST finding (and on
SHOULD findings with ``--acp-strict``), with the minimal reproduction and the cassette path in
the failure message.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["pytest_addoption", "pytest_collection_modifyitems"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acp-fuzz", "acp-fuzz: fuzz and replay ACP agents")
    group.addoption("--acp-agent", default=None, metavar="CMD",
                    help="agent command to fuzz (a shell-style string)")
    group.addoption("--acp-max-examples", type=int, default=50, metavar="N",
                    help="examples in the campaign (default 50)")
    group.addoption("--acp-seed", type=int, default=0, metavar="N", help="campaign seed")
    group.addoption("--acp-strict", action="store_true", help="fail on SHOULD findings too")
    group.addoption("--acp-cassette-dir", default=None, metavar="DIR",
                    help="where finding cassettes go (default: pytest's tmp dir)")
    group.addoption("--acp-cassettes", default=None, metavar="PATH",
                    help="a cassette or a folder of cassettes to replay")


class _AcpItem(pytest.Item):
    """Shows an acp-fuzz failure as its report, not as a traceback into acp-fuzz."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, AcpFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))


class AcpCampaignItem(_AcpItem):
    def __init__(self, *, argv: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.argv = argv

    def runtest(self) -> None:
        from acp_fuzz.campaign import CampaignSettings, run_campaign
        from acp_fuzz.runner import TargetSpec

        opt = self.config.getoption
        cdir = opt("--acp-cassette-dir")
        cassette_dir = Path(cdir) if cdir else self.config._tmp_path_factory.mktemp(  # type: ignore[attr-defined]
            "acp-fuzz-cassettes")
        cfg = CampaignSettings(max_examples=opt("--acp-max-examples"), seed=opt("--acp-seed"),
                               strict=opt("--acp-strict"), cassette_dir=cassette_dir)
        result = run_campaign(TargetSpec.from_command(self.argv), cfg)
        if result.failing():
            lines = []
            for rep in result.reports:
                for f in rep.findings:
                    lines.append(f"{f.severity} {f.oracle} [{f.rule}]: {f.message}")
                lines.append(f"status {rep.status} ({rep.rate}); {len(rep.steps)} step(s)")
                lines.append(f"cassette: {rep.cassette}  replay: acp-fuzz replay {rep.cassette}")
            raise AcpFailure("\n".join(lines))

    def reportinfo(self) -> tuple[str, int, str]:
        return ("acp-fuzz", 0, f"acp-fuzz campaign: {' '.join(self.argv)}")


class AcpReplayItem(_AcpItem):
    def __init__(self, *, cassette: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.cassette = cassette

    def runtest(self) -> None:
        from acp_fuzz.replay import replay_cassette

        res = replay_cassette(self.cassette)
        if res.verdict not in ("FIXED", "PASSED"):
            raise AcpFailure(res.line())

    def reportinfo(self) -> tuple[str, int, str]:
        return (str(self.cassette), 0, f"acp-fuzz replay {self.cassette}")


class AcpFailure(AssertionError):
    """A failing campaign or replay; its message is the whole report."""


def _cassettes(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(path.rglob("*.cassette"))
    else:
        yield path


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    agent = config.getoption("--acp-agent")
    if agent:
        items.append(AcpCampaignItem.from_parent(session, name="acp-fuzz-campaign",
                                                 argv=shlex.split(agent)))
    corpus = config.getoption("--acp-cassettes")
    if corpus:
        for c in _cassettes(Path(corpus)):
            items.append(AcpReplayItem.from_parent(session, name=f"acp-fuzz-replay[{c.name}]",
                                                   cassette=c))
