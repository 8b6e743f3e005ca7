"""Fixtures of the reference agent's own tests (v1 and v2): one fake model per module, and a
spawner that starts the agent as a subprocess and reaps it (the client and the model live in
``test_reference_agent.py``); and a real Redis server (``--db redis://``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import free_port
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


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server on a free loopback port, no persistence, stopped afterwards."""
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (.ci/run installs it)")
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # synchronise on the server's own words, not on time
            if "Ready to accept connections" in line:
                break
        else:
            pytest.fail(f"redis-server exited with {proc.wait()}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
