"""Hostile outputs: what acp-fuzz writes must hold whatever a stranger chose, run as a user runs
it (``python -m acp_fuzz ...`` in a child process).

- ``matrix --from-json`` with a hand-made document: its command, profile and rule stay text
  in the Markdown and the HTML; ``Infinity``, ``1e999`` and a nesting bomb are one error line.
- ``report`` on a cassette whose file name is a shell command: the Reproduce line, pasted
  into a shell, runs acp-fuzz on that file and nothing else.
- A symlink planted at an output's name, or at the name of its temporary file, is never
  written through (``report --output``, ``matrix``, ``target --report``, ``--cassette-dir``,
  the JUnit writer): the output replaces the link, the link's target is untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from acp_fuzz.reporting import Case, write_junit

from ._hostile import LEAK, REFERENCE, run_acp_fuzz

pytestmark = pytest.mark.integration

MD = MarkdownIt("commonmark").enable("table")
BASHRC = "export PATH=/usr/bin  # the victim's own file\n"


def _tokens(source: str) -> list[tuple[str, str]]:
    out = []
    for tok in MD.parse(source):
        out.append((tok.type, tok.content))
        out.extend((child.type, child.content) for child in tok.children or [])
    return out


def _one_error_line(proc: object) -> str:
    stderr = getattr(proc, "stderr", "")
    assert getattr(proc, "returncode", None) == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("acp-fuzz: error: "), stderr
    return lines[0]


# -- matrix --from-json ---------------------------------------------------------------------

EVIL = "x` <img src=x onerror=alert(1)> | [a](http://evil.example) \n# owned <!--"


def _matrix_doc(**report: object) -> dict[str, object]:
    return {"acp_fuzz_matrix": 1, "command": ["acp-fuzz", "matrix", EVIL],
            "agents": [{"profile": EVIL, "report": {
                "agent": {"agentInfo": {"name": EVIL, "version": EVIL}},
                "findings": [{"severity": "MUST", "status": "failed", "rule": EVIL,
                              "oracle": EVIL, "cassette": "c.cassette"}],
                "judged": [{"rule": "SP-AGENT-APPLY-NEW-MUST", "oracle": "o", "checks": 3}],
                **report}}]}


def test_a_hand_made_matrix_document_stays_text_in_markdown_and_html(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps(_matrix_doc()), encoding="utf-8")
    proc = run_acp_fuzz(tmp_path, "matrix", "--from-json", "m.json", "--markdown", "m.md",
                        "--html", "m.html")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "m.md").read_text(encoding="utf-8")
    tokens = _tokens(md)
    kinds = {kind for kind, _ in tokens}
    # No raw HTML, no link but the cell's to its cassette, no heading but the title: the
    # hostile text is inert.
    assert not kinds & {"html_inline", "html_block", "image"}, md
    links = [tok.attrs["href"] for block in MD.parse(md) for tok in block.children or []
             if tok.type == "link_open"]
    assert links == ["c.cassette"], links
    assert [kind for kind in (k for k, _ in tokens) if kind == "heading_open"] == \
        ["heading_open"]
    # The command, the profile and the rule are each in a code span, as they were.
    code = [content for kind, content in tokens if kind == "code_inline"]
    assert any("<img src=x onerror=alert(1)>" in c and c.startswith("acp-fuzz matrix")
               for c in code), code
    assert sum("<img src=x onerror=alert(1)>" in c for c in code) >= 3, code
    # One table: a row per rule, its header and delimiter, nothing spilled into new rows.
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert all(line.count("|") - line.count("\\|") == 4 for line in table), table
    page = (tmp_path / "m.html").read_text(encoding="utf-8")
    assert "<img" not in page and "<!--" not in page and "&lt;img src=x" in page


@pytest.mark.parametrize("bad", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_a_non_finite_number_in_a_matrix_document_is_one_error_line(
        tmp_path: Path, bad: str) -> None:
    doc = json.dumps(_matrix_doc()).replace('"checks": 3', f'"checks": {bad}')
    assert bad in doc
    (tmp_path / "m.json").write_text(doc, encoding="utf-8")
    line = _one_error_line(run_acp_fuzz(tmp_path, "matrix", "--from-json", "m.json"))
    assert "m.json" in line
    assert not (tmp_path / "matrix.md").exists() and not (tmp_path / "matrix.html").exists()


@pytest.mark.parametrize("depth", [300, 100_000])
def test_a_deeply_nested_matrix_document_is_one_error_line(tmp_path: Path, depth: int) -> None:
    bomb = "[" * depth + "]" * depth
    doc = json.dumps(_matrix_doc(evidence="BOMB")).replace('"BOMB"', bomb)
    (tmp_path / "m.json").write_text(doc, encoding="utf-8")
    line = _one_error_line(run_acp_fuzz(tmp_path, "matrix", "--from-json", "m.json",
                                        "--json", "again.json"))
    assert "m.json" in line and "deep" in line
    assert not (tmp_path / "matrix.md").exists() and not (tmp_path / "again.json").exists()


# -- report: the Reproduce line -------------------------------------------------------------

HOSTILE_NAMES = [
    "a;touch PWNED1;b.cassette",
    "$(touch PWNED2).cassette",
    "a`touch PWNED3`b.cassette",
    "it's a'; touch PWNED4; echo '.cassette",
    "x\ntouch PWNED5\n.cassette",
    "y\n```\n<img src=x onerror=alert(1)>\n# owned\n.cassette",
    "-x.cassette",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_the_reproduce_line_names_a_hostile_file_and_runs_nothing_else(
        tmp_path: Path, name: str) -> None:
    shutil.copyfile(LEAK, tmp_path / name)
    proc = run_acp_fuzz(tmp_path, "report", "--", name)
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    # The fences hold: the report's structure is its own, whatever the file is called.
    tokens = MD.parse(report)
    assert not any(t.type in ("html_block", "html_inline") for t in tokens)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert "owned" not in headings and headings[-1] == "Reproduce"
    reproduce = report[report.index("## Reproduce"):]
    blocks = [t.content for t in MD.parse(reproduce) if t.type == "fence"]
    assert len(blocks) == 2 and all(t.info == "sh" for t in MD.parse(reproduce)
                                    if t.type == "fence")
    # Pasted into a shell, the first block runs acp-fuzz with the file as one argument.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "acp-fuzz"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    "open('argv.json', 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    subprocess.run(["sh", "-c", blocks[0]], cwd=tmp_path, check=True, timeout=60,
                   env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert not list(tmp_path.glob("PWNED*")), "the Reproduce line ran a command of the name"
    argv = json.loads((tmp_path / "argv.json").read_text())
    shown = f"./{name}" if name.startswith("-") else name
    assert argv == ["replay", shown, "--", "./your-agent"]
    assert (tmp_path / shown).is_file()


# -- planted symlinks ----------------------------------------------------------------------

def _plant(link: Path, victim: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(BASHRC)
    link.symlink_to(victim)


def _untouched(*victims: Path) -> None:
    for v in victims:
        assert v.read_text() == BASHRC, f"{v.name} was written through a planted symlink"


def test_report_output_replaces_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "home" / "bashrc"
    _plant(tmp_path / "r.md", victim)
    proc = run_acp_fuzz(tmp_path, "report", str(LEAK), "--output", "r.md")
    assert proc.returncode == 0, proc.stderr
    _untouched(victim)
    out = tmp_path / "r.md"
    assert not out.is_symlink() and out.read_text().startswith("# prompt.leak")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_matrix_outputs_write_through_no_planted_symlink(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps(_matrix_doc()), encoding="utf-8")
    names = ("m.md", "m.html", "again.json")
    victims: list[Path] = []
    for name in names:
        for link in (name, f".{name}.tmp"):  # the output, and where it used to be staged
            victims.append(tmp_path / "home" / f"victim{len(victims)}")
            _plant(tmp_path / link, victims[-1])
    proc = run_acp_fuzz(tmp_path, "matrix", "--from-json", "m.json", "--markdown", "m.md",
                        "--html", "m.html", "--json", "again.json")
    assert proc.returncode == 0, proc.stderr
    _untouched(*victims)
    for name in names:
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).stat().st_size > 100


def test_target_reports_and_cassette_dir_write_through_no_planted_symlink(
        tmp_path: Path, no_orphans: object) -> None:
    home = tmp_path / "home"
    planted = {"r.json": home / "v1", ".r.json.tmp": home / "v2", "j.xml": home / "v3",
               "c/.acp-fuzz-write-test": home / "v4"}
    for link, victim in planted.items():
        _plant(tmp_path / link, victim)
    proc = run_acp_fuzz(tmp_path, "target", "--max-examples", "1", "--cassette-dir", "c",
                        "--report", "json:r.json", "--report", "junit:j.xml", "--",
                        *REFERENCE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _untouched(*planted.values())
    assert json.loads((tmp_path / "r.json").read_text())["examples_run"] == 1
    assert (tmp_path / "j.xml").read_text().startswith("<?xml")
    assert not (tmp_path / "r.json").is_symlink() and not (tmp_path / "j.xml").is_symlink()


def test_the_junit_writer_follows_no_symlink_at_its_temporary_name(tmp_path: Path) -> None:
    # The temporary name used to be `.NAME.tmp-PID`: known to whoever can guess a pid.
    victim = tmp_path / "bashrc"
    _plant(tmp_path / f".j.xml.tmp-{os.getpid()}", victim)
    _plant(tmp_path / "j.xml", tmp_path / "bashrc2")
    write_junit(tmp_path / "j.xml", "suite", [Case(name="a", classname="b")])
    _untouched(victim, tmp_path / "bashrc2")
    assert re.search(r'<testsuites name="suite" tests="1"',
                     (tmp_path / "j.xml").read_text())


def test_a_cassette_replaces_a_symlink_planted_at_its_name(tmp_path: Path) -> None:
    # CassetteWriter stages in a new file of a random name (O_EXCL) and renames it onto the
    # name: the link is replaced. (It did so already; this keeps it so.)
    from acp_fuzz.core.cassette import read_cassette, write_cassette

    victim = tmp_path / "bashrc"
    _plant(tmp_path / "x.cassette", victim)
    c = read_cassette(LEAK)
    write_cassette(tmp_path / "x.cassette", c.header, c.events, c.attachments)
    _untouched(victim)
    assert not (tmp_path / "x.cassette").is_symlink()
    assert len(read_cassette(tmp_path / "x.cassette").events) == len(c.events)
