#!/usr/bin/env bash
# Not run by CI (about half an hour on 2 CPUs): the conformance suite on every third-party
# engine and variant under the `thorough` Hypothesis profile (400 examples a property), with
# the same adapter tests and exercised counts as ci/test-third-party.sh. Extra arguments go to
# every suite run. The log of each run is kept in third-party-thorough.log.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/test-third-party.sh --hypothesis-profile=thorough "$@" 2>&1 | tee third-party-thorough.log
