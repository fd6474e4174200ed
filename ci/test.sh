#!/usr/bin/env bash
# The checks CI runs after the README's test command; each must pass. Expects the venv from
# ci/setup.sh active.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage ends with its wall time (the log's before/after; .ci/run adds the total).
stage_start=$SECONDS
took() { echo "   ($1: $((SECONDS - stage_start)) s)"; stage_start=$SECONDS; }

echo "== the conformance suite on our continuous engine, against the sequential reference"
python -m pytest --pyargs engines.testing.conformance -p no:cacheprovider -q \
    --engine engines.slot.continuous:ContinuousBatchEngine \
    --reference-engine engines.sequential:SequentialEngine \
    --engine-variant one_slot=tests.helpers:one_slot_continuous \
    --hypothesis-profile=batching-ci
took "the suite on the continuous engine"

echo "== the suite's Hypothesis profile each way in, editable install and built wheel"
bash ci/test-wheel-profiles.sh
took "ci/test-wheel-profiles.sh"

echo "== the conformance suite on the paged engine, its variants, against the sequential reference"
bash ci/test-paged.sh
took "ci/test-paged.sh"

echo "== asv: HEAD built into its own environment (as on the GPU runner), every benchmark once"
bash ci/asv-smoke.sh
took "ci/asv-smoke.sh"

echo "== the conformance suite on third-party engines and servers, and the zoo slice"
bash ci/test-third-party.sh --hypothesis-profile=batching-ci
took "ci/test-third-party.sh"

echo "== the findings ledger: one report's standalone repro per library whose venv CI builds"
# Each must still read as docs/findings.md's table says (a bug that reproduces passes; one
# that newly reads fixed, or a repro that cannot run, fails): python -m engines.findings.
bash ci/findings-smoke.sh vllm openvino ortgenai ct2 mistralrs
took "ci/findings-smoke.sh"
