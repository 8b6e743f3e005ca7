"""The rules a campaign checked, with their verdicts (pure): the one table the HTML page and
the Markdown page of either direction render.

A verdict is ``FAIL`` (a finding that fails the run), ``unconfirmed`` (an oracle seen failing
whose example shrank to another failure: :meth:`CampaignResult.absorbed
<acp_fuzz.engine.campaign.search.CampaignResult.absorbed>`), ``finding`` (a SHOULD finding,
which fails the run only under ``--strict``: its rule did not hold, so it is never ``pass``)
or ``pass`` (judged, and held).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp_fuzz.core.findings import is_failure, is_reported, oracle_info

__all__ = ["FINDING", "RuleRow", "rule_rows"]

#: The verdict of a rule with a finding that fails the run only under ``--strict``.
FINDING = "finding (not failing without --strict)"


@dataclass(frozen=True)
class RuleRow:
    """One (oracle, rule) judged: how many cases, its verdict, what it asks."""

    oracle: str
    rule: str
    cases: int
    verdict: str
    asks: str

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"


def rule_rows(result: Any) -> list[RuleRow]:
    """The rows of a campaign result of either direction (its ``judged``, ``reports`` and
    ``settings.strict``), sorted by oracle and rule."""
    strict = result.settings.strict
    failed = {(f.oracle, f.rule) for r in result.reports for f in r.findings
              if is_failure(f, strict=strict)}
    found = {(f.oracle, f.rule) for r in result.reports for f in r.findings
             if is_reported(f.severity)}
    absorbed = {(f.oracle, f.rule) for f in result.absorbed()}
    rows = []
    for (oracle, rule), n in sorted(result.judged.items()):
        key = (oracle, rule)
        verdict = ("FAIL" if key in failed else "unconfirmed" if key in absorbed
                   else FINDING if key in found else "pass")
        rows.append(RuleRow(oracle, rule, n, verdict, _asks(oracle)))
    return rows


def _asks(oracle: str) -> str:
    try:
        return oracle_info(oracle).summary
    except KeyError:  # a plugin's check that is not loaded where the page is made
        return ""
