#!/usr/bin/env bash
# Build .venv-ortgenai, the virtual environment onnxruntime-genai 0.18.0 runs in: ci/adapter-env.sh,
# which builds every library's venv the same way (its pins are in that script's table).
exec bash "$(dirname "$0")/adapter-env.sh" ortgenai "$@"
