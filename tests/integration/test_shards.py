"""``acp-fuzz target --shard K/N`` and ``acp-fuzz report merge``: a campaign split over N CI jobs
or machines runs each example once, and their reports merge into one."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _support import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AGENT = [sys.executable, "-m", "acp_fuzz.reference_agent"]


def _plan(report: dict[str, Any]) -> list[str]:
    """The digests of the covering examples one campaign plans for the agent of ``report``."""
    from acp_fuzz.core.payloads import Capabilities
    from acp_fuzz.strategies import covering_examples

    caps = Capabilities(**report["capabilities"])
    return [c.digest for c in covering_examples(caps)]


def test_three_shards_of_a_buggy_agent_merge_into_one_report(tmp_path: Path,
                                                             no_orphans: object) -> None:
    """Three shards (one after the other, sharing a database folder, as CI jobs share one in
    Redis) each find the planted leak; the merged report has it once, the covering examples
    of the plan each ran in exactly one shard, and every format is written."""
    docs = []
    # 20 examples a shard: its 14 or 15 of the plan's 43 covering examples, and those built for
    # what the examples the leak cut short left unsent (the fork example and the reattaches
    # during another session's turn, where a second session's prompt leaks).
    for k in (1, 2, 3):
        proc = run_cli(tmp_path, "target", "--shard", f"{k}/3", "-n", "20", "--db",
                       str(tmp_path / "db"), "--cassette-dir", f"c{k}", "--report",
                       f"json:r{k}.json", "--", *AGENT, "--bug", "leak")
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1].endswith(f"(seed 0, shard {k}/3)")
        docs.append(json.loads((tmp_path / f"r{k}.json").read_text()))
    assert [d["shard"] for d in docs] == ["1/3", "2/3", "3/3"]
    assert sum(len(d["findings"]) for d in docs) >= 2  # the same bug, found more than once
    outputs = [f"{kind}:m.{ext}" for kind, ext in (("json", "json"), ("markdown", "md"),
                                                   ("junit", "xml"), ("html", "html"))]
    merged = run_cli(tmp_path, "report", "merge", "r1.json", "r2.json", "r3.json",
                     *(w for o in outputs for w in ("--report", o)))
    assert merged.returncode == 1, merged.stderr
    assert "warning" not in merged.stderr, merged.stderr
    doc = json.loads((tmp_path / "m.json").read_text())
    assert [(f["oracle"], f["severity"]) for f in doc["findings"]] == [("prompt.leak", "MUST")]
    assert doc["exit_code"] == 1 and doc["shard"] is None
    assert doc["examples_run"] == sum(d["examples_run"] for d in docs)
    assert doc["steps_run"] == sum(d["steps_run"] for d in docs)
    # Each example of the plan ran in one shard at most (a shard whose example a failure cut
    # short also ran one built for what it left unsent, which is not one of the plan's), and
    # one that ran in none had every key of it sent already: the shards share a database,
    # and a later shard skips a plan example whose keys a replayed failure sent (the
    # failures, and so what they send, move with the draws).
    plan = _plan(docs[0])
    ran = Counter(doc["coverage"]["covering"])
    assert all(ran[d] <= 1 for d in plan), {d: ran[d] for d in plan if ran[d] > 1}
    shares = [set(d["coverage"]["covering"]) & set(plan) for d in docs]
    assert all(shares) and sum(map(len, shares)) == sum(ran[d] for d in plan) >= len(plan) - 3
    assert doc["coverage"]["unsent"] == []
    markdown = (tmp_path / "m.md").read_text()
    assert [ln for ln in markdown.splitlines() if ln.startswith("| MUST |")] == [
        "| MUST | `prompt.leak` | `ACPFUZZ-SESSION-ISOLATION-MUST` | failed (3/3) | session B's "
        "model request holds session A's client text |"]
    failures = [c.get("name") for c in ET.parse(tmp_path / "m.xml").getroot().iter("testcase")
                if c.find("failure") is not None]
    # The leak's rule, and any rule a shard's search failed whose failure shrank into the leak
    # (unconfirmed: 'absorbed', a failing case too, never a pass).
    absorbed = sorted({f["rule"] for f in doc["absorbed"] if f["severity"] == "MUST"})
    assert sorted(failures) == sorted(["ACPFUZZ-SESSION-ISOLATION-MUST", *absorbed]), failures
    page = (tmp_path / "m.html").read_text()
    assert "prompt.leak" in page and 'class="leaked"' in page  # its cassette was read


def test_n_shards_run_what_one_campaign_of_n_times_the_examples_runs(tmp_path: Path) -> None:
    """The search of three shards of 8 examples (no covering examples: the search alone)
    runs exactly the examples of one campaign of 24, each in one shard: what Hypothesis
    draws at a seed is the same in every shard, and each runs every third draw. (Compared
    as the examples' digests: Hypothesis itself sends one step list twice now and then.)

    In-process, through the engine's events: each finished example names its digest."""
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings, ExampleDone, run_campaign

    spec = TargetSpec.from_command(AGENT)

    def examples(shard: tuple[int, int], n: int) -> list[str]:
        seen: list[str] = []
        cfg = CampaignSettings(max_examples=n, cassette_dir=tmp_path / "c", cover=False,
                               shard=shard, cover_share=shard)
        result = run_campaign(spec, cfg, lambda e: seen.append(e.digest)
                              if isinstance(e, ExampleDone) else None)
        assert result.reports == [] and len(seen) == result.examples_run
        return seen

    shards = [examples((k, 3), 8) for k in range(3)]
    whole = examples((0, 1), 24)
    assert all(shards)
    assert Counter(d for s in shards for d in s) == Counter(whole)
