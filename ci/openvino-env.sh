#!/usr/bin/env bash
# Build the virtual environment OpenVINO GenAI runs in (.venv-openvino) and install this
# package into it, editable. Pinned: torch 2.13.0 (the CPU build, installed first so that
# nothing pulls a CUDA one), openvino-genai 2026.4.1 (with openvino and openvino-tokenizers
# 2026.4.1), and for the offline conversion optimum-intel 2.2.0 with what it needs.
# optimum-intel 2.2.0 requires transformers < 5.6 and we require >= 5.16, so the converter and
# its transformers (5.5.4, with the huggingface_hub and tokenizers it accepts) go into
# $VENV/optimum-export with pip --target; the adapter puts that folder first on PYTHONPATH only
# for its `optimum-cli export openvino` subprocess. torchvision, torchaudio and torchcodec are
# never installed (optimum-intel declares torchvision; the export of a text model needs none).
# The last line of stdout is the venv's python. Where the environment cannot be built (not
# x86_64 Linux, no python3.11, nothing installable) it prints a visible SKIP reason, prints no
# python, and exits 0; any other failure exits non-zero. A built venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${OPENVINO_VENV:-.venv-openvino}
PY=${OPENVINO_PYTHON:-python3.11}
GENAI=2026.4.1
STAMP="$VENV/.built-openvino-genai-$GENAI"
LOG="$VENV.log"
# The converter layer: these exact versions, without their dependencies (pip would otherwise
# put torch and transformers 5.24's rivals beside them); what they need beyond our own
# dependencies is installed into the venv itself (EXPORT_DEPS).
EXPORT=(optimum-intel==2.2.0 optimum==2.3.0 transformers==5.5.4 huggingface_hub==1.21.0
        tokenizers==0.22.2 typer==0.25.1 nncf==3.4.0)
EXPORT_DEPS=(networkx ninja pydot scikit-learn scipy tabulate openvino-telemetry httpx==0.28.1
             requests)

skip() { echo "SKIP openvino: $*" >&2; exit 0; }
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}
step() { echo "openvino-env: $* ($((SECONDS - START)) s)" >&2; }

START=$SECONDS
if [[ -f $STAMP ]]; then
    step "reusing $VENV (built: $STAMP)"
else
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "this script pins the x86_64 Linux wheels of openvino $GENAI, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    step "building $VENV (openvino-genai $GENAI, ~1.5 GB; log: $LOG)"
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    pip_quiet install "torch==2.13.0" || { rm -rf "$VENV"; skip "pip could not install torch"; }
    step "torch 2.13.0 installed"
    pip_quiet install "torch==2.13.0" "openvino-genai==$GENAI" "openvino==$GENAI" \
        "${EXPORT_DEPS[@]}" \
        || { rm -rf "$VENV"; skip "pip could not install openvino-genai==$GENAI (see above)"; }
    step "openvino-genai $GENAI installed"
    pip_quiet install "torch==2.13.0" -e .
    step "this package installed (editable)"
    pip_quiet install --no-deps --target "$VENV/optimum-export" "${EXPORT[@]}"
    step "converter layer installed into $VENV/optimum-export: ${EXPORT[*]}"
    # Whatever pulled them in, these CUDA-linked builds break against torch 2.13.0.
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c "import openvino_genai, torch, transformers, engines.models
assert torch.__version__.startswith('2.13.0'), torch.__version__" >&2
    PYTHONPATH="$VENV/optimum-export" "$VENV/bin/python" -c \
        "import transformers, optimum.intel; assert transformers.__version__ == '5.5.4'" >&2
    touch "$STAMP"
    step "done"
fi
echo "$VENV/bin/python"
