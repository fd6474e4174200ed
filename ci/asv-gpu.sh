#!/usr/bin/env bash
# The GPU runner's asv job: record every new commit, gate the newest against its parent, and
# publish the HTML history. The preset follows the hardware: qwen2.5-1.5b in fp16 on CUDA.
#
#   ci/asv-gpu.sh [BASE [HEAD]]     (defaults: HEAD~1 and HEAD)
#
# asv builds each commit in its own virtualenv under .asv/env (pip installs the wheel with the
# bench extra; torch comes from PyPI's CUDA build). Results accumulate in .asv/results: keep
# that directory between runs (a cache or an artifact) so `asv run NEW` only does new commits.
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-asv}
BASE=${1:-HEAD~1}
HEAD_REF=${2:-HEAD}
export BENCH_DEVICE=${BENCH_DEVICE:-cuda}

"$ASV" machine --yes
# Every commit not yet measured on this machine, on the main branch.
"$ASV" run NEW --show-stderr --skip-existing-successful
# The gate: fails (non-zero exit) if any benchmark is more than 10% worse at HEAD than at
# BASE with statistical significance. Throughput and capacity are tracked as s/token and
# s/request, so every benchmark here is lower-is-better and a slowdown is a rise.
status=0
"$ASV" continuous --factor 1.1 --show-stderr --split "$BASE" "$HEAD_REF" || status=$?
"$ASV" publish
echo "asv html: .asv/html (serve with: $ASV preview)"
exit "$status"
