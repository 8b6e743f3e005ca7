#!/usr/bin/env python3
"""Dies before reading anything: one line on stderr, exit status 3."""

import sys

sys.stderr.write("fatal: refusing to start\n")
sys.exit(3)
