#!/usr/bin/env bash
# The Hypothesis profile the conformance suite runs under, each way in (--engine, the `engine`
# ini key, a fixture override), from neutral directories (ci/profiles_table.py): with this
# environment's editable install, then with a wheel built from the tree and installed into a
# venv of its own (no editable finder, no repo conftest.py, the plugin from the wheel's entry
# point). Prints a markdown table; fails where a run did not get the profile the rule gives.
# Expects the venv from ci/setup.sh active. WHEEL_VENV=DIR keeps the venv there (reused when
# it exists); WHEEL_DEPS=full installs the wheel with all its dependencies (torch pinned
# first, as ci/setup.sh does) instead of only pytest and Hypothesis, which is all the toy
# engine needs.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built from a copy of the tree (tracked and unignored files): an in-tree build would leave an
# egg-info that makes the tree look installed.
mkdir "$work/src"
git ls-files -co --exclude-standard -z | xargs -0 tar -cf - | tar -xf - -C "$work/src"
python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$work/src" 2>/dev/null
venv=${WHEEL_VENV:-$work/venv}
[ -x "$venv/bin/python" ] || python -m venv "$venv"
wheel=$(ls "$work"/dist/batching_engines-*.whl)
if [ "${WHEEL_DEPS:-}" = full ]; then
    "$venv/bin/python" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
    "$venv/bin/python" -m pip install -q --force-reinstall --no-cache-dir "$wheel"
else
    versions=$(python -c "import hypothesis, pytest
print(f'pytest=={pytest.__version__} hypothesis=={hypothesis.__version__}')")
    # shellcheck disable=SC2086  # two requirement words
    "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"
    # pip warns that the wheel's other dependencies are missing: that is the point.
    "$venv/bin/python" -m pip install -q $versions 2>&1 | grep -v "requires\|dependency resolver" || true
fi
python ci/profiles_table.py --install editable --header
env -u PYTHONPATH python ci/profiles_table.py --python "$venv/bin/python" --install wheel
