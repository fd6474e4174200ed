#!/usr/bin/env bash
# Build the virtual environment mistral.rs runs in (.venv-mistralrs) and install this package
# into it, editable. Pinned: torch 2.13.0 (the CPU build, installed first so that nothing pulls
# a CUDA one; this package needs it to build the presets' checkpoints) and mistralrs 0.9.5 (the
# CPU wheel: candle compiled in, no torch of its own). The conversion (engines/adapters/
# mistralrs/convert.py) needs only transformers, safetensors and tokenizers, which this package
# already brings. torchvision, torchaudio and torchcodec are removed if anything pulled them in
# (CUDA builds that break `import transformers` against torch 2.13.0).
# The last line of stdout is the venv's python. Where the environment cannot be built (not
# x86_64 Linux, no python3.11, nothing installable) it prints a visible SKIP reason, prints no
# python, and exits 0; any other failure exits non-zero. A built venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${MISTRALRS_VENV:-.venv-mistralrs}
PY=${MISTRALRS_PYTHON:-python3.11}
MISTRALRS=0.9.5
STAMP="$VENV/.built-mistralrs-$MISTRALRS"
LOG="$VENV.log"

skip() { echo "SKIP mistralrs: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}
step() { echo "mistralrs-env: $* ($((SECONDS - START)) s)" >&2; }

START=$SECONDS
if [[ -f $STAMP ]]; then
    step "reusing $VENV (built: $STAMP)"
else
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "this script pins the x86_64 Linux wheel of mistralrs $MISTRALRS, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    step "building $VENV (mistralrs $MISTRALRS; log: $LOG)"
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    pip_quiet install "torch==2.13.0" || { rm -rf "$VENV"; skip "pip could not install torch"; }
    step "torch 2.13.0 installed"
    pip_quiet install "torch==2.13.0" "mistralrs==$MISTRALRS" \
        || { rm -rf "$VENV"; skip "pip could not install mistralrs==$MISTRALRS (see above)"; }
    step "mistralrs $MISTRALRS installed"
    pip_quiet install "torch==2.13.0" -e .
    step "this package installed (editable)"
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c "import mistralrs, torch, transformers, tokenizers, engines.models
from importlib.metadata import version
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert version('mistralrs') == '$MISTRALRS', version('mistralrs')" >&2
    touch "$STAMP"
    step "done"
fi
echo "$VENV/bin/python"
