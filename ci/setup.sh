#!/usr/bin/env bash
# Set up .venv on a fresh machine: the CPU build of torch first (pinned, so nothing pulls a
# multi-GB CUDA build), then this package with its dev and bench extras.
# .venv is a symlink to a venv built once per pin set in ~/.cache/batching-engines/venvs
# (main-KEY, KEY: the torch version, the interpreter's and pyproject.toml's dependencies; a
# later clone on this machine reuses it, its editable install re-pointed at that clone):
# ci/venv-cache.sh says where, the key and how to clear it. A .venv that is a real directory
# (made before the cache, or with BATCHING_VENV_CACHE set empty) is updated in place, as before.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-cache.sh
PY=${PYTHON:-python3}
TORCH="torch==${TORCH_VERSION:-2.13.0}"
START=$SECONDS
# The paged engine's attention kernel (engines/core/native.py) is built with the host's C++
# compiler; without one the engines run ATen's SDPA instead (and say so), so this only tries.
if ! command -v g++ >/dev/null 2>&1 && ! command -v c++ >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && apt-get install -y -qq g++ >/dev/null) \
            || echo "setup: could not install g++; the native attention kernel will not be built"
    else
        echo "setup: no C++ compiler; the native attention kernel will not be built"
    fi
fi
install_into() {  # venv dir
    "$1/bin/python" -m pip install -q --upgrade pip
    "$1/bin/python" -m pip install -q "$TORCH"
    "$1/bin/python" -m pip install -q -e ".[dev,bench]"
}
build() {  # dir: a new venv there
    "$PY" -m venv "$1"
    install_into "$1"
    "$1/bin/python" -c "import torch, transformers, engines, asv, ruff, mypy"
}
if [[ -e .venv && ! -L .venv ]] || [[ -z ${BATCHING_VENV_CACHE-cache} ]]; then
    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    install_into .venv
else
    venv_cached .venv "$(venv_cache_dir main "$PY" "$TORCH dev,bench")" build
    echo "setup: .venv -> $(readlink .venv)"
fi
echo "setup: .venv ready ($((SECONDS - START)) s)"
.venv/bin/python -c "import torch, transformers, engines; print('ready: torch', torch.__version__, 'transformers', transformers.__version__)"
