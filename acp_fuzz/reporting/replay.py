"""What ``acp-fuzz replay --junit PATH`` writes (pure: builds the test cases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from acp_fuzz.core.findings import is_reported
from acp_fuzz.reporting.junit import Case

if TYPE_CHECKING:
    from acp_fuzz.engine.replay import ReplayResult

__all__ = ["replay_cases"]


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
