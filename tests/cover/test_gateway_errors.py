"""The gateway stays quiet when an agent drops its connection mid-request."""

from __future__ import annotations

import pytest

from acp_fuzz.engine.gateway import Gateway


def test_connection_reset_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    with Gateway() as gw:
        server = gw._server
        assert server is not None
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            server.handle_error(None, ("127.0.0.1", 1))
        try:
            raise ValueError("a real bug in a handler")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 2))
    err = capsys.readouterr().err
    assert "ConnectionResetError" not in err
    assert "ValueError: a real bug in a handler" in err
