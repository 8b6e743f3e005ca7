"""What ``acp-fuzz replay --report json:PATH|junit:PATH`` writes (``--junit PATH`` is the
same as ``--report junit:PATH``); pure: builds the documents and the test cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.findings import is_reported
from acp_fuzz.core.version import __version__
from acp_fuzz.reporting.junit import Case

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.replay import ReplayResult

__all__ = ["replay_cases", "replay_to_json"]


def replay_cases(results: Sequence[ReplayResult]) -> list[Case]:
    """One ``testcase`` per cassette: ``FAILED``/``FLAKY`` are failures, ``ERROR`` an error,
    ``FIXED``/``PASSED`` pass; the text lists each run's reported findings."""
    cases = []
    for r in results:
        detail = [r.line()]
        if r.divergence is not None:
            detail.extend(r.divergence.lines())
        for run, findings in enumerate(r.findings, 1):
            for f in findings:
                if is_reported(f.severity):
                    detail.append(f"run {run}: {f.oracle} ({f.severity}, {f.rule}): "
                                  f"{f.message}")
        text = "\n".join(detail)
        if r.verdict == "ERROR":
            cases.append(Case(str(r.path), "acp-fuzz.replay", "error", r.error or "error",
                              "ERROR", text))
        elif r.verdict in ("FAILED", "FLAKY"):
            cases.append(Case(str(r.path), "acp-fuzz.replay", "failure",
                              f"{r.verdict}: {', '.join(r.oracles)} ({r.rate})", r.verdict,
                              text))
        else:
            cases.append(Case(str(r.path), "acp-fuzz.replay", text=text))
    return cases


def replay_to_json(results: Sequence[ReplayResult], exit_code: int) -> dict[str, Any]:
    """The ``--report json:PATH`` document: how many cassettes got each verdict, the exit
    status, and for each cassette its verdict, the oracles it is about, in how many runs they
    failed, the first divergence from the recording (three lines, or ``null``), the one-line
    reason of an ``ERROR``, and every finding of every run (one list per run)."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    cassettes = [{"path": str(r.path), "verdict": r.verdict, "mode": r.mode,
                  "oracles": list(r.oracles), "runs": r.runs, "reproduced": r.reproduced,
                  "error": r.error, "notes": list(r.notes),
                  "divergence": r.divergence.lines() if r.divergence is not None else None,
                  "findings": [[f.to_wire() for f in run] for run in r.findings]}
                 for r in results]
    return {"acp_fuzz_version": __version__, "verdicts": dict(sorted(counts.items())),
            "exit_code": exit_code, "cassettes": cassettes}
