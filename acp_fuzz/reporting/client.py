"""What ``acp-fuzz client --report json:PATH|junit:PATH`` writes, and the lines it prints
(pure: builds documents and text, writes nothing).

The JSON has the shape of ``target``'s: ``findings`` with ``oracle``, ``severity``, ``rule``,
``message``, ``step``, ``session``, ``evidence``, ``status``, ``rate``, ``steps`` and
``cassette``; a client finding adds ``capabilities`` (the smallest capability set that showed
it, as data) and ``capability_set`` (the same, readable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.findings import is_failure
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.core.version import __version__
from acp_fuzz.reporting.junit import Case
from acp_fuzz.reporting.text import Line, failure_lines

if TYPE_CHECKING:
    from acp_fuzz.engine.client.campaign import ClientCampaignResult

__all__ = ["client_cases", "client_lines", "client_name", "client_result_to_json",
           "client_summary"]


def client_result_to_json(result: ClientCampaignResult,
                          secrets: Sequence[str] = ()) -> dict[str, Any]:
    """The ``--report json:PATH`` document, with every value in ``secrets`` redacted."""
    findings = [row for rep in result.reports
                for row in rep.finding_rows(steps=len(result.scenario.steps),
                                            capabilities=rep.caps.to_wire(),
                                            capability_set=rep.caps.describe())]
    doc = {"acp_fuzz_version": __version__, "role": "client",
           "client": list(result.scenario.command), "client_info": result.client_info,
           "scenario": result.scenario.to_wire(), "stand_in": result.initialize,
           "examples_run": result.examples_run, "runs": result.runs,
           "seed": result.settings.seed, "strict": result.settings.strict,
           "findings": findings, "info": [i.to_wire() for i in result.info],
           "judged": [{"oracle": o, "rule": r, "checks": n}
                      for (o, r), n in sorted(result.judged.items())],
           "timeouts": result.timeouts,
           "interrupted": result.interrupted, "exit_code": result.exit_code}
    return dict(Scrubber(secrets).value(doc))


def client_cases(result: ClientCampaignResult, secrets: Sequence[str] = ()) -> list[Case]:
    """The ``--report junit:PATH`` cases of a client campaign, as an agent's
    (:func:`acp_fuzz.reporting.campaign.rule_cases`): one per client rule checked, a finding's
    text with its smallest capability set; one passing ``client`` when nothing was judged."""
    from acp_fuzz.reporting.campaign import rule_cases

    return rule_cases(result, secrets,
                      beside=lambda rep: (f"capabilities: {rep.caps.describe()}",),
                      empty="client")


def client_name(result: ClientCampaignResult, scrub: Callable[[str], str] = str) -> str:
    """The client as a page's title names it: what it said it is (``clientInfo`` name and
    version), else its command (clipped), else "a client"; ``scrub`` redacts secrets."""
    info = result.client_info if isinstance(result.client_info, Mapping) else {}
    return scrub(" ".join(str(info.get(k, "")) for k in ("name", "version")).strip()
                 or " ".join(result.scenario.command)[:400] or "a client")


def client_summary(result: ClientCampaignResult, elapsed: float) -> str:
    """The line ``acp-fuzz client`` prints first after the search: what ran, for how long,
    at which seed, and whether ``--time-budget`` stopped it (as ``target``'s summary says)."""
    budget = result.settings.time_budget
    return (f"ran {result.examples_run} capability set(s), {result.runs} client run(s) in "
            f"{elapsed:.1f}s (seed {result.settings.seed})"
            + (f", stopped at --time-budget {budget:g} s"
               if result.out_of_time and budget is not None else ""))


def client_lines(result: ClientCampaignResult,
                 again: Callable[[Path], str] = str) -> list[Line]:
    """What ``acp-fuzz client`` prints after the search, in the lines ``target`` prints
    (:class:`acp_fuzz.reporting.text.Line`, each finding as :func:`~acp_fuzz.reporting.text
    .finding_lines` shows an agent's: severity, oracle, rule, step, message, evidence), the
    text escaped for the terminal (client text is shown, never interpreted).
    ``again(cassette)`` is the replay command line for a cassette."""
    out: list[Line] = []
    strict = result.settings.strict
    for rep in result.reports:
        worst = rep.findings[0] if rep.findings else None
        what = ", ".join(rep.oracles) + (f" ({worst.severity}, {worst.rule})" if worst else "")
        details = [Line(terminal(f"smallest capability set: {rep.caps.describe()}"))]
        out += failure_lines(rep.status, rep.rate, what, rep.findings, details, rep.cassette,
                             again(rep.cassette) if rep.cassette else "",
                             failing=any(is_failure(f, strict=strict) for f in rep.findings))
    out += [Line(terminal(f"  info  {f.oracle} [{f.rule}]: {f.message}"), "dim")
            for f in result.info]
    if result.timeouts:
        out.append(Line(f"{result.timeouts} step(s) outlived the step timeout and were killed "
                        "(--timeout)", "yellow"))
    failing = sum(1 for r in result.reports
                  if any(is_failure(f, strict=strict) for f in r.findings))
    if result.interrupted:
        out.append(Line(f"interrupted: {len(result.reports)} finding(s) so far, {failing} "
                        "failing", "bold yellow"))
    elif failing:
        out.append(Line(f"{failing} failing finding(s)", "bold red"))
    elif result.reports:
        out.append(Line("no failing finding (SHOULD findings fail only under --strict)",
                        "green"))
    else:
        out.append(Line("no finding: the client followed every client rule judged", "green"))
    return out
