#!/usr/bin/env bash
# The action's install step (action.yml): acp-fuzz from the action's own checkout, so that
# `uses: OWNER/acp-fuzz@REF` always runs the acp-fuzz of REF, in a venv of its own (the job's
# Python and the agent's packages are left alone). Its bin folder is the step output `bin`.
set -euo pipefail
venv="$RUNNER_TEMP/acp-fuzz-venv"
"${ACP_FUZZ_PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$GITHUB_ACTION_PATH"
echo "bin=$venv/bin" >>"$GITHUB_OUTPUT"
