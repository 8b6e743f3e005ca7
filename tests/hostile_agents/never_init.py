#!/usr/bin/env python3
"""Reads every request and answers none; exits 0 at stdin EOF."""

from _agentlib import drain_stdin

drain_stdin()
