"""The agent's stderr, read by one thread (engine): recorded up to a bound, its end kept.

:class:`StderrReader` owns the tail of stderr (:attr:`AgentProcess.stderr_tail`) and the loop
of the thread that reads it into ``stderr`` events, up to ``stderr_record_limit`` bytes.
"""

from __future__ import annotations

import codecs
import os
import select
import threading
from collections.abc import Callable
from typing import Any

from acp_fuzz.engine.process.pipes import _READ_CHUNK, _bytes_available

__all__ = ["StderrReader"]


class StderrReader:
    """The reading of one agent's stderr: its last ``tail_bytes`` kept, its first
    ``record_limit`` bytes recorded."""

    def __init__(self, tail_bytes: int, record_limit: int) -> None:
        self.tail_bytes = tail_bytes
        self.record_limit = record_limit
        self._tail = bytearray()
        self._tail_lock = threading.Lock()

    @property
    def tail(self) -> str:
        """The last ``tail_bytes`` of stderr, decoded with replacement characters."""
        with self._tail_lock:
            data = bytes(self._tail)
        return data.decode("utf-8", errors="replace")

    def run(self, fd: int, stop_r: int, record: Callable[[str, dict[str, Any]], None],
            generation: int) -> None:
        """The stderr thread's loop: until EOF, or until ``stop_r`` is readable (then what
        the pipe holds is read first)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        recorded = 0
        truncated = False
        limit = self.record_limit

        def handle(data: bytes) -> None:
            nonlocal recorded, truncated
            with self._tail_lock:
                self._tail += data
                if len(self._tail) > self.tail_bytes:
                    del self._tail[: len(self._tail) - self.tail_bytes]
            if truncated:
                return
            room = limit - recorded
            piece = data[:room]
            recorded += len(piece)
            text = decoder.decode(piece)
            if text:
                record("stderr", {"text": text, "generation": generation})
            if len(piece) < len(data) or recorded >= limit:
                truncated = True
                record("stderr", {"text": "", "generation": generation,
                                  "truncated": True, "limit": limit})

        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(stop_r, select.POLLIN)
        while True:
            ready = dict(poller.poll())
            if fd in ready:
                data = os.read(fd, _READ_CHUNK)
                if not data:
                    break
                handle(data)
            if stop_r in ready:
                n = _bytes_available(fd)
                while n > 0:
                    data = os.read(fd, min(n, _READ_CHUNK))
                    if not data:
                        break
                    handle(data)
                    n -= len(data)
                break
        if not truncated:
            text = decoder.decode(b"", final=True)
            if text:
                record("stderr", {"text": text, "generation": generation})
