#!/usr/bin/env python3
"""Starts a `sleep 1000` child that inherits stdin, stdout and stderr (so the pipes stay open),
answers initialize with {"grandchild": <its pid>, ...}, then, on the next request:

- mode "exit" (default): exits with status 0 without answering;
- mode "hang": hangs forever without answering. In this mode the agent and its child ignore
  SIGTERM from the start, so only SIGKILL of the whole group ends them.
"""

import os
import shutil
import signal
import subprocess
import sys

from _agentlib import INIT_RESULT, hang, read_msg, reply

mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
if mode == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child
sleep = shutil.which("sleep")
argv = [sleep, "1000"] if sleep else [sys.executable, "-c", "import time; time.sleep(1000)"]
child = subprocess.Popen(argv)  # inherits fds 0, 1 and 2
msg = read_msg()
if msg is not None:
    reply(msg, {**INIT_RESULT, "grandchild": child.pid})
read_msg()
if mode == "hang":
    hang()
os._exit(0)
