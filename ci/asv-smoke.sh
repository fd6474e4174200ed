#!/usr/bin/env bash
# CPU smoke run of the asv suites: every benchmark once, in the current environment (no
# per-commit builds, nothing saved), exiting non-zero if any benchmark fails (asv run exits
# 2 then). A couple of minutes on 2 cores: the tiny preset with small draws.
set -euo pipefail
cd "$(dirname "$0")/.."
ASV=${ASV:-.venv/bin/asv}
"$ASV" machine --yes >/dev/null
exec "$ASV" run --quick --python=same --dry-run --show-stderr "$@"
