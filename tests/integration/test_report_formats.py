"""A report format of the user's own, in one file outside the package (issue #35: "a new
report format is one file"): loaded with ``--plugin``, ``--report KIND:PATH`` names it, it
sees every campaign event and writes its file from the finished campaign, exactly as the
built-in ``json``, ``junit`` and ``html`` do (they are registered the same way). One that
raises costs its own file only: one error line, exit 2, the other reports written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _support import run_cli

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acp_fuzz.reference_agent"]
CLIENT = [sys.executable, "-m", "acp_fuzz.reference_client"]
TAP = '''
from acp_fuzz import Finished, report_format
from acp_fuzz.core.events import ExampleDone


@report_format("tap", summary="Test Anything Protocol: one line per failure")
class Tap:
    def __init__(self, path):
        self.path = path
        self.examples = 0

    def on_event(self, event):
        if isinstance(event, ExampleDone):
            self.examples += 1

    def finish(self, done: Finished) -> str:
        reports = done.result.reports
        lines = [f"1..{len(reports)}", f"# {done.direction}: {self.examples} example events"]
        for i, rep in enumerate(reports, 1):
            lines.append(f"not ok {i} - {', '.join(rep.oracles)}")
        return "\\n".join(lines) + "\\n"


@report_format("broken", summary="raises", directions=("agent",))
class Broken:
    def __init__(self, path):
        pass

    def finish(self, done):
        raise RuntimeError("no\\nluck")
'''


def _plugin(tmp_path: Path) -> Path:
    path = tmp_path / "tap_format.py"
    path.write_text(TAP, encoding="utf-8")
    return path


def test_a_plugin_format_is_written_from_the_events_and_the_result(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--plugin", str(_plugin(tmp_path)), "-n", "6", "-x",
                   "--report", "tap:run.tap", "--report", "json:run.json",
                   "--", *REFERENCE, "--bug", "leak")
    assert proc.returncode == 1, proc.stderr
    tap = (tmp_path / "run.tap").read_text().splitlines()
    doc = json.loads((tmp_path / "run.json").read_text())
    assert tap[0] == f"1..{len(doc['findings'])}" and len(doc["findings"]) >= 1
    # Every example the campaign ran reached the format's on_event (and the runs that shrank
    # the failure, which are examples too, to Hypothesis).
    examples = int(tap[1].removeprefix("# agent: ").removesuffix(" example events"))
    assert examples >= doc["examples_run"] > 0, (tap, doc["examples_run"])
    assert tap[2].startswith("not ok 1 - prompt.leak"), tap


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_a_format_that_raises_is_one_line_and_the_others_are_written(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--plugin", str(_plugin(tmp_path)), "-n", "2",
                   "--no-cover", "--report", "broken:b.out", "--report", "json:run.json",
                   "--", *REFERENCE)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("acp-fuzz: error:")]
    assert errors == ["acp-fuzz: error: --report broken:b.out not written: RuntimeError: no "
                      "luck"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "b.out").exists()
    assert json.loads((tmp_path / "run.json").read_text())["exit_code"] == 0


def test_an_unknown_format_names_the_plugins_ones_too(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "target", "--plugin", str(_plugin(tmp_path)), "--report",
                   "csv:x.csv", "--", *REFERENCE)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and "tap:PATH" in line and "html:PATH" in line, line
    # Without the plugin, its format is not known.
    proc = run_cli(tmp_path, "target", "--report", "tap:x.tap", "--", *REFERENCE)
    assert proc.returncode == 2 and "tap:x.tap" in proc.stderr


def test_an_agent_only_format_is_refused_by_client(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "client", "--plugin", str(_plugin(tmp_path)),
                   "--report", "broken:x.txt", "--", *CLIENT)
    assert proc.returncode == 2
    assert "json:PATH, junit:PATH, html:PATH, markdown:PATH or tap:PATH" in proc.stderr, proc.stderr


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_client_writes_the_html_page_of_its_campaign(tmp_path: Path) -> None:
    """The html format reports a client campaign too, from the same page code as an
    agent's: the failure first, its evidence, capability set, scenario and cassette, then
    every client rule checked, a SHOULD finding never shown as pass."""
    proc = run_cli(tmp_path, "client", "-n", "6", "--report", "html:page.html", "--", *CLIENT,
                   "--bug", "unadvertised-prompt")
    assert proc.returncode == 1, proc.stderr
    page = (tmp_path / "page.html").read_text()
    assert page.startswith("<!doctype html>") and "Content-Security-Policy" in page
    assert "<h1>acp-fuzz client: acp-fuzz-reference-client" in page
    assert page.index("<h2>Findings</h2>") < page.index("client.prompt-unadvertised") \
        < page.index("<h2>Rules checked</h2>")
    assert "Smallest capability set: <code>v1: nothing advertised</code>" in page
    cassette = page.split("Cassette: <code>")[1].split("</code>")[0]
    assert (tmp_path / cassette).is_file()
    assert "<td>FAIL</td>" in page


def test_a_plugin_format_reports_a_client_campaign_too(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "client", "--plugin", str(_plugin(tmp_path)), "-n", "4",
                   "--report", "tap:run.tap", "--", *CLIENT, "--bug", "unadvertised-prompt")
    assert proc.returncode == 1, proc.stderr
    tap = (tmp_path / "run.tap").read_text().splitlines()
    assert tap[0] == "1..1" and tap[1].startswith("# client: ")
    assert tap[2] == "not ok 1 - client.prompt-unadvertised", tap


@pytest.mark.slow  # campaign-sized: the long tier (docs/performance.md)
def test_markdown_reports_both_directions(tmp_path: Path) -> None:
    """``--report markdown:PATH``: the page for a CI job summary, from ``target`` and from
    ``client``, each naming its finding and its cassette."""
    client = run_cli(tmp_path, "client", "-n", "6", "--report", "markdown:client.md", "--",
                     *CLIENT, "--bug", "unadvertised-prompt")
    assert client.returncode == 1, client.stderr
    page = (tmp_path / "client.md").read_text()
    assert page.startswith("# acp-fuzz client: acp-fuzz-reference-client")
    assert "| MUST | `client.prompt-unadvertised` | `SP-CLIENT-GATE-MUSTNOT` | failed" in page
    agent = run_cli(tmp_path, "target", "-x", "--report", "markdown:agent.md", "--",
                    *REFERENCE, "--bug", "leak")
    assert agent.returncode == 1, agent.stderr
    page = (tmp_path / "agent.md").read_text()
    assert page.startswith("# acp-fuzz: acp-fuzz-reference-agent")
    assert "`prompt.leak`" in page and "Cassette: `" in page
