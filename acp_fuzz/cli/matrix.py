"""``acp-fuzz matrix``: a bounded campaign per agent, and one table of which agent follows
which rule (Markdown and a self-contained HTML page; :mod:`acp_fuzz.reporting.matrix`).

Besides its campaign, each agent's reviewed corpus is replayed against it: the cassettes
under ``<corpus>/<profile name>/`` (``--corpus``, default ``cassettes/real``) that were
recorded from the agent version the profile pins (or, pinning none, that the agent reports),
each with :func:`acp_fuzz.engine.campaign.replay.replay_cassette` against the profile's agent, never
the command the cassette records. A cassette that still fails makes its rule fail in the
table, whether the campaign drew that failure or not.

``docs/matrix.md`` is this command's output for the pinned agents (the command is in its
first lines). Exit codes: 0 when the table is written (findings are the table's content, not
a failure of the command), 2 for a usage error, 130 when interrupted (the table of what ran
so far is still written).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import typer

from acp_fuzz.cli.app import (
    app,
    atomic_write,
    check_writable_dir,
    err,
    error,
    fail,
    install_interrupt_handlers,
    read_json,
)
from acp_fuzz.cli.options import (
    PLUGIN_OPTION,
    SANDBOX_FS_OPTION,
    SANDBOX_NET_OPTION,
    SEED_OPTION,
    TIMEOUT_OPTION,
    WORKERS_OPTION,
    cassette_dir_option,
    enter_sandbox_net,
    max_examples_option,
    protocol_option,
    require_bwrap,
    time_budget_option,
)
from acp_fuzz.cli.plugins import load_plugins
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.protocol import CHOICES as PROTOCOL_CHOICES
from acp_fuzz.core.scenarios import Scenario
from acp_fuzz.core.version import __version__
from acp_fuzz.engine.campaign.runner import HarnessError, TargetSpec
from acp_fuzz.reporting.kept import unaccounted

__all__ = ["matrix"]


# The options of ``matrix`` (declared here, not in its signature, so that the command reads
# as what it does; typer reads them the same either way). Those other commands take too are
# in acp_fuzz/cli/options.py, with the defaults of a table here: a bounded campaign per agent,
# all offered the one version 1.
# Not PROFILE_OPTION: the agents of the table, several, every profile by default.
_PROFILE: Any = typer.Option(
    [], "--profile", "-p",
    help="An agent to test (repeatable; default: every profile, see `acp-fuzz profiles`).")
_MAX_EXAMPLES: Any = max_examples_option(25)
_TIME_BUDGET: Any = time_budget_option(600.0)
_PROTOCOL: Any = protocol_option("1")
_CASSETTE_DIR: Any = cassette_dir_option(Path("cassettes/matrix"))
_MARKDOWN: Any = typer.Option(Path("matrix.md"), "--markdown", help="The Markdown table.")
_HTML: Any = typer.Option(Path("matrix.html"), "--html", help="The self-contained HTML page.")
_JSON: Any = typer.Option(
    None, "--json",
    help="Also write the command, every campaign's JSON report, the corpus replays and "
         "each cell (with where its verdict came from) here.")
_FROM_JSON: Any = typer.Option(
    None, "--from-json", metavar="PATH",
    help="Run nothing: write the table again from what an earlier --json saved.")
_CORPUS: Any = typer.Option(
    None, "--corpus", metavar="DIR",
    help="Where the reviewed corpus of each agent is: DIR/<profile name>/*.cassette "
         "(default: cassettes/real). Each cassette recorded from the same agent version "
         "is replayed against the profile's agent; one that still fails makes its rule "
         "FAIL, with its cassette, even when the campaign did not draw it.")
_NO_CORPUS: Any = typer.Option(False, "--no-corpus", metavar="",
                               help="Replay no corpus: the campaigns alone.")
_CLIENT: Any = typer.Option(
    [], "--client", metavar="TITLE=SCENARIO",
    help="A client's column: `acp-fuzz client` runs the scenario file (TOML with its "
         "command, docs/clients.md) with this matrix's examples, seed and time budget, and "
         "the table gets a client section. Repeatable; the same TITLE again adds a scenario "
         "to its column. With --client and no --profile, no agent is run.")
_CORPUS_RUNS: Any = typer.Option(
    3, "--corpus-runs", min=1, metavar="N",
    help="Replays of each corpus cassette (a failure in some of them only: flaky).")


@app.command()
def matrix(
    profile: list[str] = _PROFILE,
    max_examples: int = _MAX_EXAMPLES,
    time_budget: float = _TIME_BUDGET,
    seed: int = SEED_OPTION,
    protocol: str = _PROTOCOL,
    timeout: float = TIMEOUT_OPTION,
    workers: int = WORKERS_OPTION,
    sandbox_net: bool = SANDBOX_NET_OPTION,
    cassette_dir: Path = _CASSETTE_DIR,
    markdown: Path = _MARKDOWN,
    html_out: Path = _HTML,
    json_out: Path | None = _JSON,
    from_json: Path | None = _FROM_JSON,
    sandbox_fs: bool = SANDBOX_FS_OPTION,
    plugin: list[str] = PLUGIN_OPTION,
    corpus: Path | None = _CORPUS,
    no_corpus: bool = _NO_CORPUS,
    corpus_runs: int = _CORPUS_RUNS,
    client: list[str] = _CLIENT,
) -> None:
    """Run a bounded campaign per agent, replay its reviewed corpus, and write one
    conformance table: rows are rules, columns are agents, a cell is pass, fail (with its
    cassette), info or not tested, and says when its verdict came from the corpus.

    The corpus of an agent is the folder of cassettes kept for it, `cassettes/real/<profile
    name>/` by default (--corpus DIR for DIR/<profile name>/, --no-corpus for none). Each
    cassette recorded from the agent version the profile pins (or, pinning none, the version
    the agent reports; others are skipped, and the table says so) is replayed against the
    profile's agent, never the command it records: FAILED or FLAKY makes its rule FAIL or
    flaky, linked to the cassette, whether the campaign drew that failure or not; FIXED (or
    PASSED) fails nothing and is listed under the agent.

    The rules of a --plugin's checks get rows of their own. An agent that does not speak the
    --protocol offered is not tested, with why. --client TITLE=SCENARIO adds a client's
    column to a table of the client rules (docs/clients.md, "A table of clients")."""
    load_plugins(plugin)
    for path in (markdown, html_out, json_out):
        if path is not None and not path.parent.exists():
            fail(f"folder does not exist: {path.parent}")
    if from_json is not None:
        # The corpus replays are in the document (or, in one from before them, are not).
        _write(*_load(from_json), markdown=markdown, html_out=html_out, json_out=json_out)
        raise typer.Exit(0)

    corpus_root = _corpus_root(corpus, no_corpus)
    kept = _kept(corpus_root)
    if protocol not in PROTOCOL_CHOICES:
        fail(f"--protocol must be one of {', '.join(PROTOCOL_CHOICES)}, not {protocol!r}")
    clients = _clients(client)
    columns, pinned = _columns(profile) if profile or not clients else ({}, {})
    if protocol in ("1", "2"):
        # Before any agent runs: a table for this version would pass a cell the review fails.
        _refuse_unaccounted([line for n in columns for line in unaccounted(
            kept, columns[n], pinned[n], int(protocol))])
    check_writable_dir(cassette_dir, "--cassette-dir")
    if sandbox_fs:
        require_bwrap()
    enter_sandbox_net(sandbox_net)

    argv = ["acp-fuzz", "matrix", *sys.argv[2:]] if sys.argv[1:2] == ["matrix"] else \
        ["acp-fuzz", "matrix"]
    run = _Run(columns=columns, pinned=pinned, kept=kept, corpus_root=corpus_root,
               corpus_runs=corpus_runs, protocol=protocol, timeout=timeout,
               sandbox_fs=sandbox_fs, max_examples=max_examples, seed=seed,
               time_budget=time_budget, cassette_dir=cassette_dir, workers=workers,
               clients=clients)
    agents, tested, interrupted = run.all()
    if not agents and not tested:
        err.print("acp-fuzz: interrupted before any agent ran; nothing to write", markup=False)
        raise typer.Exit(130)
    _write(argv, agents, interrupted, markdown=markdown, html_out=html_out, json_out=json_out,
           corpus_root=None if corpus_root is None else str(corpus_root), clients=tested)
    if protocol == "auto":
        # The version each agent speaks is known only now: the table is written, and the
        # run still fails, so nobody reads a pass that the review contradicts.
        _refuse_unaccounted([line for e in agents for line in e.get("unaccounted", [])])
    raise typer.Exit(130 if interrupted else 0)


def _corpus_root(corpus: Path | None, no_corpus: bool) -> Path | None:
    """The folder of the agents' reviewed corpora (``None``: no corpus); exit 2 for a
    ``--corpus`` that is not a folder or that ``--no-corpus`` contradicts."""
    if corpus is not None and no_corpus:
        fail("--corpus and --no-corpus: give one of them")
    if corpus is not None and not corpus.is_dir():
        fail(f"--corpus {corpus}: not a folder")
    # The default root may be missing (a checkout without the reviewed cassettes): no corpus.
    return None if no_corpus else (corpus if corpus is not None else Path("cassettes/real"))


def _clients(given: list[str]) -> dict[str, list[Scenario]]:
    """The client columns of ``--client TITLE=SCENARIO`` options, in order: each title and
    its scenarios; exit 2 for a malformed option or a scenario file that cannot be read."""
    from acp_fuzz.core.scenarios import ScenarioError
    from acp_fuzz.engine.client.scenario_file import read_scenario

    out: dict[str, list[Scenario]] = {}
    for spec in given:
        title, sep, path = spec.partition("=")
        if not sep or not title.strip() or not path:
            fail(f"--client {spec!r}: give TITLE=SCENARIO, a column's title and a scenario "
                 "file (TOML, docs/clients.md)")
        try:
            scenario = read_scenario(Path(path))
        except ScenarioError as e:
            fail(f"--client {title.strip()}: {e}")
        out.setdefault(title.strip(), []).append(scenario)
    return out


def _slug(title: str) -> str:
    """``title`` as one safe file name part (letters, digits, ``_``, ``-``: no dot, no
    slash, so never a path of its own)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", title).strip("-")[:40] or "client"


def _columns(profiles: list[str]) -> tuple[dict[str, str], dict[str, str | None]]:
    """The agents to test, each as given: its column's name and the version its profile
    pins; exit 2 for a profile not known or a profile file that cannot be read."""
    from acp_fuzz.engine.agents.profiles import PROFILES, ProfileError, get_profile, is_profile_path

    names = list(dict.fromkeys(profiles)) or list(PROFILES)
    unknown = [n for n in names if not is_profile_path(n) and n not in PROFILES]
    if unknown:
        fail(f"unknown profile {unknown[0]!r} (known: {', '.join(sorted(PROFILES))}, or a "
             "profile file: ./my-agent.toml)")
    # A profile file's column is named by the name inside it; a bad file stops here.
    columns: dict[str, str] = {}
    pinned: dict[str, str | None] = {}
    for n in names:
        try:
            prof = get_profile(n)
        except ProfileError as e:
            fail(str(e))
        columns[n], pinned[n] = prof.name, prof.version
    return columns, pinned


@dataclasses.dataclass(frozen=True)
class _Run:
    """The matrix's runs: a campaign per agent (``columns``: each profile as given, and its
    column's name), then the replays of its corpus."""

    columns: dict[str, str]
    pinned: dict[str, str | None]
    kept: list[Any]
    corpus_root: Path | None
    corpus_runs: int
    protocol: str
    timeout: float
    sandbox_fs: bool
    max_examples: int
    seed: int
    time_budget: float
    cassette_dir: Path
    workers: int
    #: The client columns: each title and its scenarios.
    clients: dict[str, list[Scenario]] = dataclasses.field(default_factory=dict)

    def all(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        """Every agent's entry of the matrix JSON, in order, then every client's, and
        whether interrupted (the entries then say what ran before)."""
        agents: list[dict[str, Any]] = []
        clients: list[dict[str, Any]] = []
        interrupted = False
        restore = install_interrupt_handlers()
        try:
            interrupted = any(self._agent(given, agents) for given in self.columns) or any(
                self._client(k, title, clients) for k, title in enumerate(self.clients))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            restore()
        return agents, clients, interrupted

    def _client(self, k: int, title: str, clients: list[dict[str, Any]]) -> bool:
        """Run one client's scenarios, its entry added to ``clients`` first (an interrupt
        keeps the reports made); whether a campaign was interrupted."""
        from acp_fuzz.engine.campaign.workers import run_client_parallel
        from acp_fuzz.engine.client.campaign import ClientSettings, run_client_campaign
        from acp_fuzz.reporting.client import client_result_to_json

        entry: dict[str, Any] = {"title": title, "reports": []}
        clients.append(entry)
        scenarios = self.clients[title]
        for i, sc in enumerate(scenarios, 1):
            # A title is a user's text: the folder is named by a safe form of it.
            folder = self.cassette_dir / "clients" / f"{k + 1}-{_slug(title)}-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            cfg = ClientSettings(max_examples=self.max_examples, seed=self.seed,
                                 cassette_dir=folder, time_budget=self.time_budget,
                                 portable=True, sandbox_fs=self.sandbox_fs)
            err.print(terminal(f"{title}: scenario {i}/{len(scenarios)} ({self.max_examples} "
                               f"examples, at most {self.time_budget:g} s)"), markup=False)
            try:
                result = (run_client_parallel(sc, cfg, self.workers) if self.workers > 1
                          else run_client_campaign(sc, cfg))
            except HarnessError as e:
                err.print(terminal(f"{title}: not run: {e}"), markup=False)
                entry["not_run"] = _first_line(str(e))
                return False
            entry["reports"].append(client_result_to_json(result))
            err.print(terminal(f"{title}: {len(result.reports)} finding(s) in "
                               f"{result.examples_run} examples"), markup=False)
            if result.interrupted:
                return True
        return False

    def _agent(self, given: str, agents: list[dict[str, Any]]) -> bool:
        """Run one agent's campaign and replay its corpus, its entry added to ``agents``
        before its corpus is replayed (an interrupt keeps it); whether the campaign was
        interrupted."""
        from acp_fuzz.engine.campaign.search import CampaignSettings, FailureFound, run_campaign
        from acp_fuzz.engine.campaign.workers import run_parallel
        from acp_fuzz.reporting import result_to_json

        name = self.columns[given]
        try:
            spec = TargetSpec.resolve(None, given, timeout=self.timeout,
                                      protocol=self.protocol, sandbox_fs=self.sandbox_fs)
        except HarnessError as e:
            err.print(terminal(f"{name}: not run: {e}"), markup=False)
            agents.append(self._not_started(name, e))
            return False
        cfg = CampaignSettings(max_examples=self.max_examples, seed=self.seed,
                               cassette_dir=self.cassette_dir / name,
                               time_budget=self.time_budget, portable=True)
        (self.cassette_dir / name).mkdir(parents=True, exist_ok=True)
        err.print(terminal(f"{name}: fuzzing ({self.max_examples} examples, at most "
                           f"{self.time_budget:g} s)"), markup=False)

        def on_event(ev: object) -> None:
            if isinstance(ev, FailureFound):
                err.print(terminal(f"{name}: found a failure ({', '.join(ev.oracles)}); "
                                   "shrinking it"), markup=False)

        t0 = time.monotonic()
        try:
            result = (run_parallel(spec, cfg, self.workers, on_event) if self.workers > 1
                      else run_campaign(spec, cfg, on_event))
        except HarnessError as e:
            err.print(terminal(f"{name}: not run: {e}"), markup=False)
            entry: dict[str, Any] = {"profile": name, "not_run": _first_line(str(e))}
            agents.append(entry)
            # The campaign could not run (a calibration that failed, say): what the
            # reviewed cassettes still show is known all the same.
            self._replay_corpus(given, entry)
            return False
        doc = result_to_json(result)
        entry = {"profile": name, "report": doc}
        agents.append(entry)
        err.print(terminal(f"{name}: {doc['examples_run']} examples, {doc['steps_run']} "
                           f"steps in {time.monotonic() - t0:.0f} s"), markup=False)
        if result.interrupted:
            return True
        self._replay_corpus(given, entry)
        return False

    def _not_started(self, name: str, e: HarnessError) -> dict[str, Any]:
        """The entry of an agent that cannot be started: its corpus cannot be replayed
        either."""
        entry: dict[str, Any] = {"profile": name, "not_run": _first_line(str(e))}
        if self.corpus_root is not None:
            folder = self.corpus_root / name
            entry["corpus"] = {"dir": str(folder), "runs": self.corpus_runs,
                               "replayed": [], "skipped": []}
            if _corpus_of(folder):
                entry["corpus"]["not_replayed"] = "the agent was not run"
        return entry

    def _replay_corpus(self, given: str, entry: dict[str, Any]) -> None:
        """Replay the agent's corpus into its entry, tied to its kept findings."""
        if self.corpus_root is not None:
            name, pinned = self.columns[given], self.pinned[given]
            entry["corpus"] = _replay_corpus(
                given, name, self.corpus_root / name, entry, pinned=pinned,
                protocol=self.protocol, runs=self.corpus_runs, timeout=self.timeout,
                sandbox_fs=self.sandbox_fs)
            _mark_kept(entry, self.kept, name, pinned, self.corpus_root)


def _replay_corpus(given: str, name: str, folder: Path, entry: dict[str, Any], *,
                   pinned: str | None, protocol: str, runs: int, timeout: float,
                   sandbox_fs: bool) -> dict[str, Any]:
    """Replay the corpus of one agent (every cassette under ``folder``) against its profile
    ``given``, and say what each gave, as the matrix JSON keeps it. A cassette recorded from
    another agent version than the profile pins (``pinned``) or the campaign's agent reported,
    from another agent, or in another ACP version, is skipped, with why. Filled in as it
    goes, so that an interrupt keeps the replays made."""
    from acp_fuzz.core.cassette import read_cassette
    from acp_fuzz.core.errors import CassetteError
    from acp_fuzz.core.protocol import agent_info, answered
    from acp_fuzz.engine.campaign.replay import replay_cassette
    from acp_fuzz.reporting.matrix import corpus_entry, corpus_skip

    out: dict[str, Any] = {"dir": str(folder), "runs": runs, "replayed": [], "skipped": []}
    paths = _corpus_of(folder)
    if not paths:
        return out
    init = (entry.get("report") or {}).get("agent")
    reported = agent_info(init)
    version = reported.get("version") if isinstance(reported.get("version"), str) else None
    agent = reported.get("name") if isinstance(reported.get("name"), str) else None
    speaks = answered(init) if isinstance(init, dict) else (
        int(protocol) if protocol in ("1", "2") else None)
    err.print(terminal(f"{name}: replaying its corpus: {len(paths)} cassette"
                       f"{'s' if len(paths) != 1 else ''} under {folder}"), markup=False)
    try:
        for path in paths:
            try:
                header = read_cassette(path).header
            except CassetteError as e:
                out["replayed"].append({"cassette": str(path), "verdict": "ERROR",
                                        "runs": 0, "reproduced": 0, "error": e.reason,
                                        "failing": [], "recorded": []})
                continue
            why = corpus_skip(header.initialize, pinned=pinned, reported=version, agent=agent,
                              protocol=speaks)
            if why is not None:
                out["skipped"].append({"cassette": str(path), "why": why})
                err.print(terminal(f"{name}: skipped {path}: {why}"), markup=False)
                continue
            recorded = header.meta.get("findings")
            result = replay_cassette(path, profile=given, runs=runs, timeout=timeout,
                                     sandbox_fs=sandbox_fs)
            out["replayed"].append(corpus_entry(
                result, recorded if isinstance(recorded, list) else ()))
            err.print(terminal(f"{name}: {result.line()}"), markup=False)
    except KeyboardInterrupt:
        out["interrupted"] = True
        entry["corpus"] = out
        raise
    return out


def _kept(corpus_root: Path | None) -> list[Any]:
    """The kept findings of the corpus (``kept.toml`` in its root; none without one)."""
    from acp_fuzz.reporting.kept import KEPT_FILE, KeptError, load_kept

    if corpus_root is None:
        return []
    try:
        return load_kept(corpus_root / KEPT_FILE)
    except KeptError as e:
        fail(str(e))


def _refuse_unaccounted(lines: list[str]) -> None:
    """Exit 2, saying which kept findings have no cassette for the table's ACP version."""
    if lines:
        for line in lines[:-1]:
            error(line)
        fail(lines[-1])


def _mark_kept(entry: dict[str, Any], kept: list[Any], name: str, pinned: str | None,
               corpus_root: Path) -> None:
    """Tie the agent's corpus replays to its kept findings (kept.toml), for the ACP version
    it spoke: each replayed kept cassette names its finding, rule and clock; a finding that
    cannot exist in this version is listed with why; one that says nothing about it is
    recorded as ``unaccounted`` (``--protocol auto`` fails on it after the table)."""
    from acp_fuzz.core.protocol import answered
    from acp_fuzz.reporting.kept import unaccounted

    corpus = entry.get("corpus")
    init = (entry.get("report") or {}).get("agent")
    if not isinstance(corpus, dict) or not isinstance(init, dict):
        return
    speaks = answered(init)
    mine = [k for k in kept if k.applies(name, pinned)]
    by_path = {str(corpus_root / k.cassettes[speaks]): k for k in mine if speaks in k.cassettes}
    seen = {str(r.get("cassette")) for r in corpus.get("replayed", [])} | \
        {str(s.get("cassette")) for s in corpus.get("skipped", [])}
    for path in sorted(set(by_path) - seen):
        # Named by the review, absent from the folder: evidence that did not run.
        corpus.setdefault("replayed", []).append(
            {"cassette": path, "verdict": "ERROR", "runs": 0, "reproduced": 0,
             "error": "the kept cassette is missing", "failing": [], "recorded": []})
    for r in corpus.get("replayed", []):
        k = by_path.get(str(r.get("cassette")))
        if k is not None:
            r["kept"] = {"finding": k.finding, "oracle": k.oracle, "rule": k.rule,
                         "clock": k.clock}
    corpus["kept_absent"] = [{"finding": k.finding, "oracle": k.oracle, "rule": k.rule,
                              "why": k.absent[speaks]} for k in mine if speaks in k.absent]
    entry["unaccounted"] = unaccounted(kept, name, pinned, speaks)


def _corpus_of(folder: Path) -> list[Path]:
    """The cassettes of one agent's corpus, in path order (none when there is no folder)."""
    from acp_fuzz.engine.campaign.replay import cassettes_in

    return cassettes_in(folder) if folder.is_dir() else []


#: The format of what ``--json`` writes and ``--from-json`` reads.
MATRIX_JSON = 1
def _load(path: Path) -> tuple[list[str], list[dict[str, Any]], bool, str | None,
                              list[dict[str, Any]]]:
    """What an earlier ``--json`` saved: the command, the agents, whether interrupted, the
    corpus root (``None``: no corpus, or a document from before it), the clients.

    A document is a stranger's when it was not made here: read with
    :func:`~acp_fuzz.cli.app.read_json`, each mistake one error line."""
    doc = read_json(path, f"--from-json {path}")
    if not isinstance(doc, dict) or doc.get("acp_fuzz_matrix") != MATRIX_JSON \
            or not isinstance(doc.get("agents"), list) \
            or not all(isinstance(a, dict) and isinstance(a.get("profile"), str)
                       for a in doc["agents"]) \
            or not isinstance(doc.get("clients", []), list) \
            or not all(isinstance(c, dict) and isinstance(c.get("title"), str)
                       and isinstance(c.get("reports", []), list)
                       for c in doc.get("clients", [])):
        fail(f"--from-json {path}: not a matrix document written by acp-fuzz matrix --json")
    command = doc.get("command")
    argv = [str(a) for a in command] if isinstance(command, list) else ["acp-fuzz", "matrix"]
    # A document from before the corpus has no root: its table has no corpus paragraph.
    root = doc.get("corpus_root")
    return (argv, doc["agents"], bool(doc.get("interrupted")),
            str(root) if isinstance(root, str) else None, doc.get("clients", []))


def _write(argv: list[str], agents: list[dict[str, Any]], interrupted: bool,
           corpus_root: str | None = None, clients: list[dict[str, Any]] | None = None, *,
           markdown: Path, html_out: Path, json_out: Path | None) -> None:
    from acp_fuzz.reporting.matrix import (
        cells_to_json,
        column_from_report,
        column_not_run,
        matrix_html,
        matrix_markdown,
        matrix_preamble,
    )

    try:
        columns = []
        for a in agents:
            # "corpus" is missing in a document from before the corpus, and with --no-corpus.
            found = a.get("corpus")
            corpus = found if isinstance(found, dict) else None
            columns.append(
                column_from_report(a["report"], profile=a["profile"], corpus=corpus)
                if isinstance(a.get("report"), dict)
                else column_not_run(a["profile"], str(a.get("not_run") or "no report"),
                                    corpus=corpus))
    except (AttributeError, TypeError, ValueError, KeyError, OverflowError) as e:
        # Only a hand-edited or foreign --from-json document gets here.
        fail(f"a campaign report in the matrix document is malformed ({type(e).__name__})")
    # The command may come from a hand-made --from-json document: a code span like every
    # other text (no backtick in it can end the span), clipped.
    command = shlex.join(argv)
    kw: dict[str, Any] = {"version": __version__, "interrupted": interrupted,
                          "corpus_root": corpus_root}
    client_md, client_html = _client_tables(clients or [], markdown.parent.resolve(),
                                            html_out.parent.resolve())
    # With client columns only, the paragraphs about agent cells and corpora would be noise.
    md_pre, html_pre = (matrix_preamble(command, **kw),
                        matrix_preamble(command, plain=True, **kw))
    if not columns:
        md_pre, html_pre = md_pre[:1], html_pre[:1]
    atomic_write(markdown, (matrix_markdown(columns, preamble=md_pre,
                                            base=markdown.parent.resolve())
                            + (f"\n{client_md}" if client_md else "")))
    atomic_write(html_out, matrix_html(columns, preamble=html_pre,
                                       base=html_out.parent.resolve(), after=client_html))
    if json_out is not None:
        # Each agent's cells too, with where each verdict came from (written, never read:
        # --from-json builds them again from the reports and the corpus replays).
        saved = [{**{k: v for k, v in a.items() if k != "cells"}, "cells": cells_to_json(col)}
                 for a, col in zip(agents, columns, strict=True)]
        doc = {"acp_fuzz_matrix": MATRIX_JSON, "acp_fuzz_version": __version__,
               "command": argv, "interrupted": interrupted, "corpus_root": corpus_root,
               "agents": saved, "clients": clients or []}
        atomic_write(json_out, json.dumps(doc, indent=2, ensure_ascii=False, default=repr))
    err.print(terminal(f"wrote {markdown} and {html_out}"), markup=False)


def _client_tables(clients: list[dict[str, Any]], md_base: Path, html_base: Path
                   ) -> tuple[str, str]:
    """The client section in Markdown and in HTML ("" and "" without a client column), each
    linking cassettes from its own folder."""
    from acp_fuzz.reporting.client_matrix import (
        client_matrix_html,
        client_matrix_markdown,
        column_from_reports,
        column_not_run,
    )

    if not clients:
        return "", ""
    def column(c: dict[str, Any], base: Path) -> Any:
        if c.get("not_run") and not c.get("reports"):
            return column_not_run(c["title"], str(c["not_run"]))
        col = column_from_reports(c["title"], c.get("reports", []), base=base)
        col.note = str(c.get("not_run") or "")  # a later scenario's, the others' cells kept
        return col

    try:
        md_cols = [column(c, md_base) for c in clients]
        html_cols = [column(c, html_base) for c in clients]
    except (AttributeError, TypeError, ValueError, KeyError, OverflowError) as e:
        fail(f"a client report in the matrix document is malformed ({type(e).__name__})")
    preamble = ("Each column is the union of its scenarios (`acp-fuzz matrix --client "
                "TITLE=SCENARIO`): a cell is the worst finding of that oracle in any of them "
                "(**FAIL** with its severity, or info), else pass with the cases judged, else "
                "not judged (no case arose).")
    return client_matrix_markdown(md_cols, preamble=preamble), client_matrix_html(html_cols)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "failed"
