#!/usr/bin/env python3
"""Tries to read each file named on its command line as ``file=PATH`` (not a bare path: the
file-system sandbox shows the folder of a path on the command line), to list /root and /work,
and to write into its HOME and its working directory; reports whether /usr and /etc are
mounted read-only (``statvfs``, so that nothing is written outside even without a sandbox).
Answers initialize with what happened, {"probes": {what: "ok:<text>" | "error:<errno>"}, ...},
then exits at EOF on stdin."""

import errno
import os
import sys

from _agentlib import INIT_RESULT, drain_stdin, read_msg, reply


def attempt(action):  # type: ignore[no-untyped-def]
    try:
        return "ok:" + str(action())
    except OSError as exc:
        return "error:" + errno.errorcode.get(exc.errno or 0, str(exc))


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("x")
    return path


probes = {}
for arg in sys.argv[1:]:
    path = arg.removeprefix("file=")
    probes["read " + path] = attempt(lambda p=path: read(p))
for folder in ("/root", "/work"):
    probes["list " + folder] = attempt(lambda d=folder: sorted(os.listdir(d)))
probes["write home"] = attempt(lambda: write(os.path.join(os.environ["HOME"], "mine")))
probes["write cwd"] = attempt(lambda: write(os.path.join(os.getcwd(), "mine")))
for folder in ("/usr", "/etc"):
    probes["read-only " + folder] = attempt(
        lambda d=folder: bool(os.statvfs(d).f_flag & os.ST_RDONLY))
msg = read_msg()
if msg is not None:
    reply(msg, {**INIT_RESULT, "probes": probes})
drain_stdin()
