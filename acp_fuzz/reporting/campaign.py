"""What ``acp-fuzz target --report json:PATH|junit:PATH`` writes for a campaign, and the
campaign read back from its JSON (``acp-fuzz report merge``) (pure: builds documents and
results, reads and writes nothing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.errors import AcpFuzzError
from acp_fuzz.core.facts import codes_to_wire
from acp_fuzz.core.findings import Finding, is_failure, is_reported
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.protocol import agent_info
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.core.version import __version__
from acp_fuzz.core.workspace import facts_to_wire
from acp_fuzz.reporting.junit import Case

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.search import CampaignResult

__all__ = ["ReportError", "campaign_cases", "codes_from_json", "result_from_json", "result_to_json",
           "shard_name", "workspace_from_json"]


def result_to_json(result: CampaignResult, secrets: Sequence[str] = (),
                   seconds: float | None = None) -> dict[str, Any]:
    """The ``--report json:PATH`` document, with every value in ``secrets`` redacted;
    ``seconds``: how long the run took, when known."""
    findings = [row for rep in result.reports
                for row in rep.finding_rows(steps=rep.steps, shrink=rep.shrink)]
    doc = {"acp_fuzz_version": __version__, "agent": result.initialize,
           "examples_run": result.examples_run, "steps_run": result.steps_run,
           # The examples apart (drawn + shrinking + discarded = examples_run), and the runs
           # beside them: the campaign's own shrink trials and the confirmation runs.
           "examples": {"drawn": result.drawn, "shrinking": result.shrink_runs,
                        "discarded": result.discarded, "shrink_trials": result.shrink_trials,
                        "confirm_runs": result.confirm_runs},
           "seed": result.settings.seed, "strict": result.settings.strict,
           "shard": shard_name(result.settings.shard),
           "findings": findings, "info": [i.to_wire() for i in result.info_reports],
           "explained": result.explained,
           # Oracles that failed an example of the search and that no finding above names
           # (the example shrank to another failure): not confirmed on their own.
           "absorbed": [{**{k: v for k, v in f.to_wire().items() if k != "evidence"},
                         "steps": list(f.evidence.get("example_steps", []))}
                        for f in result.absorbed()],
           "capabilities": result.caps.to_wire(),
           # What calibration learned (commands, modes, options; the restart grace), and how.
           "calibration": result.learned.to_wire() if result.learned else None,
           # What was tested: every (oracle, rule) the examples gave something to judge,
           # with how many times (acp-fuzz matrix builds its table from this and findings).
           "judged": [{"oracle": o, "rule": r, "checks": n}
                      for (o, r), n in sorted(result.judged.items())],
           # Facts, never verdicts: the error code of every refused request that carried
           # a prompt, by payload class ({"mode-unknown": {"-32602": 3}}).
           "error_codes": codes_to_wire(result.error_codes),
           # Facts too: per prompt mode, which workspace instruction files (AGENTS.md, ...)
           # reached the model (SP-AGENT-OVERRIDE-CONTEXT-MAY: override may keep them).
           "workspace_files": facts_to_wire(result.workspace),
           "out_of_time": result.out_of_time,
           # What was sent: for each op and invalid payload variant the covering examples
           # cover, the example that first sent it, and those none sent.
           "coverage": {"first_example": dict(sorted(result.coverage.items())),
                        "covering_examples": result.covering_examples,
                        "unsent": result.unsent(),
                        # Each covering example run, by its digest: shards together run
                        # each once (report merge says when two ran the same).
                        "covering": list(result.covering)},
           "model_requests": dict(result.model_requests),
           # Each distinct request beside the turns (untied first), with the first
           # characters of its slots and the step it came after; and the cassette of the
           # shortest example that sent an untied one.
           "side_requests": result.side_requests.to_wire(),
           "side_requests_not_listed": result.side_requests.unkept,
           "untied_cassette": str(result.untied_cassette) if result.untied_cassette else None,
           "interrupted": result.interrupted, "exit_code": result.exit_code}
    if seconds is not None:
        doc["seconds"] = round(seconds, 1)
    return dict(Scrubber(secrets).value(doc))


def campaign_cases(result: CampaignResult, secrets: Sequence[str] = ()) -> list[Case]:
    """The ``--report junit:PATH`` test cases of an agent campaign (:func:`rule_cases`)."""
    return rule_cases(result, secrets)


def rule_cases(result: Any, secrets: Sequence[str] = (),
               beside: Callable[[Any], Sequence[str]] = lambda rep: (),
               empty: str = "campaign") -> list[Case]:
    """The ``--report junit:PATH`` test cases of a campaign of either direction: one per
    rule checked, named by the rule, in the class ``acp-fuzz.<oracle>``, as CI dashboards list
    tests. Each (oracle, rule) the examples gave something to judge (``result.judged``) or
    that a finding names is a case: a failure when one of its findings fails the run (see
    :func:`acp_fuzz.core.findings.is_failure`), otherwise a pass whose output says how many
    cases were judged and what was reported (a SHOULD without ``--strict``, an info choice).
    ``beside(report)`` is what a direction adds to a finding's text (a client's capability
    set). A campaign that judged nothing at all (interrupted at once) is one passing case
    named ``empty``."""
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
                rep.case_text(f"{f.severity}: {f.message}", *beside(rep)))
            if is_failure(f, strict=strict):
                failing.setdefault(key, []).append(f.severity)
    for f in result.absorbed():
        # Seen failing, never confirmed on its own: not a pass either.
        found.setdefault((f.oracle, f.rule), []).append(
            f"{f.severity}: {f.message}\nstatus: unconfirmed (failed in the search; its "
            "example shrank to another failure)")
        if is_failure(f, strict=strict):
            failing.setdefault((f.oracle, f.rule), []).append(f.severity)
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
    return cases or [Case(name=empty, classname="acp-fuzz")]


def shard_name(shard: tuple[int, int]) -> str | None:
    """``--shard K/N`` as the report names it (``"2/3"``; 1-based), None when not sharded."""
    k, n = shard
    return f"{k + 1}/{n}" if n > 1 else None


class ReportError(AcpFuzzError, ValueError):
    """A JSON document that is not a campaign report: the message says what is wrong."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ReportError(what)


def _of(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None
        ) -> Any:
    """``doc[key]`` when it is of ``kind`` (bool is not an int here), ``default`` when it is
    absent and a default is given; ReportError otherwise."""
    if key not in doc and default is not None:
        return default
    value = doc.get(key)
    ok = isinstance(value, kind) and not (isinstance(value, bool) and bool not in
                                          (kind if isinstance(kind, tuple) else (kind,)))
    _need(ok, f"{key!r} is missing or not a {getattr(kind, '__name__', 'value')}")
    return value


def _finding(obj: Any, where: str) -> Finding:
    _need(isinstance(obj, Mapping), f"{where} is not an object")
    for key in ("oracle", "severity", "rule", "message"):
        _of(obj, key, str)
    _need(isinstance(obj.get("step", -1), int), f"{where}.step is not a number")
    _need(obj.get("session") is None or isinstance(obj["session"], str),
          f"{where}.session is not a string")
    _need(isinstance(obj.get("evidence", {}), Mapping), f"{where}.evidence is not an object")
    return Finding.from_wire(obj)


def _steps(obj: Any, where: str) -> list[dict[str, Any]]:
    _need(isinstance(obj, list) and all(isinstance(s, Mapping) for s in obj),
          f"{where}.steps is not a list of steps")
    return [dict(s) for s in obj]


def _rate(text: Any, where: str) -> tuple[int, int]:
    runs, slash, reproduced = str(text).partition("/")
    _need(bool(slash) and runs.isdigit() and reproduced.isdigit(),
          f"{where}.rate is not N/M")
    return int(reproduced), int(runs)


def _reports(findings: Any, cassette_at: Callable[[str], Path]) -> list[Any]:
    """The distinct failures of a report's ``findings`` (one entry per finding, each with
    its failure's status, rate, steps and cassette): consecutive findings of one failure
    become one :class:`~acp_fuzz.engine.campaign.search.FindingReport` again."""
    from acp_fuzz.engine.campaign.search import FindingReport

    _need(isinstance(findings, list), "'findings' is not a list")
    out: list[FindingReport] = []
    last: tuple[Any, ...] | None = None
    for i, obj in enumerate(findings):
        where = f"findings[{i}]"
        f = _finding(obj, where)
        status, cassette = obj.get("status"), obj.get("cassette")
        _need(isinstance(status, str), f"{where}.status is not a string")
        _need(cassette is None or isinstance(cassette, str), f"{where}.cassette is not a path")
        steps = _steps(obj.get("steps"), where)
        key = (status, obj.get("rate"), steps, cassette)
        if key != last:
            runs, reproduced = _rate(obj.get("rate"), where)
            shrink = obj.get("shrink")
            out.append(FindingReport(status=status, runs=runs, reproduced=reproduced,
                                     findings=[], steps=steps, requests=[],
                                     cassette=cassette_at(cassette) if cassette else None,
                                     shrink=dict(shrink) if isinstance(shrink, Mapping)
                                     else {}))
            last = key
        out[-1].findings.append(f)
    return out


def result_from_json(doc: Any, cassette_at: Callable[[str], Path] = Path) -> Any:
    """The :class:`~acp_fuzz.engine.campaign.search.CampaignResult` that :func:`result_to_json`
    wrote ``doc`` from, as far as the document tells: what ``acp-fuzz report merge`` merges
    and writes again (the requests each failure sent, the deadlines and the seconds are not
    in it). ``cassette_at`` finds a cassette named in it (by default, the path as written).
    Raises :class:`ReportError` saying what is wrong when ``doc`` is not such a report."""
    from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings, InfoReport

    _need(isinstance(doc, Mapping) and "acp_fuzz_version" in doc and "findings" in doc,
          "not a campaign report (acp-fuzz target --report json:PATH)")
    caps = _of(doc, "capabilities", Mapping)
    fields = set(Capabilities.__slots__)
    _need(set(caps) <= fields and all(isinstance(v, bool) for v in caps.values()),
          "'capabilities' holds an unknown capability or a value that is not true or false")
    shard = _of(doc, "shard", (str, type(None)), default="1/1") or "1/1"
    k, _, n = shard.partition("/")
    _need(k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n), "'shard' is not K/N")
    settings = CampaignSettings(seed=_of(doc, "seed", int), strict=_of(doc, "strict", bool),
                                shard=(int(k) - 1, int(n)))
    init = doc.get("agent")
    result = CampaignResult(agent=dict(agent_info(init)), initialize=init,
                            caps=Capabilities(**caps), settings=settings,
                            examples_run=_of(doc, "examples_run", int),
                            steps_run=_of(doc, "steps_run", int),
                            explained=_of(doc, "explained", int, default=0),
                            interrupted=_of(doc, "interrupted", bool, default=False),
                            out_of_time=_of(doc, "out_of_time", bool, default=False))
    result.reports = _reports(doc["findings"], cassette_at)
    for i, obj in enumerate(_of(doc, "absorbed", list, default=[])):
        f = _finding(obj, f"absorbed[{i}]")
        steps = _steps(obj.get("steps", []), f"absorbed[{i}]")
        result.seen_failing.setdefault(f.oracle, dataclasses.replace(
            f, evidence={"example_steps": steps}))
    info = _of(doc, "info", list, default=[])
    for i, obj in enumerate(info):
        f = _finding(obj, f"info[{i}]")
        _need(obj.get("cassette") is None or isinstance(obj["cassette"], str),
              f"info[{i}].cassette is not a path")
        result.info_reports.append(InfoReport(
            f, _steps(obj.get("steps", []), f"info[{i}]"), str(obj.get("excerpt", "")),
            cassette_at(obj["cassette"]) if obj.get("cassette") else None))
    result.info = [i.finding for i in result.info_reports]
    for i, j in enumerate(_of(doc, "judged", list, default=[])):
        _need(isinstance(j, Mapping) and isinstance(j.get("oracle"), str)
              and isinstance(j.get("rule"), str) and type(j.get("checks")) is int,
              f"judged[{i}] is not an oracle, a rule and a count")
        result.judged[(j["oracle"], j["rule"])] = j["checks"]
    requests = _of(doc, "model_requests", Mapping, default={})
    _need(all(type(v) is int for v in requests.values()), "'model_requests' holds a non-count")
    result.model_requests = dict(requests)
    result.error_codes = codes_from_json(_of(doc, "error_codes", Mapping, default={}))
    result.workspace = workspace_from_json(_of(doc, "workspace_files", Mapping, default={}))
    _coverage(result, _of(doc, "coverage", Mapping, default={}))
    return result


def codes_from_json(codes: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """``error_codes`` read back: payload class -> JSON-RPC code (a key, in JSON) -> count;
    ReportError when it is not that."""
    def code(c: str) -> bool:
        return c.removeprefix("-").isdigit() and len(c) <= 12

    for cls, by in codes.items():
        _need(isinstance(by, Mapping) and all(code(c) and type(n) is int
                                              for c, n in by.items()),
              f"'error_codes.{cls[:64]}' is not error codes and counts")
    return {cls: {int(c): n for c, n in by.items()} for cls, by in codes.items()}


def workspace_from_json(wire: Mapping[str, Any]) -> dict[str, dict[str, list[int]]]:
    """``workspace_files`` read back: prompt mode -> file -> [turns shown, turns];
    ReportError when it is not that."""
    def count(n: Any) -> bool:
        return isinstance(n, Mapping) and type(n.get("shown")) is int \
            and type(n.get("turns")) is int

    by_mode = _of(wire, "by_mode", Mapping, default={})
    for mode, files in by_mode.items():
        _need(isinstance(files, Mapping) and all(count(n) for n in files.values()),
              f"'workspace_files.by_mode.{mode[:64]}' is not files with counts")
    return {mode: {name: [n["shown"], n["turns"]] for name, n in files.items()}
            for mode, files in by_mode.items()}


def _coverage(result: Any, cov: Mapping[str, Any]) -> None:
    first = _of(cov, "first_example", Mapping, default={})
    _need(all(type(v) is int for v in first.values()), "'coverage.first_example' holds a "
                                                        "non-number")
    result.coverage = dict(first)
    result.covering_examples = _of(cov, "covering_examples", int, default=0)
    for key in ("unsent", "covering"):
        value = _of(cov, key, list, default=[])
        _need(all(isinstance(v, str) for v in value), f"'coverage.{key}' is not a list of "
                                                      "strings")
    # The report lists the keys no example sent, not all it was to send: those are what a
    # merge needs (the keys that none of the merged campaigns sent).
    result.cover_keys = list(cov.get("unsent", []))
    result.covering = list(cov.get("covering", []))
