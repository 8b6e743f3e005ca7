"""Scenarios: the command lines that drive a client through one example (pure).

A person drives an editor; a headless client needs its command lines given. A scenario is a
list of steps, each one run of the client, that share one stand-in agent state (its sessions)
and one client ``HOME``, so that a client can create a session in one command line, prompt
it in the next and reattach it in a third::

    acp-fuzz client --step 'new' --step 'prompt hello' -- my-client --agent {agent}

Each step's words are appended to the client command (the words after ``--``); without a
client command each step is a whole command line. Without any step the client command runs
once. The same as a file (``--scenario FILE``, TOML)::

    command = ["my-client", "--agent", "{agent}"]   # optional; `-- CMD` replaces it
    timeout = 60                                    # seconds per step (optional)

    [[step]]
    run = "new"                                     # split like a shell line (no expansion)

    [[step]]
    args = ["prompt", "hello"]                      # or the words as a list
    stdin = "typed by the user\\n"                  # optional: given on the client's stdin

An argument that is exactly ``{agent}`` becomes the stand-in's command line (one argument);
the client also finds it in ``$ACP_FUZZ_AGENT``.
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.errors import AcpFuzzError

__all__ = ["AGENT_PLACEHOLDER", "Scenario", "ScenarioError", "Step", "parse_scenario"]

#: The argument replaced by the stand-in's command line.
AGENT_PLACEHOLDER = "{agent}"
DEFAULT_TIMEOUT = 60.0
MAX_STEPS = 64


class ScenarioError(AcpFuzzError, ValueError):
    """A scenario that cannot be run; the message is one line."""


@dataclass(frozen=True)
class Step:
    """One run of the client: ``args`` appended to the client command; ``stdin`` given on
    its standard input (``None``: an empty one)."""

    args: tuple[str, ...] = ()
    stdin: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"args": list(self.args), "stdin": self.stdin}

    @classmethod
    def from_wire(cls, obj: Any) -> Step:
        if not isinstance(obj, Mapping):
            raise ScenarioError("a recorded step must be a map")
        args, stdin = obj.get("args", []), obj.get("stdin")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ScenarioError("a recorded step's args must be a list of strings")
        if stdin is not None and not isinstance(stdin, str):
            raise ScenarioError("a recorded step's stdin must be a string")
        return cls(tuple(args), stdin)


@dataclass(frozen=True)
class Scenario:
    """The client command and its steps. ``timeout`` bounds each step, in seconds."""

    command: tuple[str, ...] = ()
    steps: tuple[Step, ...] = field(default_factory=lambda: (Step(),))
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if not self.steps:
            raise ScenarioError("a scenario needs at least one step")
        if len(self.steps) > MAX_STEPS:
            raise ScenarioError(f"a scenario has at most {MAX_STEPS} steps, "
                                f"not {len(self.steps)}")
        if not self.timeout > 0:
            raise ScenarioError(f"the step timeout must be positive, not {self.timeout}")

    def check(self) -> None:
        """:class:`ScenarioError` unless every step has a command to run (once the client
        command is final: ``-- CMD`` may replace a file's)."""
        for i, step in enumerate(self.steps, 1):
            if not (*self.command, *step.args):
                raise ScenarioError(f"step {i} has no command: give the client command "
                                    "after -- or a whole command line in each step")

    def argv(self, index: int, agent: str) -> list[str]:
        """The command line of step ``index``, with ``{agent}`` replaced by ``agent``."""
        words = [*self.command, *self.steps[index].args]
        return [agent if w == AGENT_PLACEHOLDER else w for w in words]

    def with_command(self, command: Sequence[str]) -> Scenario:
        return Scenario(tuple(command), self.steps, self.timeout)

    def to_wire(self) -> dict[str, Any]:
        return {"command": list(self.command), "steps": [s.to_wire() for s in self.steps],
                "timeout": self.timeout}

    @classmethod
    def from_wire(cls, obj: Any) -> Scenario:
        if not isinstance(obj, Mapping):
            raise ScenarioError("a recorded scenario must be a map")
        command, steps = obj.get("command", []), obj.get("steps")
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise ScenarioError("a recorded scenario's command must be a list of strings")
        if not isinstance(steps, list):
            raise ScenarioError("a recorded scenario's steps must be a list")
        timeout = obj.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise ScenarioError("a recorded scenario's timeout must be a number")
        return cls(tuple(command), tuple(Step.from_wire(s) for s in steps), float(timeout))

    @classmethod
    def from_steps(cls, command: Sequence[str], steps: Sequence[str],
                   timeout: float = DEFAULT_TIMEOUT) -> Scenario:
        """The scenario of ``--step`` strings (each split like a shell line)."""
        return cls(tuple(command), tuple(Step(_split(s, f"--step {s!r}")) for s in steps)
                   or (Step(),), timeout)


@dataclass(frozen=True)
class ClientRunSettings:
    """The settings a client cassette records (``Header.settings`` of an ``acp-fuzz client``
    cassette), read with their types: the capability set the stand-in advertised, the
    scenario the client ran, and whether SHOULD findings failed the run. A cassette is data
    from whoever wrote it: :meth:`from_wire` raises :class:`ScenarioError` or ``ValueError``
    (one line) for settings that are not these."""

    capabilities: CapabilitySet
    scenario: Scenario
    strict: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"capabilities": self.capabilities.to_wire(), "scenario": self.scenario.to_wire(),
                "strict": self.strict}

    @classmethod
    def from_wire(cls, settings: Any) -> ClientRunSettings:
        if not isinstance(settings, Mapping):
            raise ScenarioError("a client cassette's settings must be a map")
        return cls(CapabilitySet.from_wire(settings.get("capabilities")),
                   Scenario.from_wire(settings.get("scenario")), settings.get("strict") is True)


def _split(line: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(line))
    except ValueError as e:
        raise ScenarioError(f"{where}: {e}") from None


def parse_scenario(text: str, source: str = "scenario") -> Scenario:
    """The scenario of a TOML file's text; :class:`ScenarioError` naming the key otherwise."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{source}: not TOML: {e}") from None
    unknown = sorted(set(doc) - {"command", "timeout", "step"})
    if unknown:
        raise ScenarioError(f"{source}: unknown key {unknown[0]!r} (known: command, timeout, "
                            "step)")
    command = doc.get("command", [])
    if isinstance(command, str):
        command = list(_split(command, f"{source}: command"))
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise ScenarioError(f"{source}: command must be a string or a list of strings")
    timeout = doc.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise ScenarioError(f"{source}: timeout must be a positive number of seconds")
    raw = doc.get("step", [])
    if not isinstance(raw, list):
        raise ScenarioError(f"{source}: step must be an array of tables ([[step]])")
    steps = []
    for i, s in enumerate(raw, 1):
        where = f"{source}: step {i}"
        if not isinstance(s, dict):
            raise ScenarioError(f"{where} must be a table")
        bad = sorted(set(s) - {"run", "args", "stdin"})
        if bad:
            raise ScenarioError(f"{where}: unknown key {bad[0]!r} (known: run, args, stdin)")
        if ("run" in s) == ("args" in s):
            raise ScenarioError(f"{where} needs exactly one of run (a string) and args "
                                "(a list of strings)")
        if "run" in s:
            if not isinstance(s["run"], str):
                raise ScenarioError(f"{where}: run must be a string")
            args = _split(s["run"], f"{where}: run")
        else:
            if not isinstance(s["args"], list) or not all(isinstance(a, str)
                                                          for a in s["args"]):
                raise ScenarioError(f"{where}: args must be a list of strings")
            args = tuple(s["args"])
        stdin = s.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise ScenarioError(f"{where}: stdin must be a string")
        steps.append(Step(args, stdin))
    return Scenario(tuple(command), tuple(steps) or (Step(),), float(timeout))
