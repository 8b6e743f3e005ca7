"""Guards on what acp-fuzz exports, and on where its strategies are installed.

A change to these lists is an API change: update the pinned list *and* the docs on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import acp_fuzz
import acp_fuzz.strategies

ACP_FUZZ_ALL = sorted([
    "__version__",
    "AcpFuzzError", "Baseline", "CATALOG", "CampaignResult", "CampaignSettings", "Cassette",
    "CassetteError", "CheckContext", "ClientContext", "check", "Finished", "report_format",
    "Event", "Finding", "Gateway", "HarnessError", "History", "ModelExchange", "ReplayResult",
    "Run", "Segment", "TargetSpec", "evaluate", "read_cassette", "replay_cassette",
    "run_campaign", "write_cassette",
])
STRATEGIES_ALL = [
    "INVALID_KINDS",
    "Cover",
    "LifecycleMachine",
    "SessionView",
    "block_texts",
    "cover_keys",
    "cover_share",
    "covering_examples",
    "example_digest",
    "invalid_system_prompts",
    "step_keys",
    "valid_system_prompts",
]
REPO = Path(__file__).resolve().parents[2]


def test_acp_fuzz_exports_exactly() -> None:
    assert sorted(acp_fuzz.__all__) == ACP_FUZZ_ALL
    for name in ACP_FUZZ_ALL:
        assert hasattr(acp_fuzz, name), name
    assert isinstance(acp_fuzz.__version__, str) and acp_fuzz.__version__


def test_every_public_name_has_a_home() -> None:
    assert set(acp_fuzz.__all__) - {"__version__"} == set(acp_fuzz._EXPORTS)


def test_import_acp_fuzz_stays_cheap() -> None:
    # The reference agent imports this package at every start: the public names load lazily.
    code = "import sys, acp_fuzz; print(sorted(m for m in ('hypothesis', " \
           "'acp_fuzz.engine.campaign.search', 'acp_fuzz.engine.campaign.runner') " \
           "if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert res.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        acp_fuzz.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_strategies_exports_exactly() -> None:
    assert acp_fuzz.strategies.__all__ == STRATEGIES_ALL
    for name in STRATEGIES_ALL:
        assert getattr(acp_fuzz.strategies, name) is not None, name


def test_strategies_is_a_subpackage_of_acp_fuzz() -> None:
    assert acp_fuzz.strategies.__name__ == "acp_fuzz.strategies"
    # The folder is mapped, not copied: the installed module is the repo's strategies/.
    assert Path(acp_fuzz.strategies.__file__).parent.name == "strategies"


def _probe(cwd: Path) -> list[bool]:
    code = (
        "import importlib.util, json\n"
        "print(json.dumps([importlib.util.find_spec('strategies') is None,"
        " importlib.util.find_spec('acp_fuzz.strategies') is not None]))\n"
    )
    # No PYTHONPATH and no repo on sys.path: only what the installation provides.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    result: list[bool] = json.loads(res.stdout)
    return result


def test_no_top_level_strategies_module_in_site_packages(tmp_path: Path) -> None:
    assert tmp_path.resolve() != REPO
    assert _probe(tmp_path) == [True, True]


def test_the_probe_would_see_a_top_level_strategies(tmp_path: Path) -> None:
    # The check above can fail: a folder named strategies on the path is found.
    (tmp_path / "strategies").mkdir()
    (tmp_path / "strategies" / "__init__.py").write_text("")
    assert _probe(tmp_path) == [False, True]


def test_every_error_the_harness_raises_is_an_acp_fuzz_error() -> None:
    """One base class to catch; each error is also importable where it is raised."""
    from acp_fuzz.core import cassette, errors
    from acp_fuzz.engine.campaign import database, runner
    from acp_fuzz.engine.gateway import upstream
    from acp_fuzz.engine.process import sandbox, transport

    homes = {"CassetteError": cassette, "DatabaseError": database, "HarnessError": runner,
             "SandboxError": sandbox, "AgentStartError": transport, "RpcError": transport,
             "UpstreamError": upstream, "RecordingError": upstream}
    assert set(errors.__all__) == {"AcpFuzzError", *homes}
    for name, module in homes.items():
        cls = getattr(errors, name)
        assert issubclass(cls, acp_fuzz.AcpFuzzError), name
        assert getattr(module, name) is cls, name
    assert issubclass(errors.DatabaseError, ValueError)  # typer/argparse callers catch that


def test_the_version_is_written_once() -> None:
    """pyproject.toml, the cassette header and the reference agent all read
    acp_fuzz.core.version."""
    from importlib.metadata import version

    from acp_fuzz.core.cassette import Header
    from acp_fuzz.reference_agent.agent import AGENT_VERSION

    assert version("acp-fuzz") == acp_fuzz.__version__
    assert Header(target=[]).acp_fuzz_version == acp_fuzz.__version__ == AGENT_VERSION
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()


def test_report_show_and_offline_replay_do_not_load_the_campaign() -> None:
    """Reading a cassette never loads Hypothesis or the campaign (#12): they are slow to
    import and have nothing to do with judging what a cassette holds."""
    cassette = REPO / "cassettes" / "reference" / "accept-unknown-mode.cassette"
    for args in (["report", str(cassette)], ["show", str(cassette)],
                 ["replay", "--offline", str(cassette)]):
        code = (f"import sys; from acp_fuzz.cli import main; rc = main({args!r}); "
                "print(rc, sorted(m for m in ('hypothesis', 'acp_fuzz.engine.campaign.search', "
                "'acp_fuzz.strategies') if m in sys.modules))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, cwd=REPO)
        rc, _, loaded = res.stdout.strip().splitlines()[-1].partition(" ")
        assert loaded == "[]", (args, res.stdout[-500:], res.stderr[-500:])
        assert rc in ("0", "1"), (args, rc, res.stderr[-500:])  # it ran (1: a finding)


def test_every_error_acp_fuzz_raises_is_an_acp_fuzz_error() -> None:
    """One base class for the harness's own errors (#35 §4): a caller catches AcpFuzzError.
    The reference agent and client are programs of their own (they stand on the core's
    version alone), and names starting with ``_`` never leave their module."""
    import importlib
    import inspect
    import pkgutil

    import acp_fuzz
    from acp_fuzz.core.errors import AcpFuzzError

    stray = []
    for mod in pkgutil.walk_packages(acp_fuzz.__path__, "acp_fuzz."):
        if mod.name.startswith(("acp_fuzz.reference_", "acp_fuzz.__main__")):
            continue
        module = importlib.import_module(mod.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == mod.name and name.endswith("Error") \
                    and not name.startswith("_") and issubclass(cls, Exception) \
                    and not issubclass(cls, AcpFuzzError):
                stray.append(f"{mod.name}.{name}")
    assert stray == []
