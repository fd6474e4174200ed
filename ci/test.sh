#!/usr/bin/env bash
# The checks CI runs, in order; each must pass. Expects the venv from ci/setup.sh active.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff"
ruff check .

echo "== pytest -n auto (the README's test command)"
set +e
pytest -n auto
rc=$?
set -e
# Exit code 5 means no test ran: that is a failure here, not a pass.
[ "$rc" -eq 0 ] || { echo "pytest failed with exit code $rc"; exit 1; }

echo "== asv smoke: every benchmark once on the CPU"
bash ci/asv-smoke.sh

echo "== the conformance suite on third-party engines (transformers CB, vLLM CPU)"
bash ci/test-third-party.sh --hypothesis-profile=ci
