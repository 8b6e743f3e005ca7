"""Profile one default campaign against a planted bug: where does the time go?

``python benchmarks/profile_campaign.py [BUG] [SEED]`` (default ``user-turn 0``) prints the
wall time, the CPU seconds of the harness and of the agents, and the cProfile top entries by
cumulative and by internal time.
"""

from __future__ import annotations

import cProfile
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, run_campaign


def main() -> None:
    bug = sys.argv[1] if len(sys.argv) > 1 else "user-turn"
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    argv = [sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", bug]
    spec = TargetSpec.from_command(argv)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        result = run_campaign(spec, CampaignSettings(seed=seed, cassette_dir=Path(tmp)))
        prof.disable()
        wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"wall {wall:.1f}s examples {result.examples_run} steps {result.steps_run} "
          f"harness CPU {me.ru_utime + me.ru_stime:.1f}s "
          f"agents CPU {kids.ru_utime + kids.ru_stime:.1f}s")
    stats = pstats.Stats(prof)
    stats.sort_stats("cumtime").print_stats(30)
    stats.sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
