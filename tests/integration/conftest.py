"""Fixtures of the reference agent's own tests (v1 and v2): one fake model per module, and a
spawner that starts the agent as a subprocess and reaps it. The client and the model live in
``test_reference_agent.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_reference_agent import ModelServer, Spawner


@pytest.fixture(scope="module")
def model_server() -> Iterator[ModelServer]:
    # One server for the module (shutting one down costs half a second); each test resets it.
    server = ModelServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def model(model_server: ModelServer) -> ModelServer:
    model_server.reset()
    return model_server


@pytest.fixture
def spawn(tmp_path: Path, model: ModelServer) -> Iterator[Spawner]:
    home = tmp_path / "home"
    home.mkdir()
    spawner = Spawner(home, model)
    try:
        yield spawner
    finally:
        spawner.reap()
