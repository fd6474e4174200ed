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
# asv's environments (.asv/env: a virtualenv with torch and the bench extra's dependencies,
# minutes to build) live in the venv cache (ci/venv-cache.sh) as asv-env, so that a fresh
# clone reuses them: asv itself rebuilds one whose python or requirements changed (its
# asv-env-info.json) and installs the commit's own wheel every run. A lock keeps two runs out
# of it at once. A clone's own .asv/env (a directory) is kept as it is.
. ci/venv-cache.sh
cache=$(venv_cache_root)
if [[ -n $cache && ! -e .asv/env && ! -L .asv/env ]]; then
    mkdir -p "$cache/asv-env" .asv
    ln -s "$cache/asv-env" .asv/env
fi
if [[ -L .asv/env ]]; then
    exec {lock}>"$(readlink .asv/env).lock"
    flock "$lock"  # held through asv run (exec keeps it open)
fi
export BENCH_REPLICAS=${BENCH_REPLICAS:-1} BENCH_REQUESTS=${BENCH_REQUESTS:-16}
"$ASV" machine --yes >/dev/null
exec "$ASV" run --quick --show-stderr "${1:-HEAD^!}"
