"""What ``acp-fuzz target --report json:PATH|junit:PATH`` writes for a campaign (pure: builds
documents, writes nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.findings import is_failure, is_reported
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.core.version import __version__
from acp_fuzz.reporting.junit import Case

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign import CampaignResult

__all__ = ["campaign_cases", "result_to_json"]


def result_to_json(result: CampaignResult, secrets: Sequence[str] = ()) -> dict[str, Any]:
    """The ``--report json:PATH`` document, with every value in ``secrets`` redacted."""
    findings = []
    for rep in result.reports:
        for f in rep.findings:
            findings.append({**f.to_wire(), "status": rep.status,
                             "rate": rep.rate, "steps": rep.steps,
                             "cassette": str(rep.cassette) if rep.cassette else None})
    doc = {"acp_fuzz_version": __version__, "agent": result.initialize,
           "examples_run": result.examples_run, "steps_run": result.steps_run,
           "seed": result.settings.seed, "strict": result.settings.strict,
           "findings": findings, "info": [i.to_wire() for i in result.info_reports],
           "explained": result.explained,
           "capabilities": result.caps.to_wire(),
           # What was tested: every (oracle, rule) the examples gave something to judge,
           # with how many times (acp-fuzz matrix builds its table from this and findings).
           "judged": [{"oracle": o, "rule": r, "checks": n}
                      for (o, r), n in sorted(result.judged.items())],
           "out_of_time": result.out_of_time,
           # What was sent: for each op and invalid payload variant the covering examples
           # cover, the example that first sent it, and those none sent.
           "coverage": {"first_example": dict(sorted(result.coverage.items())),
                        "covering_examples": result.covering_examples,
                        "unsent": result.unsent()},
           "model_requests": dict(result.model_requests),
           "interrupted": result.interrupted, "exit_code": result.exit_code}
    return dict(Scrubber(secrets).value(doc))


def campaign_cases(result: CampaignResult, secrets: Sequence[str] = ()) -> list[Case]:
    """The ``--report junit:PATH`` test cases: one per rule checked, named by the rule, in
    the class ``acp-fuzz.<oracle>``, as CI dashboards list tests. Each (oracle, rule) the
    examples gave something to judge (``result.judged``) or that a finding names is a case:
    a failure when one of its findings fails the run (see
    :func:`acp_fuzz.core.findings.is_failure`), otherwise a pass whose output says how many
    cases were judged and what was reported (a SHOULD without ``--strict``, an info choice).
    A campaign that judged nothing at all (interrupted at once) is one passing ``campaign``."""
    scrub = Scrubber(secrets).text
    strict = result.settings.strict
    found: dict[tuple[str, str], list[str]] = {}
    failing: dict[tuple[str, str], list[str]] = {}
    for rep in result.reports:
        for f in rep.findings:
            if not is_reported(f.severity):
                continue
            key = (f.oracle, f.rule)
            found.setdefault(key, []).append(
                f"{f.severity}: {f.message}\nstatus: {rep.status} ({rep.rate})\n"
                f"cassette: {rep.cassette or 'not written'}")
            if is_failure(f, strict=strict):
                failing.setdefault(key, []).append(f.severity)
    for f in result.info:
        found.setdefault((f.oracle, f.rule), []).append(f"info: {f.message}")
    cases = []
    for key in sorted(set(result.judged) | set(found)):
        oracle, rule = key
        checks = result.judged.get(key, 0)
        text = scrub("\n\n".join([f"{checks} case(s) judged", *found.get(key, [])]))
        if key in failing:
            cases.append(Case(name=rule, classname=f"acp-fuzz.{oracle}", outcome="failure",
                              message=f"{oracle}: {rule}", type=failing[key][0], text=text))
        else:
            cases.append(Case(name=rule, classname=f"acp-fuzz.{oracle}", text=text))
    return cases or [Case(name="campaign", classname="acp-fuzz")]
