"""An option is one option wherever it is taken: one help text, true for every command that
takes it (acp_fuzz/cli/options.py declares each once). A name two commands use for different
things is listed here, with why."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer.main

import acp_fuzz.cli  # noqa: F401  (registers every command on the app)
from acp_fuzz.cli.app import app

#: (option, command) pairs whose option only shares its name with the others.
DIFFERENT = {
    # a path the table's page is written to; show's is a flag that prints the page
    ("--html", "show"),
    # the agents of the table (repeatable, every profile by default), not the one agent run
    ("--profile", "matrix"),
    # a client's column of the table (TITLE=SCENARIO); replay's is a flag: the cassette is a
    # client's
    ("--client", "matrix"),
    # a replay's verdicts of cassettes and a merged campaign: reports of their own kinds
    ("--report", "replay"),
    ("--report", "report merge"),
}


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            out.update(_commands(command, f"{prefix}{name} "))
        else:
            out[prefix + name] = command
    return out


def _helps() -> dict[str, dict[str, set[str]]]:
    """Option name -> help text -> the commands that give it that text."""
    helps: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, command in _commands(typer.main.get_command(app)).items():
        for param in command.params:
            if param.param_type_name != "option":
                continue
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    helps[opt][param.help or ""].add(name)
    return helps


def test_every_option_has_one_help_text_across_the_commands() -> None:
    helps = _helps()
    assert {"target", "client", "doctor", "replay", "matrix"} <= {
        c for texts in helps.values() for cs in texts.values() for c in cs}
    twice = {}
    for opt, texts in helps.items():
        shared = {text: cs - {c for o, c in DIFFERENT if o == opt} for text, cs in texts.items()}
        shared = {text: cs for text, cs in shared.items() if cs}
        if len(shared) > 1:
            twice[opt] = {text: sorted(cs) for text, cs in shared.items()}
    assert twice == {}


def test_each_listed_difference_is_one() -> None:
    helps = _helps()
    for opt, command in DIFFERENT:
        texts = helps[opt]
        assert len(texts) > 1 and any(command in cs for cs in texts.values()), (opt, command)


def test_client_takes_target_s_time_budget() -> None:
    helps = _helps()["--time-budget"]
    assert [sorted(cs) for cs in helps.values()] == [["client", "matrix", "target"]]
