#!/usr/bin/env bash
# asv as the GPU runner uses it, on the CPU: a per-commit environment built from the commit
# (asv.conf.json: only the project's wheel is built; the CPU build of torch), every benchmark
# run once (--quick, nothing saved). Exits non-zero if the build, the install or any benchmark
# fails (asv run exits 2 then). A few minutes on 2 cores, most of it building the environment
# the first time (.asv/env is reused after).
#
# --quick saves nothing, so the run checks that every benchmark runs, not what it measures:
# the serving comparison gets one replica of its searches and 16 requests a probe (3 replicas
# and 48 otherwise; benchmarks/common.py), unless BENCH_REPLICAS / BENCH_REQUESTS say. While it
# sets up, a progress line comes at least every 20 s (benchmarks/watch.py).
#
#   ci/asv-smoke.sh [RANGE]     (default HEAD^!: the checked-out commit alone)
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-.venv/bin/asv}
export BENCH_REPLICAS=${BENCH_REPLICAS:-1} BENCH_REQUESTS=${BENCH_REQUESTS:-16}
"$ASV" machine --yes >/dev/null
exec "$ASV" run --quick --show-stderr "${1:-HEAD^!}"
