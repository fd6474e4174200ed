#!/usr/bin/env bash
# Run CI's jobs on LANES parallel lanes (default 2, this runner's cores), longest first as
# given, each job one process with one compute thread: the suite steps a small model one call
# at a time, so a second intra-op thread mostly waits (engines/testing/threads.py measured
# 221 s with torch's 2 threads against 33 s with 1 on 2 loaded cores), while a second job uses
# the second core in full.
#
# usage: bash ci/lanes.sh 'NAME=COMMAND' ...
# Each job's output goes to its own log, printed whole when it ends (lanes never interleave
# lines), followed by its wall time; the script fails, after every job has ended, if any job
# failed, and names them. A job that has not started when another fails still runs: one
# failure does not hide another.
set -uo pipefail
cd "$(dirname "$0")/.."
LANES=${LANES:-2}
# One thread per job, for every library's own pool: torch (the suite's --torch-threads is
# given by the callers as well), OpenMP (vLLM's CPU kernels, onnxruntime), our adapters'
# convention for OpenVINO GenAI and CTranslate2 (engines/threads.py), rayon (mistral.rs).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 BATCHING_ENGINES_THREADS=1 RAYON_NUM_THREADS=1
logs=$(mktemp -d)
declare -A name_of start_of
# Each job is a session of its own (setsid), so that a stopped CI run (a timeout, ^C) stops
# every process a job started, not only its shell.
stop_jobs() {
    local pid
    for pid in "${!name_of[@]}"; do kill -- "-$pid" 2>/dev/null; done
    rm -rf "$logs"
}
trap stop_jobs EXIT
trap 'exit 130' INT TERM
failed=()
running=0

finish() {  # wait for any job; print its log and time
    local pid rc
    wait -n -p pid
    rc=$?
    local name=${name_of[$pid]}
    echo "== [lane job] $name (exit $rc, $((SECONDS - start_of[$pid])) s; $SECONDS s since the lanes started)"
    cat "$logs/$name.log"
    ((rc == 0)) || failed+=("$name (exit $rc)")
    unset "name_of[$pid]"
    running=$((running - 1))
}

for job in "$@"; do
    name=${job%%=*}
    command=${job#*=}
    ((running < LANES)) || finish
    setsid bash -c "$command" >"$logs/$name.log" 2>&1 &
    name_of[$!]=$name
    start_of[$!]=$SECONDS
    running=$((running + 1))
    echo "== [lane job] $name started ($SECONDS s)"
done
while ((running > 0)); do finish; done

if ((${#failed[@]})); then
    printf 'FAILED lane job: %s\n' "${failed[@]}"
    exit 1
fi
echo "== every lane job passed ($SECONDS s)"
