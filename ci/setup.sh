#!/usr/bin/env bash
# Set up .venv on a fresh machine: the CPU build of torch first (pinned, so nothing pulls a
# multi-GB CUDA build), then this package with its dev and bench extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev,bench]"
.venv/bin/python -c "import torch, transformers, engines; print('ready: torch', torch.__version__, 'transformers', transformers.__version__)"
