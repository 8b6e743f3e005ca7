"""Every payload kind at every seed (issue #22 §3), end to end against the reference agent.

``acp-fuzz target`` opens with the covering examples (``acp_fuzz.strategies.cover``): within
its first 16 examples, at every seed, it sends every invalid payload variant on every request
that carries a prompt (new, load, resume, fork) and every lifecycle op. Checked twice: from what
the agent itself received (a wrapper logs every request, one log line per request, tagged with
the process that got it: each example is a fresh process), and from the campaign's own record
in the JSON report. With ``--workers`` the workers share the covering examples, with ``--db`` the
database's replay comes first and the covering examples still run, and a covering example cut
short by a crash leaves its unsent requests to the next.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import run_cli
from acp_fuzz.strategies.payloads import invalid_variant

from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.strategies import cover_keys

pytestmark = pytest.mark.integration

#: The covering examples of the reference agent (docs/performance.md states it as N) ...
N = 43
#: ... run in this many agent processes: one each, and one more for the restart in one.
PROCESSES = N + 1
OPS = {"session/new": "new", "session/load": "load", "session/resume": "resume",
       "session/fork": "fork"}

#: The reference agent, logging every request it gets (and the process that got it) to LOG.
LOGGING_AGENT = """\
import json, sys, uuid
from acp_fuzz.reference_agent import agent as ref

LOG = {log!r}
PROCESS = uuid.uuid4().hex
dispatch = ref.Agent.dispatch


def logged(self, method, params):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({{"process": PROCESS, "method": method, "params": params}}) + "\\n")
    return dispatch(self, method, params)


ref.Agent.dispatch = logged
sys.exit(ref.main())
"""


def _target(tmp_path: Path, *args: str, bug: str | None = None
            ) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    log = tmp_path / "requests.log"
    script = tmp_path / "logging_agent.py"
    script.write_text(LOGGING_AGENT.format(log=str(log)), encoding="utf-8")
    report = tmp_path / "report.json"
    proc = run_cli(tmp_path, "target", "--cassette-dir", str(tmp_path / "c"),
                   "--report", f"json:{report}", *args, "--", sys.executable, str(script),
                   *(["--bug", bug] if bug else []))
    assert proc.returncode in (0, 1), proc.stderr
    lines = log.read_text(encoding="utf-8").splitlines()
    return proc.returncode, json.loads(report.read_text()), [json.loads(x) for x in lines]


def _received(requests: list[dict[str, Any]]) -> dict[str, int]:
    """Each ``<request>:<variant>`` the agent received, and the agent process (1-based; the
    first process with a session request is the calibration's, index 0) that first got it."""
    processes: list[str] = []
    first: dict[str, int] = {}
    for r in requests:
        if r["method"] == "initialize":
            continue  # prepared agents initialize ahead of their example
        if r["process"] not in processes:
            processes.append(r["process"])
        params = r["params"] if isinstance(r["params"], dict) else {}
        if r["method"] in OPS and params.get("systemPrompt") is not None:
            variant = invalid_variant(params["systemPrompt"], override=True)
            if variant is not None:
                first.setdefault(f"{OPS[r['method']]}:{variant}", processes.index(r["process"]))
    return first


def _keys(report: dict[str, Any]) -> list[str]:
    return cover_keys(Capabilities(**report["capabilities"]))


# The covering examples are the same at every seed (13-15 s each end to end): all four seeds
# run in the long tier, which CI runs; the quick loop checks the plan offline
# (tests/cover/test_cover.py) and keeps under its 5 minutes.
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_payload_variant_and_op_is_sent_within_the_covering_examples_at_every_seed(
        seed: int, tmp_path: Path, no_orphans: object) -> None:
    # --db at one seed: the database's replay comes first, and changes none of this.
    db = ("--db", str(tmp_path / "db")) if seed == 3 else ()
    code, report, requests = _target(tmp_path, "--seed", str(seed), "-n", str(N + 2), *db)
    assert code == 0 and report["findings"] == []
    keys = _keys(report)
    payload_keys = [k for k in keys if k.split(":")[0] in OPS.values()]
    assert len(payload_keys) == 4 * 23  # new, load, resume, fork; 23 variants each
    assert {"new:content-empty", 'new:mode-spelling:"replace"', 'resume:mode-spelling:""',
            "fork:block-image"} <= set(payload_keys)
    # What the agent got, counted on its side of the wire.
    received = _received(requests)
    assert set(payload_keys) <= set(received), sorted(set(payload_keys) - set(received))
    assert max(received[k] for k in payload_keys) <= PROCESSES
    # The campaign's own record says the same, for the ops too.
    coverage = report["coverage"]
    assert coverage["unsent"] == [] and coverage["covering_examples"] == N
    assert max(coverage["first_example"][k] for k in keys) <= N
    assert {"op:restart", "op:delete", "op:cancel", "op:fork", "invalid:session/load"} <= \
        set(keys)
    # The error code of every refused payload, by class (facts, issue #33 §3): the
    # reference agent answers -32602 to each invalid class, and refuses no valid prompt.
    codes = report["error_codes"]
    assert {"mode-unknown", "content-empty", "block-not-text", "draft-string"} <= set(codes)
    assert "valid" not in codes
    assert {code for by in codes.values() for code in by} == {"-32602"}
    # Which workspace files reached the model, per mode (facts, #33 §1): the reference agent
    # reads AGENTS.md, and keeps nothing under override.
    by_mode = report["workspace_files"]["by_mode"]
    assert by_mode["none"]["AGENTS.md"]["shown"] == by_mode["none"]["AGENTS.md"]["turns"] > 0
    assert by_mode["override"]["AGENTS.md"]["shown"] == 0 < by_mode["override"]["AGENTS.md"][
        "turns"]
    assert all(n["shown"] == 0 for m in by_mode.values() for f, n in m.items()
               if f != "AGENTS.md")


@pytest.mark.slow  # campaign-sized (two workers' whole plan): the long tier
def test_two_workers_share_the_covering_examples(tmp_path: Path, no_orphans: object) -> None:
    code, report, requests = _target(tmp_path, "--workers", "2", "-n", str(N + 4))
    assert code == 0 and report["findings"] == []
    coverage = report["coverage"]
    # Each worker ran its half: N in all, not N each.
    assert coverage["covering_examples"] == N and coverage["unsent"] == []
    assert report["error_codes"]["mode-unknown"]["-32602"] >= 4  # both workers' counts
    assert set(k for k in _keys(report) if ":" in k and k.split(":")[0] in OPS.values()) <= \
        set(_received(requests))


@pytest.mark.slow  # the whole plan against a crashing agent (about 20 s): the long tier
def test_a_covering_example_cut_short_by_a_crash_leaves_the_rest_to_the_next(
        tmp_path: Path, no_orphans: object) -> None:
    # The image block kills the agent in the second example of rejected session/new requests:
    # the variants after it in that example are sent by the next one.
    code, report, requests = _target(tmp_path, "-n", str(N + 14), bug="crash-on-image")
    assert code == 1
    (finding,) = report["findings"]
    assert finding["oracle"] == "agent.crash" and len(finding["steps"]) == 1
    coverage = report["coverage"]
    assert coverage["unsent"] == [] and coverage["covering_examples"] > N
    payload_keys = [k for k in _keys(report) if k.split(":")[0] in OPS.values()]
    assert set(payload_keys) <= set(_received(requests))
