#!/usr/bin/env bash
# The action's last step (action.yml): fail the job when acp-fuzz found something or could not
# run. It runs after the upload, so the cassettes and reports are kept either way.
set -euo pipefail
case "${ACP_FUZZ_EXIT:-}" in
  0)
    echo "acp-fuzz: clean"
    ;;
  1)
    echo "::error title=acp-fuzz::${ACP_FUZZ_FINDINGS:-some} finding(s): see the job summary and the artifact"
    exit 1
    ;;
  *)
    echo "::error title=acp-fuzz::acp-fuzz could not run (exit ${ACP_FUZZ_EXIT:-unknown}): see the log of the step 'Run acp-fuzz'"
    exit 2
    ;;
esac
