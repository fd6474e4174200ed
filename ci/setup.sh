#!/usr/bin/env bash
# Set up .venv on a fresh machine: the CPU build of torch first (pinned, so nothing pulls a
# multi-GB CUDA build), then this package with its dev and bench extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
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
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev,bench]"
.venv/bin/python -c "import torch, transformers, engines; print('ready: torch', torch.__version__, 'transformers', transformers.__version__)"
