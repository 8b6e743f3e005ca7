#!/usr/bin/env python3
"""Writes what the network looks like from where it runs to the JSON file argv[1], then exits
(so the run stops with a harness error): the interfaces that are up, and what a UDP
``connect()`` to a documentation address (198.51.100.1, RFC 5737) gives. That connect sends
nothing; it only asks the kernel for a route."""

import errno
import fcntl
import json
import socket
import struct
import sys


def up_interfaces() -> list[str]:
    up = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            ifreq = struct.pack("16sh", name.encode(), 0)
            flags = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), 0x8913, ifreq))[1]
            if flags & 0x1:
                up.append(name)
    return up


def route() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("198.51.100.1", 9))
        except OSError as exc:
            return errno.errorcode.get(exc.errno or 0, str(exc))
        return "route"


with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump({"up": up_interfaces(), "connect": route()}, f)
