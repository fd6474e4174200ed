#!/usr/bin/env bash
# Build .venv-ct2, the virtual environment CTranslate2 4.8.5 runs in: ci/adapter-env.sh,
# which builds every library's venv the same way (its pins are in that script's table).
exec bash "$(dirname "$0")/adapter-env.sh" ct2 "$@"
