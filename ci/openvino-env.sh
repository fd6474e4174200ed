#!/usr/bin/env bash
# Build .venv-openvino, the virtual environment OpenVINO GenAI 2026.4.1 runs in: ci/adapter-env.sh,
# which builds every library's venv the same way (its pins are in that script's table).
exec bash "$(dirname "$0")/adapter-env.sh" openvino "$@"
