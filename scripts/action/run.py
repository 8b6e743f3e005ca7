"""The action's main step (action.yml, "Run acp-fuzz"): build the acp-fuzz command line from
the inputs, run it, and write the job summary and the step outputs.

The inputs arrive as environment variables (``INPUT_AGENT``, ``INPUT_MAX_EXAMPLES``, ...), never
inside a script. The agent command and ``args`` are split with :func:`shlex.split` into an argv
that is executed directly, so quotes group words and nothing is expanded: ``$(...)``, backticks,
``;`` and ``|`` are plain characters of an argument.

The step always exits 0 once acp-fuzz has run (its exit code is the output ``exit-code``): the
upload runs next, and the action's last step fails the job. Standard library only, so that it
also runs with whatever ``python3`` is on PATH when the action's ``install`` is false.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

#: GitHub refuses a step summary over 1 MiB; stay well below it (the artifact has everything).
SUMMARY_BUDGET = 800_000
#: The most of one bug report that goes into the summary.
REPORT_BUDGET = 100_000


class InputError(Exception):
    """An input the action cannot use (acp-fuzz is not started)."""


def _input(name: str) -> str:
    return os.environ.get("INPUT_" + name.upper().replace("-", "_"), "").strip()


def _flag(name: str) -> bool:
    value = _input(name).lower()
    if value in ("true", "false", ""):
        return value == "true"
    raise InputError(f"input {name} must be true or false, not {value!r}")


def _words(name: str) -> list[str]:
    try:
        return shlex.split(_input(name), comments=False, posix=True)
    except ValueError as exc:  # an unclosed quote
        raise InputError(f"input {name} cannot be split into words: {exc}") from None


def build_command(exe: str, out: Path) -> tuple[str, list[str]]:
    """(mode, argv) for the inputs: mode is ``campaign`` or ``replay``."""
    agent = _words("agent")
    profile = _input("profile")
    if not agent and not profile:
        raise InputError("give the input agent (a command) or profile")
    replay = _input("replay")
    common: list[str] = []
    if profile:
        common += ["--profile", profile]
    if _flag("sandbox-fs"):
        common.append("--sandbox-fs")
    if _flag("sandbox-net"):
        common.append("--sandbox-net")
    if _input("timeout"):
        common += ["--timeout", _input("timeout")]
    tail = ["--", *agent] if agent else []
    if replay:
        for name in ("strict", "protocol"):
            if _input(name) and _input(name) != "false":
                print(f"::warning title=acp-fuzz::input {name} is for campaigns; replay ignores it")
        # A path that starts with "-" would read as an option.
        cassettes = replay if not replay.startswith("-") else "./" + replay
        argv = [exe, "replay", *common, "--junit", str(out / "junit.xml"), *_words("args"),
                cassettes, *tail]
        return "replay", argv
    argv = [exe, "target", "--max-examples", _input("max-examples") or "50",
            "--seed", _input("seed") or "0"]
    if _input("protocol"):
        argv += ["--protocol", _input("protocol")]
    if _flag("strict"):
        argv.append("--strict")
    argv += [*common, "--cassette-dir", str(out / "cassettes"),
             "--report", f"json:{out / 'report.json'}", "--report", f"junit:{out / 'junit.xml'}",
             *_words("args"), *tail]
    return "campaign", argv


def run_logged(argv: list[str], log: Path) -> int:
    """Run argv with its output both in the job log and in ``log``. Workflow commands
    (``::...::``) in that output are not obeyed: the agent's text is in it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("INPUT_") and k != "ACP_FUZZ_BIN"}
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}", flush=True)
    try:
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
                sink.write(line)
            return proc.wait()
    finally:
        print(f"::{token}::", flush=True)


def _cell(text: object) -> str:
    """Text for a Markdown table cell: one line, no HTML, no column breaks."""
    return html.escape(" ".join(str(text).split())).replace("|", "\\|")


def _fenced(text: str) -> str:
    fence = "`" * max(3, _longest_backticks(text) + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}\n"


def _longest_backticks(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest


def _tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Summary:
    """The job summary being written, with a byte budget; bug reports are also kept whole in
    ``out/reports/`` for the artifact."""

    def __init__(self, exe: str, out: Path) -> None:
        self.exe, self.out = exe, out
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text.encode("utf-8"))

    def bug_report(self, title: str, cassette: str) -> None:
        proc = subprocess.run([self.exe, "report", cassette], capture_output=True, text=True,
                              errors="replace", stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            self.add(f"\n`acp-fuzz report` failed for {_cell(cassette)}:\n\n"
                     + _fenced(proc.stderr[-4000:]))
            return
        reports = self.out / "reports"
        reports.mkdir(exist_ok=True)
        (reports / (Path(cassette).stem + ".md")).write_text(proc.stdout, encoding="utf-8")
        body = proc.stdout
        if len(body) > REPORT_BUDGET:
            body = body[:REPORT_BUDGET] + "\n\n(clipped: the whole report is in the artifact)\n"
        if self.size + len(body.encode("utf-8")) > SUMMARY_BUDGET:
            self.add(f"\n{_cell(title)}: the report is in the artifact (the summary is full).\n")
            return
        self.add(f"\n<details><summary>{_cell(title)}: bug report</summary>\n\n{body}\n"
                 "\n</details>\n")

    def text(self) -> str:
        return "".join(self.parts)


def summarize_campaign(summary: Summary, code: int, log: Path) -> int:
    try:
        report = json.loads((summary.out / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary.add(f"## acp-fuzz could not run the campaign (exit {code})\n\n"
                    + _fenced(_tail(log)))
        return 0
    info = report.get("agent", {}).get("agentInfo") or {}
    agent = " ".join(str(info.get(k, "")) for k in ("name", "version")).strip() or "the agent"
    findings = report.get("findings") or []
    head = f"{len(findings)} finding(s)" if findings else "no findings"
    summary.add(f"## acp-fuzz: {_cell(head)} in {_cell(agent)}\n\n"
                f"{report.get('examples_run', 0)} example(s), {report.get('steps_run', 0)} "
                f"step(s), seed {report.get('seed')}"
                f"{', strict' if report.get('strict') else ''}; exit code {code}.\n")
    if code == 2:
        summary.add("\nacp-fuzz stopped with a harness error:\n\n" + _fenced(_tail(log)))
    if not findings:
        return 0
    summary.add("\n| Severity | Oracle | Rule | Status | Finding | Cassette |\n"
                "|---|---|---|---|---|---|\n")
    for f in findings:
        summary.add("| " + " | ".join(_cell(f.get(k, "")) for k in (
            "severity", "oracle", "rule", "status", "message", "cassette")) + " |\n")
    for f in findings:
        if f.get("cassette"):
            summary.bug_report(f"{f.get('severity', '')} {f.get('oracle', '')}", f["cassette"])
    return len(findings)


def summarize_replay(summary: Summary, code: int, log: Path) -> int:
    try:
        cases = ET.parse(summary.out / "junit.xml").getroot().iter("testcase")
        rows = []
        for case in cases:
            node = case.find("failure")
            if node is None:
                node = case.find("error")
            if node is None:
                node = case.find("system-out")
            text = (node.text or "") if node is not None else ""
            verdict = text.split(maxsplit=1)[0] if text.split() else "?"
            detail = text.splitlines()[1] if len(text.splitlines()) > 1 else ""
            rows.append((verdict, case.get("name", ""), detail))
    except (OSError, ET.ParseError):
        summary.add(f"## acp-fuzz could not replay (exit {code})\n\n" + _fenced(_tail(log)))
        return 0
    bad = [r for r in rows if r[0] in ("FAILED", "FLAKY")]
    counts = ", ".join(f"{sum(r[0] == v for r in rows)} {v}"
                       for v in ("FAILED", "FLAKY", "ERROR", "FIXED", "PASSED")
                       if any(r[0] == v for r in rows)) or "no cassettes"
    summary.add(f"## acp-fuzz replay: {_cell(counts)}\n\nexit code {code}.\n\n"
                "| Verdict | Cassette | Detail |\n|---|---|---|\n")
    for verdict, name, detail in rows:
        summary.add(f"| {_cell(verdict)} | {_cell(name)} | {_cell(detail)} |\n")
    if code == 2:
        summary.add("\n" + _fenced(_tail(log)))
    for verdict, name, _ in bad:
        summary.bug_report(f"{verdict} {name}", name)
    return len(bad)


def set_outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for name, value in values.items():
            delimiter = "ghadelimiter_" + secrets.token_hex(16)
            fh.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def main() -> int:
    out = Path(_input("output-dir") or "acp-fuzz-results")
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = os.environ.get("ACP_FUZZ_BIN", "")
    exe = os.path.join(bin_dir, "acp-fuzz") if bin_dir else shutil.which("acp-fuzz")
    summary = Summary(exe or "acp-fuzz", out)
    findings = 0
    try:
        if exe is None:
            raise InputError("acp-fuzz is not on PATH (install: false needs it installed)")
        mode, argv = build_command(exe, out)
    except InputError as exc:
        print(f"::error title=acp-fuzz action::{exc}")
        code = 2
        summary.add(f"## acp-fuzz did not run\n\n{_cell(exc)}\n")
    else:
        print("acp-fuzz command:", shlex.join(argv), flush=True)
        log = out / "acp-fuzz.log"
        code = run_logged(argv, log)
        summarize = summarize_campaign if mode == "campaign" else summarize_replay
        findings = summarize(summary, code, log)
    text = summary.text()
    (out / "summary.md").write_text(text, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(text)
    set_outputs({"exit-code": str(code), "findings": str(findings),
                 "results-dir": str(out.resolve())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
