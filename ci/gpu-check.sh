#!/usr/bin/env bash
# The GPU check: on one NVIDIA GPU, in under 8 minutes, every GPU path this repo has.
#   1. attention: the continuous engine serves a mixed batch with SDPA's math backend disabled
#      (every attention call hits a fused kernel), and the decode call is timed against the
#      math fallback it replaces (ci/gpu_attention_check.py)
#   2. the conformance suite in bf16 under its default --parity=auto (tie-aware at 0.125, from
#      the bfloat16 the engines declare), on the continuous engine against the sequential
#      reference engine in bf16; then on the paged engine: CI's command on a CPU
#      (--engine engines.paged.variants:bf16 --reference-engine
#      engines.sequential:sequential_bf16), the engines built on this device through
#      ci/gpu_engines.py; then the paged engine's decode steps as CUDA
#      graphs (PagedEngine(compiled="graphs")): the same tokens as its eager forward in fp32
#      and the decode step timed at each batch bucket (ci/gpu_paged_graphs.py)
#   3. the bench's quick comparison on qwen2.5-1.5b in bf16 (python -m engines.bench --quick)
#   4. asv's quick run of HEAD in a per-commit environment with PyPI's CUDA build of torch
#      (asv.conf.json, ci/asv_install.py); where that cannot be built (no network), the same
#      benchmarks in this interpreter's environment, said so
# Everything lands in one folder: $GPU_CHECK_OUT (default gpu-check-results/<time>), one log
# per part and summary.txt. Each part has a time cap (the caps add up to 8 minutes); a part
# that fails or runs out is reported and the rest still run; the exit status is 1 if any
# failed. On a machine without an NVIDIA GPU it says so and exits 0.
#
#   PYTHON=/path/to/python-with-cuda-torch bash ci/gpu-check.sh       (default .venv/bin/python)
#   GPU_CHECK_DEVICE=cpu bash ci/gpu-check.sh    rehearsal on a CPU: the same parts and plumbing,
#                                                tiny preset, figures meaningless
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ASV=${ASV:-$(dirname "$PY")/asv}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
CAP_SCALE=${GPU_CHECK_CAP_SCALE:-1}
OUT=${GPU_CHECK_OUT:-gpu-check-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
export GPU_CHECK_DEVICE=$DEVICE GPU_CHECK_DTYPE=${GPU_CHECK_DTYPE:-bfloat16}

if [[ $DEVICE == cuda ]]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 && [[ ! -e /proc/driver/nvidia/version ]]; then
        echo "gpu-check: no NVIDIA GPU on this machine (no nvidia-smi, no driver): nothing to" \
             "check here, exit 0" | tee "$OUT/summary.txt"
        exit 0
    fi
    if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        echo "gpu-check: a GPU is visible but $PY's torch cannot use it; set PYTHON to an" \
             "interpreter with a CUDA build of torch and this package installed" | tee "$OUT/summary.txt"
        exit 1
    fi
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
    BENCH_PRESET=qwen2.5-1.5b BENCH_DTYPE=$GPU_CHECK_DTYPE BENCH_FLAGS=()
else
    echo "gpu-check: REHEARSAL on $DEVICE: the parts and their plumbing, not GPU figures"
    # bf16 matmuls are slow on a CPU: the rehearsal's bench runs fp32 with small probes.
    BENCH_PRESET=tiny BENCH_DTYPE=float32 BENCH_FLAGS=(--requests 48 --iterations 2)
    CAP_SCALE=${GPU_CHECK_CAP_SCALE:-3}  # a CPU is slower than the GPU the caps are set for
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          torch.cuda.get_device_name() if torch.cuda.is_available() else "(no GPU)")' \
    | tee "$OUT/torch.txt"

failed=()
part() {  # name, time cap in seconds, command...
    local name=$1 cap=$(($2 * CAP_SCALE)) start rc
    shift 2
    echo "== $name (cap ${cap}s): $*"
    start=$(date +%s)
    timeout --kill-after=10 "$cap" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    tail -n 30 "$OUT/$name.log"
    [[ $rc -eq 124 || $rc -eq 137 ]] && echo "$name: ran out of its ${cap}s" >>"$OUT/$name.log"
    echo "$name: exit $rc after $(($(date +%s) - start)) s" | tee -a "$OUT/summary.txt"
    [[ $rc -eq 0 ]] || failed+=("$name")
}
skip() {  # name, reason
    echo "$1: SKIPPED: $2" | tee -a "$OUT/summary.txt"
}

# 1. fused attention
if [[ $DEVICE == cuda ]]; then
    part attention 40 "$PY" ci/gpu_attention_check.py
else
    skip attention "the fused-kernel check needs CUDA"
fi

# 2. the conformance suite in bf16, against the sequential reference in bf16: no parity flags,
# so --parity=auto chooses from the dtype the engines declare, as in CI's run on a CPU
suite_args=(--hypothesis-profile=batching-ci -p no:cacheprovider -q
            --reference-engine ci.gpu_engines:sequential)
reference="against engines.sequential in $GPU_CHECK_DTYPE"
profile=batching-ci
echo "suite: profile $profile, parity auto (from the declared $GPU_CHECK_DTYPE), $reference"
part suite-continuous 90 "$PY" -m pytest --pyargs engines.testing.conformance \
    --engine ci.gpu_engines:continuous "${suite_args[@]}" --junitxml="$OUT/suite-continuous.xml"
part suite-paged 60 "$PY" -m pytest --pyargs engines.testing.conformance \
    --engine ci.gpu_engines:paged "${suite_args[@]}" --junitxml="$OUT/suite-paged.xml"
part paged-graphs 40 "$PY" ci/gpu_paged_graphs.py

# 3. the bench's quick comparison
part bench 100 "$PY" -m engines.bench --quick --device "$DEVICE" --preset "$BENCH_PRESET" \
    --dtype "$BENCH_DTYPE" "${BENCH_FLAGS[@]}" --no-progress --out "$OUT/bench"

# 4. asv's quick run of HEAD: small probes and one replica, to fit the cap
export BENCH_DEVICE=$DEVICE BENCH_PRESET BENCH_REQUESTS=${BENCH_REQUESTS:-24} \
    BENCH_REPLICAS=${BENCH_REPLICAS:-1} ASV_TORCH_BUILD=${ASV_TORCH_BUILD:-$DEVICE}
"$ASV" machine --yes >/dev/null 2>&1
part asv 100 "$ASV" run --quick --show-stderr HEAD^!
# asv shows an install command's output only when it fails: ci/asv_install.py in the log means
# the per-commit environment could not be built.
if [[ " ${failed[*]} " == *" asv "* ]] && grep -q "asv_install" "$OUT/asv.log"; then
    echo "asv: the per-commit environment could not be built here (see asv.log); the same" \
         "benchmarks in $PY's environment instead" | tee -a "$OUT/summary.txt"
    venv_python="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # not the symlink's target
    part asv-existing 50 "$ASV" run --quick --show-stderr -E "existing:$venv_python"
fi

echo "gpu-check: results in $OUT/"
cat "$OUT/summary.txt"
if ((${#failed[@]})); then
    echo "gpu-check: FAILED: ${failed[*]}"
    exit 1
fi
echo "gpu-check: all parts passed"
