"""The shell blocks of README.md and docs/*.md, as the docs tests read them.

A block is **runnable** when the line right before its opening fence is ``<!-- runnable -->``
(an HTML comment: GitHub shows nothing of it). A block of another language is saved as a
file before a page's runnable blocks run when that line is ``<!-- file: NAME -->`` (the
Python of docs/extending.md that the page tells you to save as ``myorg_checks.py``).

In a ``sh`` block each command is a line (with its ``\\`` continuations); a line that is only a
comment is none. In a ``console`` block a command is a line that starts with ``$ `` and the
lines after it, up to the next command, are what it prints (``...`` stands for any lines).
A command whose comment says ``exit N`` must exit with N; another must exit with 0 or 1 (1 is
"findings", the answer the docs often show), never with 2 (a usage or harness error) nor
with a traceback. A console block that shows ``acp-fuzz: error:`` expects exit 2.

tests/cover/test_docs_blocks.py checks that every shell block of the docs is either runnable
or listed in :data:`NOT_RUN` with the reason, and tests/integration/test_docs_commands.py runs
the runnable ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL = ("sh", "bash", "shell", "console")
_FENCE = re.compile(r"^(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_MARK = re.compile(r"<!-- (runnable|file: [\w./-]+) -->")
_EXIT = re.compile(r"#.*?\bexit (\d+)\b")


@dataclass(frozen=True)
class Command:
    """One command of a block: its text (continuations joined), the exit code it must end
    with (None: 0 or 1), and for a console block the lines it shows (``...``: any)."""

    text: str
    exit: int | None = None
    shows: tuple[str, ...] = ()


@dataclass(frozen=True)
class Block:
    page: str  # the page, relative to the repository: README.md, docs/ci.md
    line: int  # the line of its opening fence
    lang: str
    body: str
    marker: str | None  # "runnable", "file: NAME", or None
    commands: tuple[Command, ...] = field(default=())

    @property
    def first(self) -> str:
        """The block's first command (or line), the key :data:`NOT_RUN` names it by."""
        return self.commands[0].text if self.commands else self.body.split("\n", 1)[0]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with its marker and, for a shell block, its
    commands."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.fullmatch(before.strip())
        lang, body = m.group(2), m.group(3)
        cmds = _console(body) if lang == "console" else _sh(body) if lang in SHELL else ()
        out.append(Block(str(page.relative_to(ROOT)), text[:m.start()].count("\n") + 1, lang,
                         body, mark.group(1) if mark else None, tuple(cmds)))
    return out


def shell_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page) if b.lang in SHELL]


def _sh(body: str) -> list[Command]:
    out: list[Command] = []
    pending = ""
    for line in body.split("\n"):
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1].rstrip()
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        code = _EXIT.search(line)
        out.append(Command(line.strip(), int(code.group(1)) if code else None))
    return out


def _console(body: str) -> list[Command]:
    out: list[tuple[str, list[str]]] = []
    for line in body.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
    return [Command(text, 2 if any(s.startswith("acp-fuzz: error:") for s in shows) else None,
                    tuple(shows)) for text, shows in out]


#: The shell blocks no test runs, by page and first command, with the reason. A new shell block
#: is runnable or goes here (tests/cover/test_docs_blocks.py).
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "acp-fuzz agents install        # the pinned npm agents"):
        "installs the pinned agents from npm and runs a campaign against each real agent "
        "(hours): the realagent tier and the lead's matrix runs do this",
    ("docs/ci.md", 'pip install "acp-fuzz @ git+https://github.com/OWNER/acp-fuzz@main"  # '
                   "OWNER: where you cloned it from"):
        "installs from the network; scripts/check-release builds the wheel and the sdist and "
        "installs each with pip, pipx and uv tool, as CI runs it",
    ("docs/performance.md", "python benchmarks/run.py                 # everything; prints the "
                            "machine, then one table"):
        "the benchmarks run for minutes to hours; tests/quality/test_search_power.py runs "
        "benchmarks/search_power.py",
    ("docs/performance.md", "python benchmarks/bench_growth.py                       # "
                            "everything (about 15 minutes here)"):
        "the growth benchmark runs for about 15 minutes; tests/cover/test_oracles_growth.py "
        "counts the work it times",
    ("docs/profiles.md", "acp-fuzz target --profile my-agent.toml"):
        "shows the error for a file with a mistake the page does not write out "
        "(`init = \"soon\"`); tests/cover/test_profile_files.py holds that error line",
    ("docs/real-agents.md", "scripts/install-agents.sh                      # all npm profiles; "
                            "idempotent"):
        "installs the real agents from npm (network)",
    ("docs/real-agents.md", "acp-fuzz target --profile codex-acp --sandbox-net"):
        "campaigns against the real agents: the realagent tier (tests/realagent)",
    ("docs/real-agents.md", "scripts/install-agents.sh"):
        "installs the real agents and runs the realagent tier itself",
}
