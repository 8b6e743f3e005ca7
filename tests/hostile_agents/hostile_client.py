#!/usr/bin/env python3
"""A hostile ACP *client* for ``acp-fuzz client`` (standard library only). Each run it does
one trick (``argv[1]``) against the harness that runs it, then starts the stand-in agent from
``$ACP_FUZZ_AGENT``, initializes it and exits, so the step counts as a real connection.

The sandbox root is the parent of ``$HOME`` (``<root>/home``); the stand-in's folder is the
last word of ``$ACP_FUZZ_AGENT``.

* ``links SECRET CANARY``: where the harness kept the step logs (``<root>/step-N.out`` and
  ``.err``), swap this step's stderr log for a symlink to ``SECRET`` and plant the next
  step's stdout log as a symlink to ``CANARY``; then print ``STEP-OUTPUT`` on stdout, so a
  harness that follows the link writes it into ``CANARY``.
* ``fifo``: plant FIFOs where the harness reads: a stand-in log ``conn-99.jsonl`` and the
  next step's logs. A harness that opens them blocks for good.
* ``flood N [PROMPTS]``: start the stand-in ``N`` times, sending it ``PROMPTS`` (50)
  prompts without a session each time, so every connection logs ``2 * PROMPTS + 2`` frames.
* ``setsid TAG``: first start a daemon (``python -c SLEEP TAG``, in a session of its own,
  its stdio on /dev/null) that outlives this client unless something kills it, and print
  ``daemon PID``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys

SLEEP = "import time; time.sleep(1000)"


def _root() -> str:
    return os.path.dirname(os.environ["HOME"])


def _step() -> int:
    """This step's number: the first ``step-N.err`` the harness has not seen yet."""
    n = 0
    while os.path.lexists(os.path.join(_root(), f"step-{n + 1}.err")):
        n += 1
    return n


def _plant(path: str, how: str, target: str = "") -> None:
    """A symlink to ``target`` (or a FIFO) at ``path``, where the sandbox lets it be put."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        if how == "link":
            os.symlink(target, path)
        else:
            os.mkfifo(path)


def talk(prompts: int = 0) -> None:
    """Start the stand-in, initialize it, send ``prompts`` prompts, and hang up."""
    agent = subprocess.Popen(shlex.split(os.environ["ACP_FUZZ_AGENT"]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    msgs = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": 1, "clientCapabilities": {}}}]
    msgs += [{"jsonrpc": "2.0", "id": i, "method": "session/prompt",
              "params": {"sessionId": "sess-x", "prompt": []}} for i in range(1, prompts + 1)]
    for msg in msgs:
        agent.stdin.write(json.dumps(msg).encode() + b"\n")
        agent.stdin.flush()
        agent.stdout.readline()
    agent.stdin.close()
    agent.wait()


def main(args: list[str]) -> int:
    trick = args[0] if args else ""
    root = _root()
    run_dir = shlex.split(os.environ["ACP_FUZZ_AGENT"])[-1]
    n = _step()
    if trick == "links":
        secret, canary = args[1], args[2]
        if os.path.lexists(os.path.join(root, f"step-{n}.err")):
            _plant(os.path.join(root, f"step-{n}.err"), "link", secret)
        _plant(os.path.join(root, f"step-{n + 1}.out"), "link", canary)
        print("STEP-OUTPUT", flush=True)
    elif trick == "fifo":
        _plant(os.path.join(run_dir, "conn-99.jsonl"), "fifo")
        for name in (f"step-{n + 1}.out", f"step-{n + 1}.err"):
            _plant(os.path.join(root, name), "fifo")
    elif trick == "setsid":
        daemon = subprocess.Popen([sys.executable, "-c", SLEEP, args[1]],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        print(f"daemon {daemon.pid}", flush=True)  # Popen returns once it runs SLEEP
    if trick == "flood":
        for _ in range(int(args[1])):
            talk(int(args[2]) if len(args) > 2 else 50)
    else:
        talk()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
