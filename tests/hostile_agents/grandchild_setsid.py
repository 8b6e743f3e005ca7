#!/usr/bin/env python3
"""Starts a grandchild that escapes its process group: ``setsid`` (a new session), stdin,
stdout and stderr on /dev/null, so nothing ties it to the agent any more. Its command line
ends with argv[1] so a test can find it. Answers initialize with {"grandchild": <its pid as
seen here>, ...}, then answers nothing and exits at EOF on stdin."""

import subprocess
import sys

from _agentlib import INIT_RESULT, drain_stdin, read_msg, reply

tag = sys.argv[1] if len(sys.argv) > 1 else "acp-fuzz-escapee"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", tag],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
# Popen returns once the child has called exec, but (with vfork) before the kernel has set up
# the new program's argument area: /proc/PID/cmdline can still be empty when a test looks for
# the tag. Answer only once the escapee is findable by its command line (bounded: a child
# that died is no escapee, and the test says so).
for _ in range(100_000):
    try:
        with open(f"/proc/{child.pid}/cmdline", "rb") as f:
            if tag.encode() in f.read():
                break
    except OSError:
        break
    if child.poll() is not None:
        break
msg = read_msg()
if msg is not None:
    reply(msg, {**INIT_RESULT, "grandchild": child.pid})
drain_stdin()
