"""A stranger's cassette never gives a traceback, a hang, or unbounded memory.

Each attack is a real finding cassette (``cassettes/reference/leak.cassette``) with one hostile
edit, written as a valid cassette straight with msgpack (acp-fuzz's own writer refuses these
edits). ``show``, ``report``, ``replay --offline`` and the pytest plugin must answer each with
one line: ``acp-fuzz: error: ...`` and exit 2, or an ``ERROR`` verdict; a folder replay goes on
with the other cassettes and still writes its JUnit file.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from typer.testing import CliRunner

from acp_fuzz.cli import app
from acp_fuzz.core.cassette import (
    CassetteError,
    Limits,
    read_cassette,
    write_cassette,
    write_cassette_bounded,
)
from acp_fuzz.core.history import Event

from ._hostile import LEAK, PY, REFERENCE, run_acp_fuzz

Wire = tuple[dict[str, Any], list[dict[str, Any]]]


def _leak_wire() -> Wire:
    """leak.cassette's header (the footer's updates merged in) and events, as wire maps."""
    c = read_cassette(LEAK)
    return c.header.to_wire(), [e.to_wire() for e in c.events]


def _write_raw(path: Path, header: dict[str, Any], events: list[dict[str, Any]],
               attachments: dict[str, bytes] | None = None) -> Path:
    pack = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass")
    footer = {"end": True, "count": len(events), "header_updates": {},
              "attachments": attachments or {}}
    body = b"".join(pack.pack(o) for o in (header, *events, footer))
    path.write_bytes(body + b"\xc4\x20" + hashlib.sha256(body).digest())
    return path


def _first(events: list[dict[str, Any]], kind: str, n: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = [e for e in events if e["kind"] == kind][n]["data"]
    return data


def _finding(header: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = header["meta"]["findings"][0]
    return found


# One hostile edit each: the types the review found giving tracebacks (a step index of "x" or
# inf, bytes for a segment's text, wrong types in a verdict, a model event, process data and
# the recorded findings), and values inside what an agent sends (bytes and lists as JSON-RPC
# ids) that the readers must take as they come.
EDITS: dict[str, Callable[[Wire], None]] = {
    "step-index-str": lambda w: _first(w[1], "step").update(index="x"),
    "step-index-inf": lambda w: _first(w[1], "step").update(index=math.inf),
    "step-index-nan": lambda w: _first(w[1], "step").update(index=math.nan),
    "step-args-str": lambda w: _first(w[1], "step").update(args="x"),
    "step-args-bytes": lambda w: _first(w[1], "step").update(args=b"\xff"),
    "step-no-args": lambda w: _first(w[1], "step").pop("args"),
    "step-handle-list": lambda w: _first(w[1], "step", 1)["args"].update(session=[]),
    "step-handle-dotdot": lambda w: _first(w[1], "step", 1)["args"].update(session=".."),
    "step-no-handle": lambda w: _first(w[1], "step", 1)["args"].pop("session"),
    "segment-text-bytes": lambda w: _first(w[1], "model")["segments"][0].update(text=b"\xff"),
    "segment-text-int": lambda w: _first(w[1], "model")["segments"][0].update(text=7),
    "segment-empty": lambda w: _first(w[1], "model")["segments"].__setitem__(0, {}),
    "segments-str": lambda w: _first(w[1], "model").update(segments="x"),
    "model-status-inf": lambda w: _first(w[1], "model").update(status=math.inf),
    "model-status-str": lambda w: _first(w[1], "model").update(status="x"),
    "model-session-list": lambda w: _first(w[1], "model").update(session=[]),
    "model-no-api": lambda w: _first(w[1], "model").pop("api"),
    "verdict-step-str": lambda w: _first(w[1], "verdict").update(step="x"),
    "verdict-sessions-lists": lambda w: _first(w[1], "verdict").update(
        what="probe-list", sessions=[[1], {}]),
    "process-pid-str": lambda w: _first(w[1], "process").update(pid="x"),
    "process-argv-ints": lambda w: _first(w[1], "process").update(argv=[1, None]),
    "stderr-text-bytes": lambda w: _first(w[1], "stderr").update(text=b"\x1b[2J"),
    "acp-id-bytes": lambda w: _first(w[1], "acp")["msg"].update(id=b"\xff"),
    "acp-id-list": lambda w: _first(w[1], "acp")["msg"].update(id=[]),
    "acp-method-list": lambda w: _first(w[1], "acp")["msg"].update(method=[1, "a"]),
    "acp-params-bytes": lambda w: _first(w[1], "acp")["msg"].update(params=b"\xff"),
    "finding-oracle-list": lambda w: _finding(w[0]).update(oracle=[]),
    "finding-step-inf": lambda w: _finding(w[0]).update(step=math.inf),
    "finding-evidence-str": lambda w: _finding(w[0]).update(evidence="x"),
    "findings-str": lambda w: w[0]["meta"].update(findings="x"),
    "initialize-agentinfo-list": lambda w: w[0]["initialize"].update(agentInfo=[1]),
    "initialize-version-inf": lambda w: w[0]["initialize"].update(protocolVersion=math.inf),
    "settings-dialect-list": lambda w: w[0]["settings"].update(dialect=[], baseline="x"),
    "meta-status-bytes": lambda w: w[0]["meta"].update(status=b"\xff", runs=math.nan),
}


# The edits to a field whose type acp-fuzz writes: the reader refuses these ("corrupt: event N
# (kind) field ..."). The others change what the agent chose, or drop a field: those
# cassettes are shown, reported and judged like any other.
REFUSED = {"step-index-str", "step-index-inf", "step-index-nan", "step-args-str",
           "step-args-bytes", "step-handle-list", "segment-text-bytes", "segment-text-int",
           "segment-empty", "segments-str", "model-status-inf", "model-status-str",
           "model-session-list", "verdict-step-str", "verdict-sessions-lists",
           "process-pid-str", "process-argv-ints", "stderr-text-bytes", "finding-oracle-list",
           "finding-step-inf", "finding-evidence-str", "findings-str"}


def _crafted(path: Path, name: str) -> Path:
    wire = copy.deepcopy(_leak_wire())
    EDITS[name](wire)
    return _write_raw(path, *wire)


def _one_line_error(result: Any) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    assert "Traceback" not in result.output
    if result.exit_code != 0:
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("acp-fuzz: error: "), result.output


@pytest.mark.parametrize("name", sorted(EDITS))
def test_show_report_and_offline_replay_answer_in_one_line(tmp_path: Path, name: str) -> None:
    path = _crafted(tmp_path / f"{name}.cassette", name)
    runner = CliRunner()
    refused = name in REFUSED
    for args in (["show", str(path)], ["show", "--full", str(path)], ["report", str(path)]):
        result = runner.invoke(app, args)
        _one_line_error(result)
        assert result.exit_code == (2 if refused else 0), result.output
        if refused:
            assert f"{path}: corrupt: " in result.output
    result = runner.invoke(app, ["replay", "--offline", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    if refused:
        assert lines[0].startswith("ERROR") and "(corrupt: " in lines[0], lines
        assert result.exit_code == 2
    else:  # judged: the recorded leak is still in the events (or a step lost its prompt)
        assert lines[0].split()[0] in ("FAILED", "FIXED"), lines


def test_the_reader_refuses_wrong_field_types_naming_the_field(tmp_path: Path) -> None:
    # Checked once where the cassette is read, so that every consumer can trust the types.
    path = _crafted(tmp_path / "x.cassette", "step-index-inf")
    with pytest.raises(CassetteError) as info:
        read_cassette(path)
    assert info.value.reason == "corrupt: event 6 (step) field 'index' is float, not an integer"
    path = _crafted(tmp_path / "y.cassette", "finding-evidence-str")
    with pytest.raises(CassetteError, match="recorded finding 0 field 'evidence' is str"):
        read_cassette(path)


def test_acp_fuzz_never_writes_what_its_reader_refuses(tmp_path: Path) -> None:
    c = read_cassette(LEAK)
    bad = [Event(e.seq, e.t, e.kind, {**e.data, "index": "x"} if e.kind == "step" else e.data)
           for e in c.events]
    with pytest.raises(ValueError, match="field 'index' is str, not an integer"):
        write_cassette(tmp_path / "plain.cassette", c.header, bad)
    assert not (tmp_path / "plain.cassette").exists()
    # A finding is never lost: the bounded writer drops the field and says what it was.
    back = read_cassette(write_cassette_bounded(tmp_path / "fit.cassette", c.header, bad))
    steps = [e for e in back.events if e.kind == "step"]
    assert all("index" not in e.data and e.data["acp_fuzz_dropped"] == {"index": "'x'"}
               for e in steps)
    assert back.header.meta["clipped"]["events"] == [e.seq for e in steps]


@pytest.mark.timeout(120)
def test_a_folder_replay_goes_on_past_bad_cassettes_and_writes_junit(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    names = ["step-index-inf", "segment-text-bytes", "verdict-step-str", "model-status-str",
             "process-argv-ints", "finding-step-inf"]
    for i, name in enumerate(names):
        _crafted(folder / f"{i}-{name}.cassette", name)
    (folder / "9-good.cassette").write_bytes(LEAK.read_bytes())
    junit = tmp_path / "replay.xml"
    proc = run_acp_fuzz(tmp_path, "replay", "--offline", "--junit", str(junit), str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["ERROR"] * len(names) + ["FAILED"], lines
    assert all("corrupt: event" in ln or "recorded finding" in ln for ln in lines[:-1]), lines
    cases = ET.parse(junit).getroot().findall("./testsuite/testcase")
    assert len(cases) == len(names) + 1
    assert [c.find("error") is not None for c in cases] == [True] * len(names) + [False]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_live_folder_replay_goes_on_past_bad_cassettes(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    names = ["step-index-str", "segments-str", "finding-oracle-list", "step-no-args",
             "step-handle-dotdot"]
    for i, name in enumerate(names):
        _crafted(folder / f"{i}-{name}.cassette", name)
    (folder / "9-good.cassette").write_bytes(LEAK.read_bytes())
    junit = tmp_path / "replay.xml"
    proc = run_acp_fuzz(tmp_path, "replay", "--junit", str(junit), str(folder), "--",
                        *REFERENCE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    verdicts = [ln for ln in proc.stdout.splitlines() if not ln.startswith(" ")]
    assert [ln.split()[0] for ln in verdicts] == ["ERROR"] * len(names) + ["FIXED"], verdicts
    assert "its event has no args" in verdicts[3] and "step 2 is not one" in verdicts[4]
    cases = ET.parse(junit).getroot().findall("./testsuite/testcase")
    assert [c.find("error") is not None for c in cases] == [True] * len(names) + [False]


# -- FIFOs and other files that are not regular ----------------------------------------------


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.timeout(30)
def test_a_fifo_named_cassette_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "x.cassette")
    link = tmp_path / "link.cassette"
    link.symlink_to(fifo)
    for path in (fifo, link):
        with pytest.raises(CassetteError) as info:
            read_cassette(path)  # before the fix: open() blocked until a writer came
        assert info.value.reason == "cannot read: not a regular file (a FIFO)"
    (tmp_path / "dir.cassette").mkdir()
    with pytest.raises(CassetteError, match="not a regular file \\(a directory\\)"):
        read_cassette(tmp_path / "dir.cassette")


@pytest.mark.timeout(120)
def test_fifos_in_a_folder_are_errors_and_the_rest_still_runs(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    fifo = _fifo(folder / "a-fifo.cassette")
    (folder / "b-link.cassette").symlink_to(fifo)
    (folder / "c-good.cassette").write_bytes(LEAK.read_bytes())
    junit = tmp_path / "replay.xml"
    proc = run_acp_fuzz(tmp_path, "replay", "--offline", "--junit", str(junit), str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["ERROR", "ERROR", "FAILED"], lines
    assert all("not a regular file (a FIFO)" in ln for ln in lines[:2])
    cases = ET.parse(junit).getroot().findall("./testsuite/testcase")
    assert [c.find("error") is not None for c in cases] == [True, True, False]
    for command in (["show"], ["report"]):
        shown = run_acp_fuzz(tmp_path, *command, str(fifo))
        assert shown.returncode == 2
        assert shown.stderr.strip() == (f"acp-fuzz: error: {fifo}: cannot read: not a regular "
                                        "file (a FIFO)")


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The plugin in a child pytest, as CI runs it (see test_replay_plugin.py)."""
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    return subprocess.run(
        [PY, "-m", "pytest", "-p", "acp_fuzz", "-p", "no:cacheprovider", "--rootdir",
         str(tests), str(tests), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "ACP_REF_QUIET": "1", "HOME": str(tmp_path)})


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_plugin_fails_a_fifo_in_the_corpus_and_runs_the_rest(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _fifo(corpus / "a-fifo.cassette")
    (corpus / "b-good.cassette").write_bytes(LEAK.read_bytes())
    proc = _pytest(tmp_path, "-q", "--acp-cassettes", str(corpus), "--acp-agent",
                   " ".join(REFERENCE), "--acp-max-examples", "0")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "not a regular file (a FIFO)" in out and "Traceback" not in out


@pytest.mark.timeout(300)
def test_plugin_item_ids_show_control_characters_escaped(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a\x1b[2Jb.cassette", "new\nline.cassette"):
        (corpus / name).write_bytes(LEAK.read_bytes())
    # No agent: the items are collected and skipped; -v prints their ids, -rs the skip
    # reasons with each item's location.
    proc = _pytest(tmp_path, "-v", "-rs", "--acp-cassettes", str(corpus))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "\x1b" not in out
    assert "acp-fuzz-replay[a\\x1b[2Jb.cassette]" in out
    assert "acp-fuzz-replay[new\\nline.cassette]" in out
    assert "new\nline" not in out


# -- memory -----------------------------------------------------------------------------------

LIMIT = Limits().max_total_values

_PEAK = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    from acp_fuzz.engine.campaign.replay import offline_check, replay_cassette
    path = Path(sys.argv[2])
    if sys.argv[1] == "offline":
        result = offline_check(path)
    else:
        result = replay_cassette(path, target=[sys.executable, "-c", "pass"],
                                 recorded_model_replies=True)
    print(result.line())
    # The high-water mark of this process's own memory, in KiB. (ru_maxrss would also count
    # the parent's memory at fork time, which Linux carries over across exec.)
    try:
        status = Path("/proc/self/status").read_text()
        print(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM:")))
    except OSError:
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def _peak_mib(mode: str, path: Path) -> tuple[str, float]:
    """The verdict line and the peak memory of a child process that judges ``path``."""
    proc = subprocess.run([PY, "-c", _PEAK, mode, str(path)], capture_output=True, text=True,
                          timeout=600, check=True)
    line, peak = proc.stdout.strip().splitlines()
    return line, int(peak) / 1024


def _empty_lists_cassette(path: Path, n_events: int, per_event: int) -> Path:
    """A cassette of ``n_events`` events each holding ``per_event`` empty lists: one byte
    each on disk, about 70 in memory once decoded (and 2 values each, as the limit counts)."""
    header, _ = _leak_wire()
    events = [{"seq": i, "t": 0.0, "kind": "acp",
               "data": {"dir": "recv", "msg": {"x": [[]] * per_event}}}
              for i in range(n_events)]
    return _write_raw(path, header, events)


@pytest.mark.timeout(300)
def test_a_cassette_of_many_tiny_values_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # 8 million empty lists, 8 MB on disk: judging it took 630 MB (and the 1 GiB file limit
    # allowed 75 GB); now the reader stops at Limits.max_total_values (90 MB in all).
    path = _empty_lists_cassette(tmp_path / "bomb.cassette", 32, 250_000)
    assert path.stat().st_size < 9 * 1024 * 1024
    with pytest.raises(CassetteError) as info:
        read_cassette(path)
    assert info.value.reason == (f"too large: more than {LIMIT} values in the cassette (a "
                                 "cassette of many tiny values takes far more memory than its "
                                 "size)")
    line, peak = _peak_mib("offline", path)
    assert line.startswith("ERROR") and f"more than {LIMIT} values" in line
    assert peak < 250, f"peak memory {peak:.0f} MiB"


def test_the_value_limit_counts_the_whole_cassette(tmp_path: Path) -> None:
    path = _empty_lists_cassette(tmp_path / "small.cassette", 10, 1000)
    assert len(read_cassette(path).events) == 10
    with pytest.raises(CassetteError, match="more than 9000 values in the cassette"):
        read_cassette(path, limits=Limits(max_total_values=9000))


def test_a_flood_of_tiny_values_is_written_clipped_not_lost(tmp_path: Path) -> None:
    # A hostile agent's notifications can hold more values than a reader accepts: the plain
    # writer refuses them, and the campaign's bounded writer keeps the finding readable.
    c = read_cassette(LEAK)
    flood = [Event(len(c.events) + i, 9.0, "acp",
                   {"dir": "recv", "msg": {"jsonrpc": "2.0", "method": "x",
                                           "params": [[]] * 300_000}})
             for i in range(8)]
    with pytest.raises(ValueError, match=f"more than {LIMIT} values"):
        write_cassette(tmp_path / "plain.cassette", c.header, [*c.events, *flood])
    path = write_cassette_bounded(tmp_path / "fit.cassette", c.header, [*c.events, *flood])
    back = read_cassette(path)
    assert back.events[:len(c.events)] == c.events  # the finding's own events, intact
    clipped = back.header.meta["clipped"]
    assert clipped["events_clipped"] >= 2
    assert all("acp_fuzz_clipped" in back.events[s].data for s in clipped["events"])
    assert back.header.meta["findings"] == c.header.meta["findings"]


@pytest.mark.timeout(300)
def test_a_vcr_attachment_of_tiny_values_is_refused_before_it_is_decoded(
        tmp_path: Path) -> None:
    # 10 million empty lists in the recorded model replies (10 MB, under the 64 MiB the
    # recording may take): decoding them whole took 740 MB before any check ran; now the
    # decoder stops at RecordingLimits.max_values (80 MB in all).
    vcr = msgpack.packb({"version": 1, "interactions": [[[]] * 100_000] * 100})
    c = read_cassette(LEAK)
    path = write_cassette(tmp_path / "vcr.cassette", c.header, c.events, {"vcr": vcr})
    line, peak = _peak_mib("replay", path)
    assert line.startswith("ERROR") and "more than 1000000 values" in line, line
    assert peak < 250, f"peak memory {peak:.0f} MiB"


def test_every_committed_cassette_is_far_under_the_value_limit() -> None:
    # The default keeps a margin of over 50 times over the largest real cassette (claude-agent-
    # acp in v2, 8 steps with a compaction: about 22,000 values, 68 times under the default;
    # the margin was 100 times before its 12-tool requests came in the v2 matrix).
    root = Path(__file__).resolve().parents[2]
    paths = sorted(root.glob("cassettes/**/*.cassette"))
    assert paths
    limits = Limits(max_total_values=Limits().max_total_values // 50)
    for path in paths:
        assert read_cassette(path, limits=limits).events, path
