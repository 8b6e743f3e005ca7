#!/bin/sh
# Install the pinned third-party ACP agents into the agent cache (idempotent).
#   scripts/install-agents.sh                 # every pinned profile: npm, and hermes-agent from PyPI
#   scripts/install-agents.sh codex-acp       # just one
#   ACP_FUZZ_AGENT_CACHE=/some/dir scripts/install-agents.sh
# Default cache: ~/.cache/acp-fuzz/agents/<name>@<version>/ (or under $XDG_CACHE_HOME).
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" -m acp_fuzz agents install "$@"
