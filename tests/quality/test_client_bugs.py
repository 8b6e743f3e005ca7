"""End to end: ``acp-fuzz client`` (``run_client_campaign``) finds every planted bug of the
reference client (``python -m acp_fuzz.reference_client --bug NAME``), names the right oracle,
confirms it 3/3, shrinks it to the smallest capability set that shows it, and writes a cassette
that the client oracles judge the same offline; the correct reference client gives nothing
under every capability set there is, in one command line and across two.

Fast for a campaign (the stand-in answers without a model; about 0.2 s a client run here):
every campaign is bounded by a small ``max_examples``.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.client_oracles import judge_client
from acp_fuzz.core.events import ExampleDone
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.engine.client.campaign import (
    CASSETTE_KIND,
    ClientCampaignEvent,
    ClientCampaignResult,
    ClientSettings,
    run_client_campaign,
    run_scenario,
)
from acp_fuzz.reference_client import BUGS
from acp_fuzz.reporting.client import client_summary

pytestmark = [pytest.mark.quality, pytest.mark.timeout(900)]

Track = Callable[[int | None], None]
CLIENT = (sys.executable, "-m", "acp_fuzz.reference_client")

#: bug -> (the oracle it must be found as; how many capabilities the smallest set that shows
#: it advertises, the version above 1 counting as one; the client's extra arguments).
MINIMUM: dict[str, tuple[str, int, tuple[str, ...]]] = {
    # systemPrompt on session/new with nothing advertised, v1
    "unadvertised-prompt": ("client.prompt-unadvertised", 0, ()),
    # override asked for, only systemPrompt advertised
    "override-unadvertised": ("client.override-unadvertised", 1, ("--mode", "override")),
    # an image block in the prompt of session/new: systemPrompt advertised
    "image-block": ("client.prompt-non-text", 1, ()),
    # content [] on the reattach: systemPrompt and one way to reattach (load, resume, fork, v2)
    "empty-content": ("client.prompt-empty", 2, ()),
    # session/resume with nothing advertised, v1 (v2 commits to resume)
    "resume-ungated": ("client.capability-unadvertised", 0, ()),
    # session/new before initialize, with nothing advertised
    "new-before-initialize": ("client.before-initialize", 0, ()),
    # the reattach without the prompt: systemPrompt and one way to reattach
    "no-resend": ("client.prompt-not-resent", 2, ()),
    # the reattach with a line added: systemPrompt and one way to reattach
    "changed-on-reattach": ("client.prompt-changed", 2, ()),
    # _meta.systemPrompt where systemPrompt is advertised
    "legacy-meta-only": ("client.legacy-meta-prompt", 1, ()),
    # systemPrompt as a bare string where systemPrompt is advertised
    "string-prompt": ("client.prompt-malformed", 1, ()),
    # override sent where the shape is {"mode": {"override": null}} (or systemPrompt where
    # it is null): the capability set's shape counts as one (issue #33 §3)
    "null-is-advertised": ("client.override-unadvertised|client.prompt-unadvertised", 1,
                           ("--mode", "override")),
}


def test_every_planted_bug_has_a_minimum() -> None:
    assert set(MINIMUM) == set(BUGS)


def _campaign(scenario: Scenario, tmp_path: Path, n: int = 40,
              strict: bool = False) -> ClientCampaignResult:
    return run_client_campaign(scenario, ClientSettings(
        max_examples=n, cassette_dir=tmp_path / "cassettes", strict=strict))


@pytest.mark.parametrize("bug", sorted(MINIMUM))
def test_each_planted_bug_is_found_shrunk_and_recorded(bug: str, tmp_path: Path,
                                                       no_orphans: Track) -> None:
    oracles, size, extra = MINIMUM[bug]
    result = _campaign(Scenario((*CLIENT, *extra, "--bug", bug)), tmp_path)
    found = [r for r in result.reports if set(oracles.split("|")) & set(r.oracles)]
    assert found, [r.oracles for r in result.reports]
    rep = found[0]
    assert (rep.status, rep.rate) == ("failed", "3/3")
    assert rep.caps.size() == size, rep.caps.describe()
    f = next(f for f in rep.findings if f.oracle in oracles.split("|"))
    oracle = f.oracle
    assert f.evidence["method"]
    assert rep.cassette is not None and rep.cassette.is_file()
    cassette = read_cassette(rep.cassette)
    assert cassette.header.kind == CASSETTE_KIND
    assert CapabilitySet.from_wire(cassette.header.settings["capabilities"]) == rep.caps
    assert oracle in {f.oracle for f in judge_client(cassette.events).findings}
    assert result.exit_code == (1 if f.severity == "MUST" else 0)


def test_a_should_finding_fails_the_run_under_strict(tmp_path: Path,
                                                     no_orphans: Track) -> None:
    result = _campaign(Scenario((*CLIENT, "--bug", "no-resend")), tmp_path, strict=True)
    assert [r.oracles for r in result.reports] == [("client.prompt-not-resent",)]
    assert result.exit_code == 1


def test_a_bug_across_command_lines_is_found_on_the_second(tmp_path: Path,
                                                           no_orphans: Track) -> None:
    """``new`` in one process, ``prompt`` (a reattach) in the next: the session's prompt is
    known from the first connection."""
    scenario = Scenario.from_steps((*CLIENT, "--bug", "no-resend"), ["new", "prompt hi"])
    result = _campaign(scenario, tmp_path)
    rep = next(r for r in result.reports if "client.prompt-not-resent" in r.oracles)
    assert rep.caps.size() == 2, rep.caps.describe()
    f = rep.findings[0]
    assert (f.step, f.evidence["connection"]) == (1, 1)


def test_several_bugs_are_each_reported(tmp_path: Path, no_orphans: Track) -> None:
    result = _campaign(Scenario((*CLIENT, "--bug", "new-before-initialize", "--bug",
                                 "legacy-meta-only")), tmp_path)
    assert sorted(o for r in result.reports for o in r.oracles) == [
        "client.before-initialize", "client.legacy-meta-prompt"]
    assert [r.caps.size() for r in result.reports] == [0, 1]


def _every_capability_set() -> list[CapabilitySet]:
    sets = []
    for sp, override, load, resume, fork, close, lst in itertools.product((False, True),
                                                                          repeat=7):
        if override and not sp:
            continue
        sets.append(CapabilitySet(1, sp, override, load, resume, fork, close, lst))
        if not (load or resume or close or lst):
            sets.append(CapabilitySet(2, sp, override, fork=fork))
    return sets


@pytest.mark.parametrize("steps", [[], ["new", "prompt again", "list"]],
                         ids=["one command line", "new, prompt, list"])
def test_the_correct_client_gives_nothing_under_every_capability_set(
        steps: list[str], no_orphans: Track) -> None:
    sets = _every_capability_set()
    assert len(sets) == 102
    for caps in sets:
        for extra in ((), ("--mode", "override"))[: 1 + caps.system_prompt]:
            run = run_scenario(Scenario.from_steps((*CLIENT, *extra), steps), caps)
            assert run.findings == [], (caps.describe(), extra, run.findings)


def test_the_correct_client_gives_nothing_under_null_shapes_or_changed_capabilities(
        no_orphans: Track) -> None:
    """The capability shapes clients are never shown otherwise (issue #33 §3): null for
    "not offered" at each level, and a prompt capability that changes from the second
    connection on (override dropped, the field dropped, both added)."""
    sets = [CapabilitySet(v, sp, override, load=True, shape=shape, changes=changes)
            for v in (1, 2) for changes in (False, True)
            for sp, override, shape in ((False, False, "null"), (True, False, "mode-null"),
                                        (True, False, "override-null"), (True, True, ""),
                                        (False, False, ""))]
    for caps in sets:
        for extra in ((), ("--mode", "override")):
            run = run_scenario(Scenario.from_steps((*CLIENT, *extra), ["new", "prompt again"]),
                               caps)
            assert run.findings == [], (caps.describe(), extra, run.findings)
    # The planted client that reads null as advertised is caught by the same rules.
    bad = Scenario.from_steps((*CLIENT, "--mode", "override", "--bug", "null-is-advertised"),
                              ["new"])
    run = run_scenario(bad, CapabilitySet(1, True, False, shape="override-null"))
    assert {f.oracle for f in run.findings} == {"client.override-unadvertised"}
    run = run_scenario(bad, CapabilitySet(1, shape="null"))
    assert {f.oracle for f in run.findings} == {"client.prompt-unadvertised"}


def test_the_correct_client_gives_nothing_in_a_campaign(tmp_path: Path,
                                                        no_orphans: Track) -> None:
    result = _campaign(Scenario(CLIENT), tmp_path, n=15)
    assert (result.reports, result.info, result.exit_code) == ([], [], 0)
    assert result.examples_run == 15
    assert result.judged[("client.prompt-unadvertised", "SP-CLIENT-GATE-MUSTNOT")] > 0
    assert not (tmp_path / "cassettes").exists() or not any((tmp_path / "cassettes").iterdir())


def test_a_time_budget_stops_the_search_early(tmp_path: Path, no_orphans: Track) -> None:
    """``client --time-budget``: no new capability set once the budget is spent. A budget of
    a nanosecond is spent before the first set has run its client (or, on a clock too coarse
    to see it, the second): not the 15 a campaign without one runs (the test above)."""
    result = run_client_campaign(Scenario(CLIENT), ClientSettings(
        max_examples=15, cassette_dir=tmp_path / "c", time_budget=1e-9))
    assert result.out_of_time
    assert result.examples_run <= 1
    assert (result.reports, result.exit_code) == ([], 0)
    assert client_summary(result, 0.0).endswith(", stopped at --time-budget 1e-09 s")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_reattaching_careful_client_is_judged_on_re_sending_at_every_seed(
        seed: int, tmp_path: Path, no_orphans: Track) -> None:
    """The covering sets keep the prompt capability on both connections, whatever the seed:
    a random draw did so only now and then (``changes`` on every other set), and the SDK
    clients' campaigns at seed 0 came out with the re-send rules never judged."""
    scenario = Scenario.from_steps(CLIENT, ["new", "prompt hi"])
    result = run_client_campaign(scenario, ClientSettings(
        max_examples=3, seed=seed, cassette_dir=tmp_path / "c"))
    assert result.reports == []
    judged = {o for (o, _), n in result.judged.items() if n}
    assert {"client.prompt-not-resent", "client.prompt-changed"} <= judged


def test_a_covering_set_s_failure_is_shrunk_flag_by_flag(tmp_path: Path,
                                                         no_orphans: Track) -> None:
    # with two examples only the covering sets run: the failure (no re-send) is seen first on
    # everything advertised, and shrunk by the greedy walk, not by Hypothesis
    scenario = Scenario.from_steps((*CLIENT, "--bug", "no-resend"), ["new", "prompt hi"])
    result = run_client_campaign(scenario, ClientSettings(
        max_examples=2, cassette_dir=tmp_path / "c"))
    (rep,) = result.reports
    assert rep.oracles == ("client.prompt-not-resent",)
    assert rep.caps.size() == 2, rep.caps.describe()
    assert (rep.status, rep.rate) == ("failed", "3/3")


#: A planted bug no covering set shows: the client reads a null prompt capability as
#: advertised, and no covering set spells one null (only a drawn set's ``shape`` does).
DRAWN_ONLY = Scenario((*CLIENT, "--mode", "override", "--bug", "null-is-advertised"))


def _first_failure(tmp_path: Path, name: str, db: Path | None
                   ) -> tuple[ClientCampaignResult, list[CapabilitySet]]:
    """A campaign that stops at its first failure, and the sets it ran until then."""
    tried: list[CapabilitySet] = []

    def on_event(ev: ClientCampaignEvent) -> None:
        if isinstance(ev, ExampleDone) and ev.capability_set is not None:
            tried.append(ev.capability_set)

    result = run_client_campaign(DRAWN_ONLY, ClientSettings(
        max_examples=40, max_failures=1, cassette_dir=tmp_path / name,
        db=None if db is None else str(db)), on_event)
    return result, tried


def test_a_database_gives_the_next_run_a_drawn_failure_first(tmp_path: Path,
                                                             no_orphans: Track) -> None:
    """``client --db FOLDER``: the failing capability set that the search drew (after the
    covering sets, which did not fail) is stored, and the next run with the folder tries
    it first, before the covering sets: the same failure, in no more examples."""
    db = tmp_path / "db"
    first, tried = _first_failure(tmp_path, "first", db)
    (rep,) = first.reports
    assert set(rep.oracles) & {"client.prompt-unadvertised", "client.override-unadvertised"}
    assert tried[:3] == list(CapabilitySet.covering())
    assert tried[-1] not in CapabilitySet.covering() and rep.caps.shape, rep.caps.describe()
    assert any(p.is_file() for p in db.rglob("*"))

    again, tried_again = _first_failure(tmp_path, "again", db)
    (rep_again,) = again.reports
    assert (rep_again.oracles, rep_again.caps, rep_again.status) == (
        rep.oracles, rep.caps, "failed")
    assert tried_again[0] == rep.caps
    assert again.examples_run <= first.examples_run


def test_without_a_database_a_campaign_writes_nothing_but_its_cassettes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_orphans: Track) -> None:
    """No ``--db``: no database is opened, nor Hypothesis' own default one (a
    ``.hypothesis`` folder where the campaign runs)."""
    from acp_fuzz.engine.campaign import database

    def no_database(spec: str) -> None:
        raise AssertionError(f"a database was opened: {spec}")

    monkeypatch.setattr(database, "open_database", no_database)
    monkeypatch.chdir(tmp_path)
    result, _ = _first_failure(tmp_path, "cassettes", None)
    assert len(result.reports) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cassettes"]



def test_two_workers_find_a_planted_bug_once(tmp_path: Path, no_orphans: Track) -> None:
    """``client --workers 2``: each worker runs its share of the covering sets and its own
    search; the bug both may find is reported once, with its cassette, and no worker, client,
    stand-in or resource tracker outlives the run, nor its temporary database. Through the
    command line: in this process, the spawn context's resource tracker would live as long as
    pytest does."""
    from tests.integration._support import run_cli

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    report = tmp_path / "report.json"
    proc = run_cli(tmp_path, "client", "--workers", "2", "-n", "8", "--cassette-dir",
                   str(tmp_path / "c"), "--report", f"json:{report}", "--",
                   *CLIENT, "--bug", "new-before-initialize", env={"TMPDIR": str(tmp)})
    assert proc.returncode == 1, proc.stderr
    data = json.loads(report.read_text())
    (finding,) = data["findings"]  # both workers find it: reported once
    assert finding["oracle"] == "client.before-initialize" and finding["status"] == "failed"
    cassette = read_cassette(Path(finding["cassette"]))
    assert cassette.header.kind == CASSETTE_KIND
    assert data["examples_run"] >= 2
    assert list(tmp.iterdir()) == []
