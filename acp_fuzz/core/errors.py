"""Every error acp-fuzz raises to its caller, under one base class.

Catch :class:`AcpFuzzError` to handle anything the harness itself could not do; each
subclass's message is one line, fit to show a user as is. A *finding* (the agent broke a
rule) is never an exception: it is a :class:`acp_fuzz.Finding` in a result.

The classes are defined here and re-exported where they are raised (``acp_fuzz.core.cassette``,
``acp_fuzz.engine.process.transport``, ...), so either import path works. This module imports
nothing from the rest of the package.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "AcpFuzzError",
    "AgentStartError",
    "CassetteError",
    "DatabaseError",
    "HarnessError",
    "RecordingError",
    "RpcError",
    "SandboxError",
    "UpstreamError",
]


def _one_line(text: str) -> str:
    # Paths and reasons may come from a stranger's file: no control character reaches a
    # terminal or a log line through them.
    return text if text.isprintable() else repr(text)[1:-1]


class AcpFuzzError(Exception):
    """Base class of every error acp-fuzz raises on purpose."""


class HarnessError(AcpFuzzError):
    """The harness could not do its job (the agent cannot be started, bad settings, ...).

    Distinct from a finding: a finding is the agent's fault, this is not (or not provably).
    """


class AgentStartError(AcpFuzzError):
    """The agent could not be started (program missing or not executable, bad cwd).
    The message is one line, suitable to show as is."""


class RpcError(AcpFuzzError):
    """A JSON-RPC error, raised by a client handler to answer the agent with an error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def to_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class CassetteError(AcpFuzzError):
    """A cassette could not be read (or is not a cassette at all).

    ``str(error)`` is a single line, ``"<path>: <reason>"``, where the reason starts with one
    of ``truncated``, ``corrupt``, ``too large``, ``too deeply nested``,
    ``not an acp-fuzz cassette``, ``unsupported format version`` or ``cannot read``.
    ``path`` and ``reason`` are also available as attributes.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = _one_line(reason)
        super().__init__(f"{_one_line(self.path)}: {self.reason}")


class UpstreamError(AcpFuzzError):
    """The upstream could not be reached, or a replay has no recorded reply for a request."""


class RecordingError(UpstreamError):
    """A recorded model exchange is unusable (too large, malformed): one line, for the user."""


class DatabaseError(AcpFuzzError, ValueError):
    """The ``--db`` value cannot be used (one line, for the user)."""


class SandboxError(AcpFuzzError):
    """The isolation asked for cannot be had here (one line, for the user)."""
