#!/usr/bin/env bash
# The third-party engines' venvs, built in the background while CI's other stages run (the
# builds are mostly downloads and unpacking; the main tests are compute), so that their
# minutes overlap instead of adding up.
#   bash ci/envs.sh start NAME...   start ci/NAME-env.sh for each NAME (vllm openvino ...)
#   bash ci/envs.sh wait NAME       block until NAME's background build ended (a no-op if
#                                   none was started), then print its log
#   bash ci/envs.sh python NAME     `wait` (its log to stderr), then print the python of the
#                                   venv ci/NAME-env.sh gives ("" where it cannot be built)
#   bash ci/envs.sh stop            kill the builds still running (CI's exit trap)
# After `wait`, calling ci/NAME-env.sh reuses the venv it built (or, where it failed, fails or
# SKIPs visibly again), so a caller never uses a half-built venv.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.ci-envs

case ${1:?usage: envs.sh start NAME... | wait NAME | python NAME | stop} in
    start)
        shift
        mkdir -p "$DIR"
        for name in "$@"; do
            # Its own process group, so that `stop` ends pip with it.
            setsid bash "ci/$name-env.sh" >"$DIR/$name.out" 2>"$DIR/$name.log" &
            echo $! >"$DIR/$name.pid"
            echo "envs: building $name's venv in the background (pid $!, log $DIR/$name.log)"
        done
        ;;
    wait)
        name=${2:?usage: envs.sh wait NAME}
        [[ -f $DIR/$name.pid ]] || exit 0
        pid=$(cat "$DIR/$name.pid")
        start=$SECONDS
        while kill -0 "$pid" 2>/dev/null; do sleep 2; done
        echo "envs: $name's background build ended (waited $((SECONDS - start)) s for it); its log:"
        sed 's/^/    /' "$DIR/$name.log"
        rm -f "$DIR/$name.pid"
        ;;
    python)
        name=${2:?usage: envs.sh python NAME}
        bash ci/envs.sh wait "$name" >&2
        bash "ci/$name-env.sh" | tail -n 1
        ;;
    stop)
        for file in "$DIR"/*.pid; do
            [[ -f $file ]] || continue
            kill -- "-$(cat "$file")" 2>/dev/null || true
            rm -f "$file"
        done
        ;;
    *)
        echo "envs.sh: unknown command ${1@Q}" >&2
        exit 2
        ;;
esac
