"""``acp-fuzz target`` on a real terminal (a pseudo-terminal for stdout and stderr): the
progress bar's first frame is not glued to the baseline line, it names what the campaign is
doing, and the run ends with the summary line.

Each phase is drawn when the bar enters it, not at the next tick of rich's timer: here the
leak is found in the first covering example, and the covering examples that follow the
confirmation take less than a tick, so before that a frame naming them was drawn in one run
of two (tests failed at random, also on main)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(tmp_path: Path, track: Callable[[int | None], None], *args: str) -> str:
    main, sub = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm-256color", "ACP_REF_QUIET": "1"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "acp_fuzz", "target", *args], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=sub, stderr=sub, env=env,
                            start_new_session=True)
    track(proc.pid)
    os.close(sub)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=300) == 1
    return b"".join(chunks).decode("utf-8", "replace")


def test_the_bar_starts_on_its_own_line_names_its_phase_and_the_run_ends_with_a_summary(
        tmp_path: Path, no_orphans: Callable[[int | None], None]) -> None:
    raw = _on_a_terminal(tmp_path, no_orphans, "-n", "3", "--cassette-dir", "c", "--",
                         sys.executable, "-m", "acp_fuzz.reference_agent", "--bug", "leak")
    text = ANSI.sub("", raw)
    # Every line that a print started begins at the start of a terminal line: the bar's
    # frame (which ends without a newline) is never followed by the baseline's text.
    assert re.search(r"(^|\n)baseline: \d+ default-instruction", text), text[:2000]
    assert not re.search(r"examples[^\n]*baseline:", text)
    frames = [f for f in re.split(r"[\r\n]", text) if "examples" in f and "/3" in f]
    phases = {f.split(" ━")[0].split(" ╺")[0].strip() for f in frames}
    assert any(p.startswith("covering examples (") for p in phases), phases
    assert any(p.startswith("confirming (") for p in phases), phases
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]
    assert re.fullmatch(r"\d+ examples.*, \d+ steps, 1 finding \(1 MUST, 0 SHOULD\), "
                        r"\d+\.\d s \(seed 0\)", lines[-1].strip()), lines[-3:]
