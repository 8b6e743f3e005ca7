"""``acp-fuzz client --db``: one example database may serve agent campaigns and client
campaigns alike, each keeping its examples to itself. A client's scope is its scenario (every
step's command line and stdin) and the ACP versions its capability sets are drawn from; an
agent's is its identity. ``--db`` is the one option of ``target``, with its help."""

from __future__ import annotations

import sys

import typer.main
from hypothesis.database import InMemoryExampleDatabase

import acp_fuzz.cli  # noqa: F401  (registers every command on the app)
from acp_fuzz.cli.app import app
from acp_fuzz.core.scenarios import Scenario, Step
from acp_fuzz.engine.campaign.database import AgentScoped
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import agent_scope
from acp_fuzz.engine.client.campaign import ClientSettings, client_scope

CLIENT = (sys.executable, "-m", "acp_fuzz.reference_client")


def _shared(*scopes: str) -> list[list[bytes]]:
    """What each scope fetches from one database after each saved one example under the same
    Hypothesis key."""
    db = InMemoryExampleDatabase()
    views = [AgentScoped(db, s) for s in scopes]
    for i, view in enumerate(views):
        view.save(b"key", f"example {i}".encode())
    return [sorted(view.fetch(b"key")) for view in views]


def test_two_scenarios_of_one_client_keep_their_examples_apart() -> None:
    one, steps, stdin, other = (
        Scenario(CLIENT), Scenario.from_steps(CLIENT, ["new", "prompt hi"]),
        Scenario(CLIENT, (Step((), "hello"),)), Scenario((*CLIENT, "--bug", "no-resend")))
    scopes = [client_scope(s) for s in (one, steps, stdin, other)]
    assert len(set(scopes)) == 4
    assert _shared(*scopes) == [[b"example 0"], [b"example 1"], [b"example 2"],
                                [b"example 3"]]


def test_a_scenario_has_one_scope_whatever_its_timeout_or_the_run() -> None:
    assert client_scope(Scenario(CLIENT, timeout=5)) == client_scope(Scenario(CLIENT))
    assert _shared(client_scope(Scenario(CLIENT)), client_scope(Scenario(CLIENT))) == [
        [b"example 0", b"example 1"]] * 2


def test_a_client_and_an_agent_keep_their_examples_apart() -> None:
    """Even an agent run with the client's very command line."""
    spec = TargetSpec(argv=CLIENT)
    agent = agent_scope({"name": "reference-client", "version": "1"}, spec)
    client = client_scope(Scenario(CLIENT))
    assert agent != client
    assert _shared(agent, client) == [[b"example 0"], [b"example 1"]]


def test_the_database_is_off_by_default() -> None:
    assert ClientSettings().db is None


def test_client_takes_the_db_option_of_target() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    db = {name: next(p for p in commands[name].params if "--db" in p.opts)
          for name in ("target", "client")}
    assert db["target"].help == db["client"].help
    assert db["client"].default is None
    assert "client scenario" in (db["client"].help or "")
