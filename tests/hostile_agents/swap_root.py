#!/usr/bin/env python3
"""Swaps its session folder's parent for a link, then asks the client for files through it.

Started as ``swap_root.py target=PATH`` (``target=`` so that the file-system sandbox does
not show PATH's folder: it shows the folder of a bare path on the command line). On
``session/new`` with ``cwd`` = ``<root>/work/<name>`` it:

1. writes ``secret.txt`` ("the sandbox's own text") in ``cwd``, so that a read of it
   through the folder it made is its own text;
2. tries to create ``planted`` in ``<root>`` and to rename ``<root>/home`` (probes);
3. renames ``<root>/work`` to ``<root>/work.old`` and puts a symbolic link to ``PATH`` in
   its place (probes), so that ``<root>/work/<name>/...`` now names ``PATH/<name>/...``;
4. sends the client ``fs/read_text_file`` of ``cwd/secret.txt`` and ``fs/write_text_file``
   of ``cwd/written.txt`` ("PWNED"), by the paths as the harness gave them.

It answers ``session/new`` with ``{"sessionId": "s-1", "probes": {what: "ok:..." |
"error:ERRNO"}, "responses": [the client's answers, as received]}``. initialize gets a v1
result. Exits 0 at EOF on stdin.
"""

import errno
import os
import sys

from _agentlib import INIT_RESULT, read_msg, reply, send

OWN = "the sandbox's own text\n"


def attempt(action):  # type: ignore[no-untyped-def]
    try:
        return "ok:" + str(action())
    except OSError as exc:
        return "error:" + errno.errorcode.get(exc.errno or 0, str(exc))


def write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def ask(calls):  # type: ignore[no-untyped-def]
    """Send each (method, params) to the client; the answers, in order."""
    answers = []
    for i, (method, params) in enumerate(calls):
        cid = f"c{i}"
        send({"jsonrpc": "2.0", "id": cid, "method": method, "params": params})
        while (answer := read_msg()) is not None:
            if answer.get("id") == cid and "method" not in answer:
                answers.append(answer)
                break
    return answers


def swap(cwd: str, target: str) -> dict:  # type: ignore[type-arg]
    parent = os.path.dirname(cwd)
    root = os.path.dirname(parent)
    probes = {"write own": attempt(lambda: write(os.path.join(cwd, "secret.txt"), OWN))}
    probes["create in root"] = attempt(lambda: write(os.path.join(root, "planted"), "x"))
    probes["rename home"] = attempt(
        lambda: os.rename(os.path.join(root, "home"), os.path.join(root, "home.old")))
    probes["rename parent"] = attempt(lambda: os.rename(parent, parent + ".old"))
    probes["plant link"] = attempt(lambda: os.symlink(target, parent))
    return probes


def main() -> None:
    target = next(a.removeprefix("target=") for a in sys.argv[1:] if a.startswith("target="))
    while (msg := read_msg()) is not None:
        if "id" not in msg or "method" not in msg:
            continue
        if msg["method"] == "session/new":
            cwd = msg["params"]["cwd"]
            probes = swap(cwd, target)
            responses = ask([
                ("fs/read_text_file", {"sessionId": "s-1",
                                       "path": os.path.join(cwd, "secret.txt")}),
                ("fs/write_text_file", {"sessionId": "s-1",
                                        "path": os.path.join(cwd, "written.txt"),
                                        "content": "PWNED"}),
            ])
            reply(msg, {"sessionId": "s-1", "probes": probes, "responses": responses})
        else:
            reply(msg, INIT_RESULT)


main()
