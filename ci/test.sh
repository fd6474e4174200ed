#!/usr/bin/env bash
# The checks CI runs after the README's test command; each must pass. Expects the venv from
# ci/setup.sh active. The jobs run on two lanes (ci/lanes.sh: one compute thread each, each
# job's log printed whole when it ends, with its wall time), the longest first; LANES=1 runs
# them one after another. Extra arguments go to every conformance-suite run (after the
# profile below).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=--hypothesis-profile=batching-ci
# One torch thread in each suite process: the lanes give each job one core (ci/lanes.sh).
THREADS=--torch-threads=1
extra=""
(($# == 0)) || extra=$(printf ' %q' "$@")
third_party() {  # a job running ci/test-third-party.sh's SECTIONS
    echo "$1=SECTIONS='$2' bash ci/test-third-party.sh $PROFILE $THREADS$extra"
}

jobs=(
    # vLLM in-process and its OpenAI server over HTTP (with the bench's smoke replay on it).
    "$(third_party vllm vllm)"
    # transformers' continuous batching (5.25 and, for the adapter tests, 5.16.0).
    "$(third_party transformers hf)"
    # Our paged engine and its variants, against the sequential reference.
    "paged=bash ci/test-paged.sh $PROFILE $THREADS$extra"
    # Our continuous engine (and its one-slot variant), against the sequential reference.
    "continuous=python -m pytest --pyargs engines.testing.conformance -p no:cacheprovider -q \
--engine engines.slot.continuous:ContinuousBatchEngine \
--reference-engine engines.sequential:SequentialEngine \
--engine-variant one_slot=tests.helpers:one_slot_continuous $PROFILE $THREADS$extra"
    # At deployment precision, under --parity=auto: our paged engine in bf16, OpenVINO GenAI
    # at its CPU defaults (bf16, u8 KV cache).
    "paged-bf16=bash ci/test-precision.sh paged$extra"
    # Our continuous engine's batch-invariant bf16 mode, held to exact parity.
    "continuous-bf16-invariant=bash ci/test-precision.sh invariant$extra"
    "$(third_party openvino openvino)"
    "openvino-cpu-defaults=bash ci/test-precision.sh openvino$extra"
    "$(third_party ct2 ct2)"
    "$(third_party mistralrs mistralrs)"
    "$(third_party ortgenai ortgenai)"
    # The zoo slice's main-venv factories (the libraries' own run in their jobs above).
    "$(third_party zoo zoo)"
    # asv: HEAD built into its own environment (as on the GPU runner), every benchmark once.
    "asv=bash ci/asv-smoke.sh"
    # The suite's Hypothesis profile each way in, editable install and built wheel.
    "profiles=bash ci/test-wheel-profiles.sh"
    # The findings ledger: one report's standalone repro per library whose venv CI builds;
    # each must still read as docs/findings.md's table says (python -m engines.findings).
    "findings=bash ci/findings-smoke.sh vllm openvino ortgenai ct2 mistralrs"
    # llama-server is not in CI's budget (ci/test-third-party.sh says so in its log).
    "$(third_party llama llama)"
)
bash ci/lanes.sh "${jobs[@]}"
