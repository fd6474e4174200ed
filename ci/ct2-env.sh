#!/usr/bin/env bash
# Build the virtual environment CTranslate2 runs in (.venv-ct2) and install this package into
# it, editable. Pinned: torch 2.13.0 (the CPU build, installed first so that nothing pulls a
# CUDA one) and ctranslate2 4.8.5. The offline conversion (ct2-transformers-converter's Python
# API) needs transformers and torch, which this package already brings: no converter layer.
# torchvision, torchaudio and torchcodec are removed if anything pulled them in (CUDA builds
# that break `import transformers` against torch 2.13.0).
# The last line of stdout is the venv's python. Where the environment cannot be built (not
# x86_64 Linux, no python3.11, nothing installable) it prints a visible SKIP reason, prints no
# python, and exits 0; any other failure exits non-zero. A built venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${CT2_VENV:-.venv-ct2}
PY=${CT2_PYTHON:-python3.11}
CT2=4.8.5
STAMP="$VENV/.built-ctranslate2-$CT2"
LOG="$VENV.log"

skip() { echo "SKIP ct2: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}
step() { echo "ct2-env: $* ($((SECONDS - START)) s)" >&2; }

START=$SECONDS
if [[ -f $STAMP ]]; then
    step "reusing $VENV (built: $STAMP)"
else
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "this script pins the x86_64 Linux wheel of ctranslate2 $CT2, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    step "building $VENV (ctranslate2 $CT2; log: $LOG)"
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    pip_quiet install "torch==2.13.0" || { rm -rf "$VENV"; skip "pip could not install torch"; }
    step "torch 2.13.0 installed"
    pip_quiet install "torch==2.13.0" "ctranslate2==$CT2" \
        || { rm -rf "$VENV"; skip "pip could not install ctranslate2==$CT2 (see above)"; }
    step "ctranslate2 $CT2 installed"
    pip_quiet install "torch==2.13.0" -e .
    step "this package installed (editable)"
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c "import ctranslate2, torch, transformers, engines.models
import ctranslate2.converters
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert ctranslate2.__version__ == '$CT2', ctranslate2.__version__" >&2
    touch "$STAMP"
    step "done"
fi
echo "$VENV/bin/python"
