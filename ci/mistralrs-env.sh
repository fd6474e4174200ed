#!/usr/bin/env bash
# Build .venv-mistralrs, the virtual environment mistral.rs 0.9.5 runs in: ci/adapter-env.sh,
# which builds every library's venv the same way (its pins are in that script's table).
exec bash "$(dirname "$0")/adapter-env.sh" mistralrs "$@"
