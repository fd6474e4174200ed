#!/usr/bin/env bash
# The conformance suite on the two third-party engines, plus the adapters' own tests:
# transformers' continuous batching in the main venv, vLLM's CPU engine in its own venv
# (built by ci/vllm-env.sh; skipped, visibly, only where that venv cannot be built).
# Extra arguments go to every pytest run (e.g. --hypothesis-profile=batching-ci).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
suite() {  # python, factory, extra pytest args...
    local py=$1 factory=$2
    shift 2
    echo "== conformance suite: --engine $factory ($py)"
    "$py" -m pytest --pyargs engines.testing.conformance --engine "$factory" \
        -p no:cacheprovider -q "$@"
}

suite "$PY" engines.adapters.hf_continuous:make_engine "$@"

VPY=$(bash ci/vllm-env.sh | tail -n 1)
if [[ -z $VPY ]]; then
    echo "SKIP: vLLM conformance suite and adapter tests (its venv could not be built: see above)"
    exit 0
fi
echo "== adapter tests under vLLM's venv ($VPY)"
"$VPY" -m pytest tests/test_adapters.py tests/test_adapters_book.py -p no:cacheprovider -q "$@"
suite "$VPY" engines.adapters.vllm:make_engine "$@"
