#!/usr/bin/env bash
# Does `bench --quick` name the same winners, by ratios within 20%, on a quiet machine and
# beside a CPU hog? Runs it N times in each condition, alternating (quiet, hog, quiet, hog, ...)
# so that a drift of the machine does not land on one condition, then prints every run's
# summary table and checks winners and ratios (scripts/bench_stability_check.py).
#
#   bash scripts/bench_stability.sh [-n RUNS_PER_CONDITION] [-k HOGS] [-c CPUS] [-o DIR] [-- BENCH ARGS]
#
# PYTHON: the interpreter (default .venv/bin/python when it exists, else python).
# Defaults: 2 runs per condition, 2 hogs (`while :; do :; done`, one per core of a 2-core
# machine), DIR bench-stability/. -c CPUS pins the bench and the hogs to those CPUs (taskset
# list, e.g. 1): a core of its own for the quiet runs where other work shares the machine. The hogs are killed when the hog runs end, and on any exit,
# Ctrl-C included. Exit status: the checker's (0: every row's winner and ratios held).
set -euo pipefail

runs=2 hogs=2 out=bench-stability pin=()
while getopts "n:k:c:o:" opt; do
    case $opt in
        n) runs=$OPTARG ;;
        k) hogs=$OPTARG ;;
        o) out=$OPTARG ;;
        c) pin=(taskset -c "$OPTARG") ;;
        *) echo "usage: $0 [-n RUNS] [-k HOGS] [-c CPUS] [-o DIR] [-- BENCH ARGS]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ ${1:-} == "--" ]] && shift
PY=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python)}
hog_pids=()

stop_hogs() {
    for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${hog_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    hog_pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT
trap 'stop_hogs; exit 143' TERM

start_hogs() {
    for _ in $(seq "$hogs"); do
        "${pin[@]}" sh -c 'while :; do :; done' &
        hog_pids+=("$!")
    done
}

mkdir -p "$out"
dirs=()
for i in $(seq "$runs"); do
    for condition in quiet hog; do
        dir="$out/$condition-$i"
        [[ $condition == hog ]] && start_hogs
        echo "== $dir: $(uptime)" | tee "$dir.log"
        start=$(date +%s)
        "${pin[@]}" "$PY" -m engines.bench --quick --no-progress --no-plots --out "$dir" "$@" \
            >>"$dir.log" 2>&1 || { echo "bench failed: see $dir.log" >&2; exit 1; }
        echo "== $dir: $(( $(date +%s) - start )) s; $(uptime)" | tee -a "$dir.log"
        stop_hogs
        dirs+=("$dir")
    done
done
"$PY" scripts/bench_stability_check.py "${dirs[@]}"
