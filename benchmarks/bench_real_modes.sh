#!/bin/sh
# Pre-spawning on/off and one worker against two, on each pinned real agent (issue #14).
#   benchmarks/bench_real_modes.sh [PROFILE ...]   # default: codex-acp claude-agent-acp
# Run it on a quiet machine; results: benchmarks/results/real-modes-<profile>-<run>.json.
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ $# -gt 0 ] || set -- codex-acp claude-agent-acp
for p in "$@"; do
  echo "== $p pre-spawn on (with the raw-client floor) $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" benchmarks/bench_real.py --profiles "$p" --examples 6 --seed 0 --label "modes-$p-on"
  echo "== $p pre-spawn off $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" benchmarks/bench_real.py --profiles "$p" --examples 6 --seed 0 --no-prespawn --no-floor \
    --label "modes-$p-off"
  echo "== $p 1 worker, 12 examples $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" benchmarks/bench_real.py --profiles "$p" --examples 12 --seed 0 --no-floor --label "modes-$p-w1"
  echo "== $p 2 workers, 12 examples $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" benchmarks/bench_real.py --profiles "$p" --examples 12 --seed 0 --workers 2 --no-floor \
    --label "modes-$p-w2"
done
echo "== done $(date +%T)"
