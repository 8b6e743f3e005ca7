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

import dataclasses
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from acp_fuzz.campaign import CampaignSettings, run_campaign
from acp_fuzz.cassette import Cassette, read_cassette, write_cassette
from acp_fuzz.runner import TargetSpec
from acp_fuzz.scrub import map_leaves

HERE = Path(__file__).resolve().parent / "reference"
BUGS = ["leak", "lost-after-restart", "duplicate-on-resume", "user-turn", "accept-unknown-mode",
        "side-effect-before-validation", "crash-on-image", "history-lost-after-restart",
        "load-erases-session"]


#: A Python interpreter of some virtual environment, and the agents cache of some checkout
#: (anywhere in a text: an agent quotes its own install path to the model, e.g. gemini-cli's
#: skill locations).
_PYTHON = re.compile(r"^/\S*/bin/python3?(\.\d+)?$")
_AGENTS = re.compile(r"(?:/[^\s/<>\"'`]+)+/\.cache/agents/")


def _portable_arg(arg: Any) -> Any:
    if not isinstance(arg, str):
        return arg
    return "python" if _PYTHON.match(arg) else _AGENTS.sub("<agents>/", arg)


def _portable_text(v: Any) -> Any:
    return _AGENTS.sub("<agents>/", v) if isinstance(v, str) else v


def write_portable(path: Path, c: Cassette) -> Path:
    """Write ``c`` to ``path`` without the paths of the machine that recorded it: in the
    recorded command and in each spawn's argv, the interpreter becomes ``python``; and
    wherever an installed agent's path appears (argv, the frames, the model requests, the
    learned baseline), it becomes ``<agents>/<package>@<version>/...``.

    Nothing a verdict rests on changes: a profile's cassette is replayed with the profile's
    own command, and the baseline and the model requests are rewritten alike, so
    ``replay --offline`` judges the portable cassette as it judged the original
    (``tests/cover/test_portable.py``)."""
    c.header.target = [_portable_arg(a) for a in c.header.target]
    c.header.settings = map_leaves(c.header.settings, _portable_text)
    c.header.initialize = map_leaves(c.header.initialize, _portable_text)
    c.header.meta = map_leaves(c.header.meta, _portable_text)
    events = [dataclasses.replace(e, data={**e.data, "argv": [_portable_arg(a)
                                                              for a in e.data["argv"]]})
              if e.kind == "process" and isinstance(e.data.get("argv"), list) else e
              for e in c.events]
    events = [dataclasses.replace(e, data=map_leaves(e.data, _portable_text)) for e in events]
    return write_cassette(path, c.header, events, c.attachments)


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
