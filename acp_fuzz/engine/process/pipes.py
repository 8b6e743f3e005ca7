"""The raw pipe operations of the stdio transport (engine): whole writes, what a pipe holds
unread, and the self-pipes its threads are told to stop by."""

from __future__ import annotations

import fcntl
import os
import struct
import termios

__all__ = ["Broadcast"]

_READ_CHUNK = 64 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _bytes_available(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("@i", buf)[0])


class Broadcast:
    """A self-pipe used as a level-triggered broadcast: closing the write end (:meth:`fire`)
    makes the read end ``r`` permanently readable for every poller. Both ends are ``-1``
    until :meth:`open`."""

    __slots__ = ("r", "w")

    def __init__(self) -> None:
        self.r = self.w = -1

    def open(self) -> None:
        self.r, self.w = os.pipe()

    def fire(self) -> None:
        os.close(self.w)
