#!/usr/bin/env bash
# asv as the GPU runner uses it, on the CPU: a per-commit environment built from the commit
# (asv.conf.json: only the project's wheel is built; the CPU build of torch), every benchmark
# run once (--quick, nothing saved). Exits non-zero if the build, the install or any benchmark
# fails (asv run exits 2 then). A few minutes on 2 cores, most of it building the environment
# the first time (.asv/env is reused after).
#
#   ci/asv-smoke.sh [RANGE]     (default HEAD^!: the checked-out commit alone)
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-.venv/bin/asv}
"$ASV" machine --yes >/dev/null
exec "$ASV" run --quick --show-stderr "${1:-HEAD^!}"
