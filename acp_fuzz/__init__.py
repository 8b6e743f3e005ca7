"""acp-fuzz: fuzz, record and replay Agent Client Protocol agents.

The public API is what ``__all__`` lists; every other module is private and may change::

    import acp_fuzz

    spec = acp_fuzz.TargetSpec.from_command(["./my-agent"])
    with acp_fuzz.Run(spec) as run:                      # one agent, sandbox and fake model
        run.initialize()
        run.execute({"op": "new", "session": "A", "systemPrompt": {
            "mode": "append", "content": [{"type": "text", "text": "Be terse."}]}})
        run.execute({"op": "prompt", "session": "A"})
        findings = acp_fuzz.evaluate(run.history.snapshot())

    result = acp_fuzz.run_campaign(spec, acp_fuzz.CampaignSettings(max_examples=50))
    verdict = acp_fuzz.replay_cassette("cassettes/x.cassette").verdict

Names are imported on first use (PEP 562), so ``import acp_fuzz`` stays cheap: the reference
agent, which lives in this package, starts without loading Hypothesis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.version import __version__

#: public name -> the private module that defines it
_EXPORTS = {
    "AcpFuzzError": "acp_fuzz.core.errors",
    "Baseline": "acp_fuzz.core.oracles",
    "CATALOG": "acp_fuzz.core.findings",
    "Cassette": "acp_fuzz.core.cassette",
    "CassetteError": "acp_fuzz.core.errors",
    "CampaignResult": "acp_fuzz.engine.campaign.search",
    "CampaignSettings": "acp_fuzz.engine.campaign.search",
    "CheckContext": "acp_fuzz.core.checks",
    "ClientContext": "acp_fuzz.core.client_oracles",
    "Event": "acp_fuzz.core.history",
    "Finding": "acp_fuzz.core.findings",
    "Finished": "acp_fuzz.core.events",
    "Gateway": "acp_fuzz.engine.gateway",
    "HarnessError": "acp_fuzz.core.errors",
    "History": "acp_fuzz.core.history",
    "ModelExchange": "acp_fuzz.core.history",
    "ReplayResult": "acp_fuzz.engine.campaign.replay",
    "Run": "acp_fuzz.engine.campaign.runner",
    "Segment": "acp_fuzz.core.history",
    "TargetSpec": "acp_fuzz.engine.campaign.runner",
    "check": "acp_fuzz.core.checks",
    "evaluate": "acp_fuzz.core.oracles",
    "read_cassette": "acp_fuzz.core.cassette",
    "report_format": "acp_fuzz.reporting.formats",
    "replay_cassette": "acp_fuzz.engine.campaign.replay",
    "run_campaign": "acp_fuzz.engine.campaign.search",
    "write_cassette": "acp_fuzz.core.cassette",
}

__all__ = [
    "CATALOG",
    "AcpFuzzError",
    "Baseline",
    "CampaignResult",
    "CampaignSettings",
    "Cassette",
    "CassetteError",
    "CheckContext",
    "ClientContext",
    "Event",
    "Finding",
    "Finished",
    "Gateway",
    "HarnessError",
    "History",
    "ModelExchange",
    "ReplayResult",
    "Run",
    "Segment",
    "TargetSpec",
    "__version__",
    "check",
    "evaluate",
    "read_cassette",
    "replay_cassette",
    "report_format",
    "run_campaign",
    "write_cassette",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_fuzz' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers and IDEs; nothing is imported at run time
    from acp_fuzz.core.cassette import Cassette, CassetteError, read_cassette, write_cassette
    from acp_fuzz.core.checks import CheckContext, check
    from acp_fuzz.core.client_oracles import ClientContext
    from acp_fuzz.core.events import Finished
    from acp_fuzz.core.findings import CATALOG, Finding
    from acp_fuzz.core.history import Event, History, ModelExchange, Segment
    from acp_fuzz.core.oracles import Baseline, evaluate
    from acp_fuzz.engine.campaign.replay import ReplayResult, replay_cassette
    from acp_fuzz.engine.campaign.runner import HarnessError, Run, TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, run_campaign
    from acp_fuzz.engine.gateway import Gateway
    from acp_fuzz.reporting.formats import report_format
