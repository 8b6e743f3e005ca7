"""The composite GitHub Action (action.yml), run here without a workflow runner.

:class:`ActionRun` reads action.yml and runs its steps the way the runner does: each ``run:``
step with ``bash --noprofile --norc -eo pipefail`` in the workspace, with the step's ``env:``
(its ``${{ }}`` expressions substituted, as the runner does, before any shell sees them),
``GITHUB_OUTPUT`` / ``GITHUB_STEP_SUMMARY`` / ``GITHUB_ENV`` files, ``RUNNER_TEMP`` and
``GITHUB_ACTION_PATH``; ``if:`` conditions; and the ``uses:`` steps (setup-python,
upload-artifact) replaced by a record of their ``with:``. ``install: false`` makes the action
use the acp-fuzz of this venv instead of pip-installing itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
STEPS: list[dict[str, Any]] = ACTION["runs"]["steps"]
INPUTS: dict[str, dict[str, Any]] = ACTION["inputs"]
BIN = Path(sys.executable).parent
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class StepResult:
    name: str
    status: str  # "success", "failure" or "skipped"
    rc: int | None = None
    stdout: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    tmp: Path
    inputs: dict[str, str]
    path_prefix: list[Path] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    check_uploads: bool = True
    results: list[StepResult] = field(default_factory=list)
    uploads: list[dict[str, str]] = field(default_factory=list)
    python_setups: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = set(self.inputs) - set(INPUTS)
        assert not unknown, f"not inputs of action.yml: {unknown}"
        self.values = {name: str(spec.get("default", "")) for name, spec in INPUTS.items()}
        self.values.update(self.inputs)
        self.workspace = self.tmp / "workspace"
        self.temp = self.tmp / "runner-temp"
        for d in (self.workspace, self.temp, self.tmp / "home"):
            d.mkdir(exist_ok=True)
        self.summary = self.tmp / "step-summary.md"
        self.github_env = self.tmp / "github-env"
        self.summary.touch()
        self.github_env.touch()
        self.step_outputs: dict[str, dict[str, str]] = {}

    # -- the expression language, as little of it as action.yml uses ------------------------

    def _value(self, expr: str) -> str:
        if m := re.fullmatch(r"inputs\.([A-Za-z0-9_-]+)", expr):
            return self.values[m[1]]
        if m := re.fullmatch(r"steps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)", expr):
            return self.step_outputs.get(m[1], {}).get(m[2], "")
        raise AssertionError(f"expression this test does not evaluate: {expr}")

    def substitute(self, text: str) -> str:
        return EXPR.sub(lambda m: self._value(m[1]), text)

    def condition(self, cond: str | None, failed: bool) -> bool:
        if cond is None:
            return not failed
        cond = cond.strip()
        if cond == "always()":
            return True
        if cond == "failure()":
            return failed
        if m := re.fullmatch(r"inputs\.([A-Za-z0-9_-]+) (==|!=) '([^']*)'", cond):
            # GitHub compares strings case-insensitively; a false condition is also a success().
            equal = self.values[m[1]].lower() == m[3].lower()
            return not failed and (equal if m[2] == "==" else not equal)
        raise AssertionError(f"if: this test does not evaluate: {cond}")

    # -- the steps ---------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        path = [*map(str, self.path_prefix), str(BIN), "/usr/bin", "/bin"]
        return {"PATH": os.pathsep.join(path), "HOME": str(self.tmp / "home"), "CI": "true",
                "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(self.workspace),
                "GITHUB_ACTION_PATH": str(REPO), "RUNNER_TEMP": str(self.temp),
                "GITHUB_STEP_SUMMARY": str(self.summary), "GITHUB_ENV": str(self.github_env),
                "ACP_REF_QUIET": "1", **self.extra_env}

    def run(self) -> ActionRun:
        failed = False
        for i, step in enumerate(STEPS):
            name = step.get("name", f"step {i}")
            if not self.condition(step.get("if"), failed):
                self.results.append(StepResult(name, "skipped"))
                continue
            if "uses" in step:
                self.fake_uses(step)
                self.results.append(StepResult(name, "success"))
                continue
            result = self.run_step(name, step)
            self.results.append(result)
            if step.get("id"):
                self.step_outputs[step["id"]] = result.outputs
            failed = failed or result.status == "failure"
        return self

    def fake_uses(self, step: dict[str, Any]) -> None:
        # The runner hands `with:` values over as strings (YAML false is "false").
        with_ = {k: self.substitute(str(v).lower() if isinstance(v, bool) else str(v))
                 for k, v in (step.get("with") or {}).items()}
        action = step["uses"].split("@")[0]
        if action == "actions/setup-python":
            self.python_setups.append(with_)
            self.step_outputs[step["id"]] = {"python-path": sys.executable}
        elif action == "actions/upload-artifact":
            assert not self.check_uploads or (self.workspace / with_["path"]).exists(), with_
            self.uploads.append(with_)
        else:
            raise AssertionError(f"uses: this test does not fake: {step['uses']}")

    def run_step(self, name: str, step: dict[str, Any]) -> StepResult:
        assert step.get("shell") == "bash", name
        output = self.tmp / f"output-{len(self.results)}"
        output.touch()
        env = {**self.base_env(), "GITHUB_OUTPUT": str(output)}
        env.update({k: self.substitute(str(v)) for k, v in (step.get("env") or {}).items()})
        script = self.tmp / f"step-{len(self.results)}.sh"
        script.write_text(step["run"], encoding="utf-8")
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=self.workspace, env=env, capture_output=True, text=True,
                              timeout=240)
        return StepResult(name, "success" if proc.returncode == 0 else "failure",
                          proc.returncode, proc.stdout + proc.stderr, parse_output(output))

    # -- what a workflow sees ------------------------------------------------------------------

    @property
    def job_failed(self) -> bool:
        return any(r.status == "failure" for r in self.results)

    def step(self, name: str) -> StepResult:
        return next(r for r in self.results if r.name == name)

    @property
    def outputs(self) -> dict[str, str]:
        return {name: self.substitute(spec["value"]) for name, spec in ACTION["outputs"].items()}


def parse_output(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file: ``name=value`` lines and ``name<<DELIMITER`` blocks."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
        else:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
    return out


def run_action(tmp_path: Path, **inputs: str) -> ActionRun:
    return ActionRun(tmp_path, {"install": "false", **inputs}).run()


# -- the action's text ---------------------------------------------------------------------------


def test_no_run_block_holds_an_expression() -> None:
    """Inputs reach the scripts only through env: a `${{ }}` inside `run:` would be pasted into
    the script before bash parses it (script injection)."""
    runs = [s["run"] for s in STEPS if "run" in s]
    assert len(runs) >= 3
    for script in runs:
        assert "${{" not in script, script
    for step in STEPS:
        assert "run" in step or "uses" in step
        for value in (step.get("env") or {}).values():
            # Each env value is one whole expression, nothing around it to be misread.
            assert re.fullmatch(r"\$\{\{ [a-z0-9_.-]+ \}\}", str(value)), value


def test_every_input_is_used_and_documented() -> None:
    text = (REPO / "action.yml").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    for name, spec in INPUTS.items():
        assert spec.get("description"), name
        assert f"inputs.{name} }}}}" in text or f"inputs.{name} ==" in text, name
        assert f"| `{name}` |" in docs, f"docs/ci.md's inputs table lacks {name}"


# -- the inputs and the options they map to --------------------------------------------------

#: Inputs that are not one acp-fuzz option: checked by the end-to-end tests below.
NOT_OPTIONS = {"agent", "replay", "args", "output-dir", "artifact-name", "python-version",
               "install"}
#: A value for each option input, other than its default.
SAMPLES = {"profile": "my-agent.toml", "max-examples": "7", "seed": "11", "protocol": "2",
           "strict": "true", "sandbox-fs": "true", "sandbox-net": "true", "timeout": "12.5"}
FAKE_ACP_FUZZ = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_ARGV_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def help_options(command: str) -> set[str]:
    proc = subprocess.run([str(BIN / "acp-fuzz"), command, "--help"], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "300"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", proc.stdout))


def recorded_argv(tmp_path: Path, **inputs: str) -> list[str]:
    """The acp-fuzz command line the action runs for these inputs (a fake acp-fuzz records it)."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "acp-fuzz").write_text(FAKE_ACP_FUZZ, encoding="utf-8")
    (fake_bin / "acp-fuzz").chmod(0o755)
    log = tmp_path / "argv.jsonl"
    log.unlink(missing_ok=True)
    run = ActionRun(tmp_path, {"install": "false", "agent": "my-agent --acp", **inputs},
                    path_prefix=[fake_bin], extra_env={"FAKE_ARGV_LOG": str(log)}).run()
    lines = log.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1, run.step("Run acp-fuzz").stdout
    argv: list[str] = json.loads(lines[0])
    assert argv[-3:] == ["--", "my-agent", "--acp"], argv
    return argv


def option_pairs(argv: list[str]) -> set[tuple[str, str]]:
    """(option, the word after it) for each option before the agent command."""
    words = argv[:argv.index("--")]
    return {(w, nxt) for w, nxt in zip(words, [*words[1:], ""], strict=True) if w.startswith("--")}


@pytest.mark.parametrize("mode", ["campaign", "replay"])
def test_each_input_maps_to_an_existing_option(tmp_path: Path, mode: str) -> None:
    """Each option input, set, adds an option that `acp-fuzz target|replay --help` lists (so a
    renamed option breaks this test), with the input's value after it."""
    assert set(SAMPLES) == set(INPUTS) - NOT_OPTIONS, "a new input needs a sample here"
    command = "target" if mode == "campaign" else "replay"
    options = help_options(command)
    extra = {"replay": "corpus"} if mode == "replay" else {}
    base = recorded_argv(tmp_path, **extra)
    assert base[0] == command
    if mode == "campaign":
        assert base[base.index("--max-examples") + 1] == INPUTS["max-examples"]["default"]
        assert base[base.index("--seed") + 1] == INPUTS["seed"]["default"]
        assert {"--cassette-dir", "--report"} <= set(base)
    else:
        assert base[base.index("--junit") + 1].endswith("/junit.xml")
        assert base[-4] == "corpus"  # the cassettes, then -- and the agent
    assert {w for w, _ in option_pairs(base)} <= options
    for name, value in SAMPLES.items():
        argv = recorded_argv(tmp_path, **extra, **{name: value})
        if mode == "replay" and name in ("max-examples", "seed", "protocol", "strict"):
            assert argv == base, f"{name} is for campaigns, yet replay got {argv}"
            continue
        new = {w for w, _ in option_pairs(argv) - option_pairs(base)}
        assert len(new) == 1, (name, argv)
        option = new.pop()
        assert option in options, f"input {name} maps to {option}, not an option of {command}"
        assert f"({option})" in INPUTS[name]["description"], (name, option)
        if value != "true":
            assert argv[argv.index(option) + 1] == value, (name, argv)
    # args: more options as words, before the cassettes and the agent command.
    argv = recorded_argv(tmp_path, **extra, args="--workers 2 --exclude-oracle 'a b'")
    i = argv.index("--workers")
    assert argv[i:i + 4] == ["--workers", "2", "--exclude-oracle", "a b"]
    assert i + 4 == len(argv) - (4 if mode == "replay" else 3)


# -- end to end, against the reference agent -------------------------------------------------


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory: pytest.TempPathFactory) -> ActionRun:
    return run_action(tmp_path_factory.mktemp("leak"), agent="acp-fuzz-reference-agent --bug leak",
                      **{"max-examples": "10"})


def test_planted_bug_fails_the_job_with_the_finding_in_the_summary(leak_run: ActionRun) -> None:
    assert [r.status for r in leak_run.results] == [
        "skipped", "skipped", "success", "success", "failure"], leak_run.results
    last = leak_run.results[-1]
    assert last.name == "Fail on findings" and last.rc == 1
    assert "::error title=acp-fuzz::1 finding(s)" in last.stdout
    assert leak_run.outputs["exit-code"] == "1"
    assert leak_run.outputs["findings"] == "1"
    summary = leak_run.summary.read_text(encoding="utf-8")
    assert summary.startswith("## acp-fuzz: 1 finding(s) in acp-fuzz-reference-agent 0.1.0")
    assert "| MUST | prompt.leak | ACPFUZZ-SESSION-ISOLATION-MUST | failed |" in summary
    # The finding's Markdown bug report (acp-fuzz report), folded.
    assert "<details><summary>MUST prompt.leak: bug report</summary>" in summary
    assert "# prompt.leak: `acp-fuzz-reference-agent` `0.1.0`" in summary
    assert "## Minimal JSON-RPC transcript" in summary
    # The artifact: the results folder, with the cassette and the reports in it.
    assert leak_run.uploads == [{"name": "acp-fuzz", "path": "acp-fuzz-results",
                                 "if-no-files-found": "ignore"}]
    results = leak_run.workspace / "acp-fuzz-results"
    assert Path(leak_run.outputs["results-dir"]) == results
    assert [p.name for p in (results / "cassettes").iterdir()] == ["prompt.leak-seed0.cassette"]
    report = json.loads((results / "report.json").read_text(encoding="utf-8"))
    assert [f["oracle"] for f in report["findings"]] == ["prompt.leak"]
    # One failing case per rule that failed: the finding's, and any rule an example of the
    # search failed whose failure shrank into the leak (the report's 'absorbed').
    failing = {c.get("name") for c in ET.parse(results / "junit.xml").getroot().iter("testcase")
               if c.find("failure") is not None}
    absorbed = {f["rule"] for f in report["absorbed"] if f["severity"] == "MUST"}
    assert failing == {"ACPFUZZ-SESSION-ISOLATION-MUST"} | absorbed, failing
    assert (results / "summary.md").read_text(encoding="utf-8") == summary
    assert (results / "reports" / "prompt.leak-seed0.md").exists()
    assert "10 examples" in (results / "acp-fuzz.log").read_text(encoding="utf-8")
    # The action leaves the job's environment alone.
    assert leak_run.github_env.read_text(encoding="utf-8") == ""


def test_correct_agent_passes(tmp_path: Path) -> None:
    run = run_action(tmp_path, agent="acp-fuzz-reference-agent",
                     **{"max-examples": "10", "seed": "3", "output-dir": "out/fuzz",
                        "artifact-name": "fuzz-ref"})
    assert not run.job_failed, [(r.name, r.stdout[-2000:]) for r in run.results]
    assert run.results[-1].status == "success"
    assert run.outputs["exit-code"] == "0" and run.outputs["findings"] == "0"
    summary = run.summary.read_text(encoding="utf-8")
    assert summary.startswith("## acp-fuzz: no findings in acp-fuzz-reference-agent 0.1.0")
    assert "10 example(s)" in summary and "seed 3" in summary
    assert run.uploads[0]["name"] == "fuzz-ref" and run.uploads[0]["path"] == "out/fuzz"
    assert (run.workspace / "out" / "fuzz" / "report.json").exists()


@pytest.mark.parametrize(("agent", "verdict", "exit_code"), [
    ("acp-fuzz-reference-agent", "FIXED", "0"),
    ("acp-fuzz-reference-agent --bug leak", "FAILED", "1"),
])
def test_replay_of_a_cassette_folder(tmp_path: Path, leak_run: ActionRun, agent: str,
                                     verdict: str, exit_code: str) -> None:
    corpus = tmp_path / "workspace" / "corpus"
    corpus.mkdir(parents=True)
    for cassette in (leak_run.workspace / "acp-fuzz-results" / "cassettes").iterdir():
        (corpus / cassette.name).write_bytes(cassette.read_bytes())
    run = run_action(tmp_path, agent=agent, replay="corpus")
    assert run.outputs["exit-code"] == exit_code, run.step("Run acp-fuzz").stdout
    assert run.job_failed is (exit_code != "0")
    summary = run.summary.read_text(encoding="utf-8")
    assert summary.startswith(f"## acp-fuzz replay: 1 {verdict}")
    assert f"| {verdict} | corpus/prompt.leak-seed0.cassette |" in summary
    # A bug that is still there comes with its report; a fixed one needs none.
    assert ("<details><summary>FAILED corpus/prompt.leak-seed0.cassette" in summary) is (
        verdict == "FAILED")
    results = run.workspace / "acp-fuzz-results"
    assert re.search(rf"^{verdict} +corpus/prompt.leak-seed0.cassette ", (
        results / "acp-fuzz.log").read_text(encoding="utf-8"), re.M)
    assert (results / "junit.xml").exists()
    assert not (results / "cassettes").exists()  # replay records nothing new
    assert run.uploads and run.uploads[0]["path"] == "acp-fuzz-results"


HOSTILE = "$(touch pwned-1) `touch pwned-2` ; touch pwned-3 && touch pwned-4 | touch pwned-5"


@pytest.mark.parametrize(("inputs", "literal"), [
    # The agent command: acp-fuzz starts the reference agent, which rejects the words as they are.
    ({"agent": "acp-fuzz-reference-agent " + HOSTILE},
     "unrecognized arguments: " + HOSTILE),
    # Every other input that reaches a script, at once.
    ({"agent": "acp-fuzz-reference-agent `touch pwned-6`", "profile": "$(touch pwned-7)",
      "args": "--exclude-oracle '$(touch pwned-8)'", "timeout": "`touch pwned-9`",
      "strict": "false", "output-dir": "out $(touch pwned-11)",
      "artifact-name": "$(touch pwned-12)"},
     "Invalid value for '--timeout'"),
])
def test_hostile_inputs_are_never_run_by_a_shell(tmp_path: Path, inputs: dict[str, str],
                                                 literal: str) -> None:
    run = run_action(tmp_path, **inputs)
    canaries = list(tmp_path.rglob("pwned*"))
    assert canaries == [], canaries
    # acp-fuzz got the words as they are, and refused them: a usage error fails the job.
    out = run.workspace / inputs.get("output-dir", "acp-fuzz-results")
    assert literal in (out / "acp-fuzz.log").read_text(encoding="utf-8")
    assert run.outputs["exit-code"] == "2"
    assert run.job_failed and run.results[-1].rc == 2
    assert run.uploads[0]["name"] == inputs.get("artifact-name", "acp-fuzz")
    if "profile" in inputs:  # the command line as run.py printed it, quoted by shlex.join
        command = run.step("Run acp-fuzz").stdout
        for words in ("--profile '$(touch pwned-7)'", "--timeout '`touch pwned-9`'",
                      "--exclude-oracle '$(touch pwned-8)'",
                      "-- acp-fuzz-reference-agent '`touch' 'pwned-6`'"):
            assert words in command, words


def test_the_agent_gets_its_words_unexpanded(tmp_path: Path) -> None:
    """Quotes group, nothing expands: the agent's argv is shlex.split of the input."""
    words = tmp_path / "words.json"
    agent = tmp_path / "agent.py"
    agent.write_text(f"import json, sys\njson.dump(sys.argv[1:], open({str(words)!r}, 'w'))\n",
                     encoding="utf-8")
    run = run_action(tmp_path, agent=f"{sys.executable} {agent} 'a b' \"$HOME\" `id` $(id) \\;")
    assert json.loads(words.read_text(encoding="utf-8")) == [
        "a b", "$HOME", "`id`", "$(id)", ";"]
    assert run.outputs["exit-code"] == "2"  # a script that speaks no ACP


def test_without_agent_or_profile_the_job_fails_without_running(tmp_path: Path) -> None:
    run = run_action(tmp_path)
    assert run.outputs["exit-code"] == "2" and run.job_failed
    assert "give the input agent (a command) or profile" in run.step("Run acp-fuzz").stdout
    assert "## acp-fuzz did not run" in run.summary.read_text(encoding="utf-8")
    assert not (run.workspace / "acp-fuzz-results" / "acp-fuzz.log").exists()


def test_install_step_installs_the_actions_own_checkout(tmp_path: Path) -> None:
    """install: true sets up Python without touching the job's PATH, makes a venv under
    RUNNER_TEMP with it and pip-installs GITHUB_ACTION_PATH; the run step uses that venv.
    (A fake python records what would be run: a real install takes minutes.)"""
    log = tmp_path / "python.log"
    fake = tmp_path / "python"
    fake.write_text(f"""#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
printf '%s\\n' "$0 $*" >> {str(log)!r}
""", encoding="utf-8")
    fake.chmod(0o755)
    run = ActionRun(tmp_path, {"agent": "my-agent", "python-version": "3.13"},
                    check_uploads=False)
    setup = next(s for s in STEPS if s.get("uses", "").startswith("actions/setup-python"))
    setup_id = setup["id"]
    real_fake_uses = run.fake_uses

    def fake_uses(step: dict[str, Any]) -> None:
        real_fake_uses(step)
        if step is setup:
            run.step_outputs[setup_id] = {"python-path": str(fake)}

    run.fake_uses = fake_uses  # type: ignore[method-assign]
    run.run()
    assert run.python_setups == [{"python-version": "3.13", "update-environment": "false"}]
    venv = run.temp / "acp-fuzz-venv"
    calls = log.read_text(encoding="utf-8").splitlines()
    assert calls[0] == (f"{venv}/bin/python -m pip install --quiet --disable-pip-version-check "
                        f"{REPO}")
    # The run step ran the venv's python on the action's script (the fake only records it).
    assert calls[1] == f"{venv}/bin/python {REPO}/scripts/action/run.py"
    assert run.step("Install acp-fuzz").outputs == {"bin": f"{venv}/bin"}
