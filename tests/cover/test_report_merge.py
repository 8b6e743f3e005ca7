"""``acp-fuzz report merge``: campaign JSON reports read back and merged into one (pure: the
reports are made here, no agent runs). A report read back is the campaign it was written from,
as far as the JSON tells; merged, the same bug is one failure (the campaign's same-bug rule),
the counts add up, the coverage is merged, the exit code is a campaign's; a file that is not a
report is one error line and exit 2; shards missing or given twice are warnings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.cli import main
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.search import (
    CampaignResult,
    CampaignSettings,
    FindingReport,
    InfoReport,
)
from acp_fuzz.reporting.campaign import ReportError, result_from_json, result_to_json

INIT = {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "1.0"},
        "agentCapabilities": {"loadSession": True}}
Steps = list[dict[str, Any]]
LEAK: Steps = [{"op": "new", "session": "A", "systemPrompt": {"mode": "append", "content": []}},
               {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}]
#: The leak again, in a longer example that holds its minimal steps: the same bug.
LEAK_LONGER: Steps = [LEAK[0], {"op": "prompt", "session": "A"}, *LEAK[1:]]
CRASH: Steps = [{"op": "new", "session": "A",
                 "systemPrompt": {"mode": "override", "content": []}}]


def _finding(oracle: str, severity: str = "MUST", step: int = 2) -> Finding:
    return Finding(oracle, severity, f"RULE-{oracle}", f"{oracle} happened", step=step,
                   session="B", evidence={"slot": "system"})


def _result(shard: tuple[int, int] = (0, 1), reports: list[FindingReport] | None = None,
            covering: list[str] | None = None, **kw: Any) -> CampaignResult:
    cfg = CampaignSettings(seed=3, shard=shard, cover_share=shard, strict=kw.pop("strict",
                                                                                False))
    r = CampaignResult(agent={"name": "agent", "version": "1.0"}, initialize=INIT,
                       caps=Capabilities(system_prompt=True, load=True), settings=cfg,
                       examples_run=10, steps_run=40, reports=reports or [], **kw)
    r.covering = covering or []
    return r


def _report(oracle: str, steps: list[dict[str, Any]], cassette: str | None = None,
            extra: list[Finding] = ()) -> FindingReport:  # type: ignore[assignment]
    return FindingReport(status="failed", runs=3, reproduced=3, findings=[_finding(oracle), *extra],
                         steps=steps, requests=[],
                         cassette=Path(cassette) if cassette else None)


def _write(tmp_path: Path, name: str, result: CampaignResult) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(result_to_json(result, seconds=12.5)))
    return str(path)


def test_a_report_read_back_is_the_campaign_it_was_written_from() -> None:
    info = InfoReport(_finding("lifecycle.omitted-fallback", "info"), LEAK[:1], "excerpt")
    r = _result((1, 3), [_report("prompt.leak", LEAK, "c/leak.cassette",
                                 [_finding("prompt.lost", "SHOULD")]),
                         _report("agent.crash", CRASH)],
                covering=["aaa", "bbb"], info_reports=[info], info=[info.finding],
                judged={("prompt.leak", "RULE-prompt.leak"): 7}, explained=2,
                model_requests={"turn": 5}, cover_keys=["op:new", "op:load"],
                coverage={"op:new": 1}, covering_examples=2,
                error_codes={"mode-unknown": {-32602: 3, -32600: 1}},
                workspace={"override": {"AGENTS.md": [1, 4]}, "none": {"AGENTS.md": [2, 2]}})
    doc = json.loads(json.dumps(result_to_json(r)))
    back = result_from_json(doc)
    assert result_to_json(back) == doc
    assert [(rep.oracles, rep.steps, rep.cassette) for rep in back.reports] == [
        (["prompt.leak", "prompt.lost"], LEAK, Path("c/leak.cassette")),
        (["agent.crash"], CRASH, None)]
    assert back.settings.shard == (1, 3) and doc["shard"] == "2/3"
    assert back.unsent() == ["op:load"] and back.exit_code == 1
    assert back.error_codes == {"mode-unknown": {-32600: 1, -32602: 3}}
    assert back.workspace == {"none": {"AGENTS.md": [2, 2]}, "override": {"AGENTS.md": [1, 4]}}


def test_the_shards_merge_into_one_report_with_each_bug_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_write(tmp_path, f"r{k}.json", _result(
        (k, 3), reports, covering=[f"plan{k}"], coverage={"op:new": k + 1},
        cover_keys=["op:load"] if k < 2 else [], judged={("prompt.leak", "R"): 2},
        error_codes={"mode-unknown": {-32602: 1}, **({"valid": {-32603: k}} if k else {})},
        workspace={"append": {"AGENTS.md": [k, 2]}}))
        for k, reports in enumerate([[_report("prompt.leak", LEAK)],
                                     [_report("prompt.leak", LEAK_LONGER),
                                      _report("agent.crash", CRASH)],
                                     []])]
    out = tmp_path / "m.json"
    assert main(["report", "merge", *paths, "--report", f"json:{out}"]) == 1
    doc = json.loads(out.read_text())
    assert [(f["oracle"], f["steps"]) for f in doc["findings"]] == [
        ("prompt.leak", LEAK), ("agent.crash", CRASH)]
    assert (doc["examples_run"], doc["steps_run"], doc["seconds"]) == (30, 120, 12.5)
    assert doc["judged"] == [{"oracle": "prompt.leak", "rule": "R", "checks": 6}]
    assert doc["error_codes"] == {"mode-unknown": {"-32602": 3}, "valid": {"-32603": 3}}
    assert doc["workspace_files"]["by_mode"] == {"append": {"AGENTS.md": {"shown": 3,
                                                                          "turns": 6}}}
    assert doc["coverage"]["covering"] == ["plan0", "plan1", "plan2"]
    assert doc["coverage"]["first_example"] == {"op:new": 1}
    assert doc["coverage"]["unsent"] == ["op:load"]  # unsent where it was to be sent
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines()[0] == "merged 3 report(s)"
    assert "30 examples (30 drawn, 0 shrinking, 0 discarded draws), 120 steps, 2 findings " \
           "(2 MUST, 0 SHOULD), 12.5 s" in captured.out


def test_a_clean_merge_exits_0_and_writes_every_format(tmp_path: Path) -> None:
    paths = [_write(tmp_path, f"r{k}.json", _result((k, 2))) for k in range(2)]
    kinds = {"markdown": "m.md", "html": "m.html", "junit": "m.xml", "json": "m.json"}
    args = [w for kind, name in kinds.items() for w in ("--report", f"{kind}:{tmp_path / name}")]
    assert main(["report", "merge", *paths, *args]) == 0
    assert "No failing findings." in (tmp_path / "m.md").read_text()
    assert all((tmp_path / name).stat().st_size for name in kinds.values())


@pytest.mark.parametrize("shards, said", [
    ([(0, 3), (1, 3)], "shard(s) 3/3 missing"),
    ([(0, 2), (0, 2), (1, 2)], "shard 1/2 is in 2 of the reports"),
    ([(0, 2), (0, 3)], "split 2 different ways"),
])
def test_shards_missing_or_twice_are_a_warning(tmp_path: Path, shards: list[tuple[int, int]],
                                               said: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_write(tmp_path, f"r{i}.json", _result(s, covering=[f"x{s}"]))
             for i, s in enumerate(shards)]
    assert main(["report", "merge", *paths]) == 0
    assert said in capsys.readouterr().err


def test_a_covering_example_two_reports_ran_is_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_write(tmp_path, f"r{k}.json", _result((k, 2), covering=["same", f"own{k}"]))
             for k in range(2)]
    assert main(["report", "merge", *paths]) == 0
    assert "1 covering example(s) ran in more than one report" in capsys.readouterr().err


def _doc() -> dict[str, Any]:
    result = _result(reports=[_report("prompt.leak", LEAK)])
    doc: dict[str, Any] = json.loads(json.dumps(result_to_json(result)))
    return doc


BAD: dict[str, tuple[Any, str]] = {
    "not JSON": ("{", "cannot read"),
    "NaN": ('{"seed": NaN}', "NaN is not JSON"),
    "not an object": ([1, 2], "not a campaign report"),
    "a matrix document": ({"acp_fuzz_matrix": 1, "agents": []}, "not a campaign report"),
    "a finding without its oracle": (lambda d: d["findings"][0].pop("oracle"),
                                     "'oracle' is missing"),
    "a rate that is not N/M": (lambda d: d["findings"][0].update(rate="often"),
                               "findings[0].rate is not N/M"),
    "steps that are not steps": (lambda d: d["findings"][0].update(steps="new A"),
                                 "findings[0].steps is not a list of steps"),
    "an unknown capability": (lambda d: d["capabilities"].update(teleport=True),
                              "unknown capability"),
    "a count that is not a number": (lambda d: d.update(examples_run="many"),
                                     "'examples_run' is missing or not a int"),
    "a seed that is a boolean": (lambda d: d.update(seed=True), "'seed'"),
    "a shard that is not K/N": (lambda d: d.update(shard="4/3"), "'shard' is not K/N"),
}


@pytest.mark.parametrize("bad, said", BAD.values(), ids=BAD.keys())
def test_a_file_that_is_not_a_report_is_one_error_line_and_exit_2(
        tmp_path: Path, bad: Any, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    if callable(bad):
        doc = _doc()
        bad(doc)
        bad = doc
    path = tmp_path / "bad.json"
    path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    good = _write(tmp_path, "good.json", _result())
    assert main(["report", "merge", good, str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"acp-fuzz: error: {path}: "), captured.err
    assert said in lines[0], lines[0]


def test_reports_of_two_agents_or_two_strictnesses_do_not_merge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _result()
    other.initialize = {**INIT, "agentInfo": {"name": "other", "version": "2.0"}}
    for second, said in ((other, "is a campaign of other 2.0"),
                         (_result(strict=True), "differ in --strict")):
        paths = [_write(tmp_path, "a.json", _result()), _write(tmp_path, "b.json", second)]
        assert main(["report", "merge", *paths]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and said in err[0], err


def test_result_from_json_says_what_is_wrong() -> None:
    with pytest.raises(ReportError, match="not a campaign report"):
        result_from_json({"acp_fuzz_matrix": 1})
    doc = result_to_json(_result())
    for codes in ({"valid": {"x": 1}}, {"valid": {"-32602": "1"}}, {"valid": [1]}):
        with pytest.raises(ReportError, match=r"'error_codes\.valid' is not error codes"):
            result_from_json({**doc, "error_codes": codes})
    for by_mode in ({"none": []}, {"none": {"AGENTS.md": {"shown": 1}}}):
        with pytest.raises(ReportError, match=r"'workspace_files\.by_mode\.none' is not"):
            result_from_json({**doc, "workspace_files": {"by_mode": by_mode}})


LEAK_CASSETTE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "leak.cassette"


def test_a_cassette_is_found_beside_its_report_and_read_only_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI artifact holds ``cassettes/x.cassette`` beside ``report.json``, which names it by
    the runner's absolute path: merge finds it there and shows its turns. A cassette a report
    names outside the current folder and the reports' is not read, whatever it holds."""
    import shutil

    shard = tmp_path / "shards" / "acp-fuzz-1"
    (shard / "cassettes").mkdir(parents=True)
    shutil.copyfile(LEAK_CASSETTE, shard / "cassettes" / "leak.cassette")
    monkeypatch.chdir(tmp_path)
    for name, shown in (("/home/runner/work/x/acp-fuzz-results/cassettes/leak.cassette", True),
                        (str(LEAK_CASSETTE), False)):
        path = _write(shard, "report.json", _result(
            reports=[_report("prompt.leak", LEAK, name)]))
        assert main(["report", "merge", path, "--report", "html:m.html",
                     "--report", "json:m.json"]) == 1
        page = (tmp_path / "m.html").read_text()
        assert ('class="leaked"' in page) is shown
        (finding,) = json.loads((tmp_path / "m.json").read_text())["findings"]
        assert finding["cassette"] == (str(shard / "cassettes" / "leak.cassette") if shown
                                       else name)


def test_an_oracle_absorbed_in_one_shard_and_reported_in_another_is_reported() -> None:
    """An oracle that failed an example in one shard but shrank into another failure there is
    absorbed (never a pass); merged with a shard that reported it, it is reported, and
    absorbed no more. Read back from JSON, the absorbed oracle survives."""
    one = _result(shard=(0, 2), reports=[_report("prompt.leak", LEAK)])
    one.note_failing([_finding("prompt.leak"), _finding("prompt.lost")])
    assert [f.oracle for f in one.absorbed()] == ["prompt.lost"]
    assert [f.oracle for f in result_from_json(result_to_json(one)).absorbed()] \
        == ["prompt.lost"]
    two = _result(shard=(1, 2), reports=[_report("prompt.lost", CRASH)])
    two.note_failing([_finding("prompt.lost")])
    merged = CampaignResult.merge([one, two], one.settings)
    assert merged.absorbed() == []
    alone = CampaignResult.merge([one, _result(shard=(1, 2))], one.settings)
    assert [f.oracle for f in alone.absorbed()] == ["prompt.lost"]
