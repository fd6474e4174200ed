#!/usr/bin/env bash
# Build the virtual environment onnxruntime-genai runs in (.venv-ortgenai) and install this
# package into it, editable. Pinned: torch 2.13.0 (the CPU build, installed first so that
# nothing pulls a CUDA one), onnxruntime-genai 0.18.0 with onnxruntime 1.31.1 (it requires
# >= 1.31.0), and for its offline model builder (`onnxruntime_genai.models.builder`) onnx and
# onnx_ir, which it imports without declaring them. The builder needs transformers < 5.20 and
# this package needs >= 5.16, so transformers is pinned to 5.19.0 in the venv itself (no
# --target layer as for OpenVINO). torchvision, torchaudio and torchcodec are removed if
# anything pulled them in: those builds break against torch 2.13.0.
# The last line of stdout is the venv's python. Where the environment cannot be built (not
# x86_64 Linux, no python3.11, nothing installable) it prints a visible SKIP reason, prints no
# python, and exits 0; any other failure exits non-zero. A built venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${ORTGENAI_VENV:-.venv-ortgenai}
PY=${ORTGENAI_PYTHON:-python3.11}
GENAI=0.18.0
STAMP="$VENV/.built-onnxruntime-genai-$GENAI"
LOG="$VENV.log"
PINS=("onnxruntime-genai==$GENAI" onnxruntime==1.31.1 onnx==1.23.2 onnx-ir==1.1.0
      transformers==5.19.0)

skip() { echo "SKIP ortgenai: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}
step() { echo "ortgenai-env: $* ($((SECONDS - START)) s)" >&2; }

START=$SECONDS
if [[ -f $STAMP ]]; then
    step "reusing $VENV (built: $STAMP)"
else
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "this script pins the x86_64 Linux wheels of onnxruntime-genai $GENAI, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    step "building $VENV (onnxruntime-genai $GENAI; log: $LOG)"
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    pip_quiet install "torch==2.13.0" || { rm -rf "$VENV"; skip "pip could not install torch"; }
    step "torch 2.13.0 installed"
    pip_quiet install "torch==2.13.0" "${PINS[@]}" \
        || { rm -rf "$VENV"; skip "pip could not install ${PINS[*]} (see above)"; }
    step "installed: ${PINS[*]}"
    pip_quiet install "torch==2.13.0" "transformers==5.19.0" -e .
    step "this package installed (editable)"
    # Whatever pulled them in, these CUDA-linked builds break against torch 2.13.0.
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c "import onnxruntime_genai, onnx, onnx_ir, torch, transformers
import engines.models, onnxruntime_genai.models.builder
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert onnxruntime_genai.__version__ == '$GENAI', onnxruntime_genai.__version__
assert transformers.__version__ == '5.19.0', transformers.__version__" >&2
    touch "$STAMP"
    step "done"
fi
echo "$VENV/bin/python"
