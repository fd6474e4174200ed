#!/usr/bin/env bash
# Build a separate virtual environment for GuideLLM (the serving benchmark docs/benchmarks.md
# compares the bench with, "Over HTTP, beside GuideLLM"). Its own venv: its pins (pydantic,
# transformers, datasets) need not agree with ours, and nothing of ours is installed into it.
# The last line of stdout is its guidellm executable. Where it cannot be built (no python3.11,
# no installable guidellm) it prints a visible SKIP reason, prints no path, and exits 0; any
# other failure exits non-zero. A built venv is reused. Not run by CI: the comparison is a
# documented measurement (scripts/guidellm_beside.py), not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.8.1
VENV=${GUIDELLM_VENV:-.venv-guidellm}
PY=${GUIDELLM_PYTHON:-python3.11}
STAMP="$VENV/.built-guidellm-$VERSION"
LOG="$VENV.log"

skip() { echo "SKIP guidellm: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}

if [[ ! -f $STAMP ]]; then
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    echo "building $VENV (guidellm $VERSION; log: $LOG)" >&2
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    # The CPU build of torch first, as ci/setup.sh: GuideLLM's torch requirement would
    # otherwise pull the CUDA build (GBs of wheels) that a CPU client never uses.
    pip_quiet install "torch==${TORCH_VERSION:-2.13.0}"
    pip_quiet install "guidellm==$VERSION" \
        || { rm -rf "$VENV"; skip "pip could not install guidellm==$VERSION (see above)"; }
    "$VENV/bin/guidellm" --help >/dev/null
    touch "$STAMP"
fi
echo "$VENV/bin/guidellm"
