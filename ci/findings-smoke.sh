#!/usr/bin/env bash
# CI's run of the findings ledger (docs/findings/README.md, issue 53): the standalone repro of
# one report per library, at the pinned version only, in the venv CI already built for that
# library's adapter tests. The whole ledger (every script, and a venv of each library's newest
# release) stays out of CI's budget: `python -m engines.findings check` runs it by hand.
#
#   bash ci/findings-smoke.sh LIB...      LIB: vllm openvino ortgenai ct2 mistralrs
#
# A bug that still reproduces is the expected state at an unmoved pin, and passes. It fails
# (exit 1) when a script cannot run at the pin (it crashed, timed out, or found no model
# files), or when its pinned result is not the one the status table at the top of
# docs/findings.md records, e.g. a report that newly reads "fixed": at the same pin the library
# has not changed, so the script (or the pin) has, and the change must rerun
# `python -m engines.findings check LIB --write` and commit the table with it.
# A LIB whose venv cannot be built on this machine (ci/LIB-env.sh prints SKIP and no python)
# is skipped visibly, as the adapter tests are; so is a LIB with no repro script yet.
#   FINDINGS_MODEL_DIR   where the presets are exported for the scripts (default: the ledger's)
#   FINDINGS_TIMEOUT     seconds per script (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

# The report each library's smoke run checks: a quick one whose script reproduces today.
# A LIB not named here (or whose report has no script) falls back to its lowest-numbered script.
declare -A SMOKE=([vllm]=41 [openvino]=7 [ortgenai]=12 [ct2]=45 [mistralrs]=27)

(($#)) || { echo "usage: findings-smoke.sh LIB... (vllm openvino ortgenai ct2 mistralrs)" >&2; exit 2; }
args=()
[[ -n ${FINDINGS_MODEL_DIR:-} ]] && args+=(--model-dir "$FINDINGS_MODEL_DIR")
args+=(--timeout "${FINDINGS_TIMEOUT:-600}")
status=0
for lib in "$@"; do
    # A background build of this venv (ci/envs.sh start, in .ci/run) is waited for first:
    # calling its env script while it runs would start a second build of the same venv.
    python=$(bash ci/envs.sh python "$lib")
    if [[ -z $python ]]; then
        echo "findings-smoke: SKIP $lib (its venv cannot be built here; see above)"
        continue
    fi
    # The preferred report if its script exists, else the library's first script (by venv).
    report=$("$PY" - "$lib" "${SMOKE[$lib]:-0}" <<'PYEOF'
import sys
from engines.findings.ledger import entries
lib, preferred = sys.argv[1], int(sys.argv[2])
reports = sorted(e.report for e in entries()[0] if e.venv == lib)
print(preferred if preferred in reports else (reports[0] if reports else ""))
PYEOF
)
    if [[ -z $report ]]; then
        echo "findings-smoke: SKIP $lib (no repro script in docs/findings/ yet)"
        continue
    fi
    echo "findings-smoke: $lib, report $report, at the pinned version"
    "$PY" -m engines.findings check "$lib" --pinned-only --gate --report "$report" "${args[@]}" \
        || status=1
done
exit $status
