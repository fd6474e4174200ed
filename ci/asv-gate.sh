#!/usr/bin/env bash
# The per-commit asv gate on CPU: HEAD against BASE (its parent by default) with asv's own
# statistics, failing on a regression past a stated factor.
#
#   ci/asv-gate.sh [BASE [HEAD]]      (defaults: HEAD~1 and HEAD)
#
# `asv continuous` builds both commits (asv.conf.json: the project's wheel, the CPU build of
# torch), runs every benchmark's rounds interleaved between them (round 1 of HEAD, of BASE,
# then round 2 the other way round), so a drift of the host lands on both, and compares. It
# exits non-zero when a benchmark is worse at HEAD by more than FACTOR *and* the difference is
# significant: asv tests the two commits' samples (Mann-Whitney U; with few samples, whether
# their 99% confidence intervals overlap), so one noisy figure alone does not fail it. Every
# benchmark here is lower-is-better (throughput and capacity are tracked as s/token and
# s/request): a slowdown is a rise. docs/benchmarks.md ("The asv gate") has a planted 10%
# slowdown caught and a null change passed, with the figures.
#
# ASV_GATE_FACTOR (default 1.05) is the factor; ASV_GATE_BENCH a regex of benchmarks (asv's
# --bench; default all); ASV the asv binary. BENCH_* (benchmarks/common.py) size the serving
# comparison as for any asv run. Minutes: two rounds of the serving comparison per commit.
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-.venv/bin/asv}
BASE=${1:-HEAD~1}
HEAD_REF=${2:-HEAD}
FACTOR=${ASV_GATE_FACTOR:-1.05}
# asv resolves names in its own clone of the repository: hand it hashes.
base=$(git rev-parse --verify "$BASE^{commit}")
head=$(git rev-parse --verify "$HEAD_REF^{commit}")
bench=()
[ -z "${ASV_GATE_BENCH:-}" ] || bench=(--bench "$ASV_GATE_BENCH")
"$ASV" machine --yes >/dev/null
echo "asv gate: $head against $base, factor $FACTOR${ASV_GATE_BENCH:+, benchmarks $ASV_GATE_BENCH}"
status=0
"$ASV" continuous --factor "$FACTOR" --interleave-rounds --show-stderr --split \
    "${bench[@]}" "$base" "$head" || status=$?
if [ "$status" -ne 0 ]; then
    echo "asv gate: FAILED (exit $status): a benchmark is significantly worse than ${FACTOR}x, or one failed to run"
else
    echo "asv gate: passed (no significant regression past ${FACTOR}x)"
fi
exit "$status"
