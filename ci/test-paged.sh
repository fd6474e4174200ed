#!/usr/bin/env bash
# The conformance suite on the paged engine: parity against the sequential reference
# (transformers' own forward and DynamicCache), and each config variant of
# engines.paged.variants giving every request the same tokens. Expects the venv from
# ci/setup.sh active; extra arguments go to pytest (default profile: batching-ci).
set -euo pipefail
cd "$(dirname "$0")/.."

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--hypothesis-profile=batching-ci)
variants=()
# Not equal_memory: at its default 8 it is the engine's own default configuration.
for v in no_prefix_caching budget_8 small_pool one_at_a_time speculative_ngram speculative_self; do
    variants+=(--engine-variant "$v=engines.paged.variants:$v")
done
python -m pytest --pyargs engines.testing.conformance -p no:cacheprovider -q \
    --engine engines.paged:PagedEngine \
    --reference-engine engines.sequential:SequentialEngine \
    "${variants[@]}" "${args[@]}"
