"""Regenerate the regression corpus: one cassette per planted bug of the reference agent.

Run from the repository root (takes a few minutes)::

    python cassettes/generate.py [BUG ...]
    python cassettes/generate.py --portable FILE ...   # machine paths out of kept cassettes

Each cassette is what ``acp-fuzz target --seed 0`` wrote for that bug, with the agent command
rewritten to the portable ``python -m acp_fuzz.reference_agent --bug BUG``. CI replays every
cassette: it must say FAILED against its bug and FIXED against the correct agent
(``tests/integration/test_corpus.py``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from acp_fuzz.core.cassette import Cassette, read_cassette, write_cassette
from acp_fuzz.core.scrub import portable
from acp_fuzz.engine.agents.cache import cache_root
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign

HERE = Path(__file__).resolve().parent / "reference"
BUGS = ["leak", "lost-after-restart", "duplicate-on-resume", "user-turn", "accept-unknown-mode",
        "side-effect-before-validation", "crash-on-image", "history-lost-after-restart",
        "load-erases-session"]


def write_portable(path: Path, c: Cassette) -> Path:
    """Write ``c`` to ``path`` without the paths of the machine that recorded it
    (:func:`acp_fuzz.core.scrub.portable`): the interpreter becomes ``python`` and an installed
    agent's path ``<agents>/<package>@<version>/...``, wherever it appears. Nothing a
    verdict rests on changes (``tests/cover/test_portable.py``)."""
    header, events = portable(c.header, c.events, roots=[str(cache_root())])
    return write_cassette(path, header, events, c.attachments)


def main(bugs: list[str]) -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for bug in bugs:
        with tempfile.TemporaryDirectory() as tmp:
            spec = TargetSpec.from_command(
                [sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", bug])
            result = run_campaign(spec, CampaignSettings(seed=0, cassette_dir=Path(tmp)))
            if not result.reports or result.reports[0].cassette is None:
                raise SystemExit(f"{bug}: not found")
            c = read_cassette(result.reports[0].cassette)
            c.header.target = ["python", "-m", "acp_fuzz.reference_agent", "--bug", bug]
            out = write_portable(HERE / f"{bug}.cassette", c)
            print(f"{bug}: {result.reports[0].oracles} in {len(result.reports[0].steps)} "
                  f"step(s) -> {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--portable"]:
        for name in sys.argv[2:]:
            print(write_portable(Path(name), read_cassette(name)))
    else:
        main(sys.argv[1:] or BUGS)
