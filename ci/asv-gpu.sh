#!/usr/bin/env bash
# The GPU runner's asv job: record every new commit, gate the newest against its parent, and
# publish the HTML history. The preset follows the hardware: qwen2.5-1.5b in bf16 on CUDA.
#
#   ci/asv-gpu.sh [BASE [HEAD]]     (defaults: HEAD~1 and HEAD)
#
# asv builds each commit in its own virtualenv under .asv/env: only the project's wheel, then
# ci/asv_install.py installs PyPI's CUDA build of torch (checked to see CUDA) and the wheel with
# its bench extra. Results accumulate in .asv/results: keep that directory between runs (a cache
# or an artifact) so `asv run NEW` only does new commits. A commit's comparison takes a few
# minutes (small probes, 2 replicas; benchmarks/common.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-asv}
BASE=${1:-HEAD~1}
HEAD_REF=${2:-HEAD}
export BENCH_DEVICE=${BENCH_DEVICE:-cuda} ASV_TORCH_BUILD=${ASV_TORCH_BUILD:-cuda}

"$ASV" machine --yes
# Every commit not yet measured on this machine, on the main branch.
"$ASV" run NEW --show-stderr --skip-existing-successful
# The gate: fails (non-zero exit) if any benchmark is more than 10% worse at HEAD than at
# BASE and the difference is significant (every tracked figure carries samples). Rounds are
# interleaved between the two commits so drift in the machine lands on both. Throughput,
# capacity and goodput are tracked as s/token and s/request: every benchmark here is
# lower-is-better and a slowdown is a rise.
status=0
"$ASV" continuous --factor 1.1 --interleave-rounds --show-stderr --split "$BASE" "$HEAD_REF" \
    || status=$?
"$ASV" publish
echo "asv html: .asv/html (serve with: $ASV preview)"
exit "$status"
