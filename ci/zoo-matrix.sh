#!/usr/bin/env bash
# The engine x preset matrix of the model zoo (docs/findings.md, "The model zoo matrix"): the
# conformance suite on every engine over every zoo preset, against the sequential reference
# on the same preset (engines.zoo:sequential_<preset>), and a markdown table of the verdicts:
# pass, fail (with the checks that failed), or unsupported (the factory refused the preset
# with an error naming what the engine lacks; nothing ran).
#   bash ci/zoo-matrix.sh [pytest args...]    e.g. --hypothesis-profile=batching-ci
# ENGINES="paged hf_continuous" restricts the engines, PRESETS="tiny_moe" the presets (the
# preset names with underscores); VLLM_PYTHON, OPENVINO_PYTHON, ORTGENAI_PYTHON, CT2_PYTHON name
# the venvs of those adapters (default .venv-<name>, built by ci/<name>-env.sh;
# an engine whose venv is absent is reported "not run" in the table, never silently left out).
# The table goes to stdout's end and to $OUT (default zoo-matrix.md); each run's log to
# zoo-matrix-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."

PROFILE_ARGS=("$@")
[[ ${#PROFILE_ARGS[@]} -gt 0 ]] || PROFILE_ARGS=(--hypothesis-profile=batching-dev)
read -r -a ENGINE_LIST <<<"${ENGINES:-sequential static continuous paged hf_continuous vllm openvino ortgenai ct2}"
read -r -a PRESET_LIST <<<"${PRESETS:-tiny_llama_rope tiny_mistral_swa tiny_gemma_mixed tiny_moe tiny_phi3_longrope}"
OUT=${OUT:-zoo-matrix.md}
LOGS=zoo-matrix-logs
mkdir -p "$LOGS"

python_for() {
    case $1 in
        vllm) echo "${VLLM_PYTHON:-.venv-vllm/bin/python}" ;;
        openvino) echo "${OPENVINO_PYTHON:-.venv-openvino/bin/python}" ;;
        ortgenai) echo "${ORTGENAI_PYTHON:-.venv-ortgenai/bin/python}" ;;
        ct2) echo "${CT2_PYTHON:-.venv-ct2/bin/python}" ;;
        *) echo "${PYTHON:-.venv/bin/python}" ;;
    esac
}

rows=()
for engine in "${ENGINE_LIST[@]}"; do
    py=$(python_for "$engine")
    for preset in "${PRESET_LIST[@]}"; do
        spec="engines.zoo:${engine}_${preset}"
        log="$LOGS/${engine}_${preset}.log"
        if [[ ! -x $py ]]; then
            rows+=("| $engine | $preset | not run: no $py | | |")
            continue
        fi
        # Construction first: a refusal is the engine's declared "unsupported", and a factory
        # that cannot be built (a conversion the library's tools refuse) is "not run"; neither
        # is a failure of the suite.
        refusal=$("$py" -c "import engines.zoo as z
try:
    getattr(z, '${engine}_${preset}')()
except ValueError as e:
    print('ZOO-VERDICT unsupported (declared)|' + str(e).splitlines()[0])
except Exception as e:
    print('ZOO-VERDICT not run: the factory raised ' + type(e).__name__ + '|'
          + str(e).splitlines()[0])" 2>/dev/null | grep '^ZOO-VERDICT ' | tail -1)
        refusal=${refusal#ZOO-VERDICT }  # libraries log to stdout too: only our line counts
        if [[ -n $refusal ]]; then
            rows+=("| $engine | $preset | ${refusal%%|*} | | ${refusal#*|} |")
            continue
        fi
        start=$SECONDS
        "$py" -m pytest -p no:cacheprovider -q -rf --pyargs engines.testing.conformance \
            --engine "$spec" --reference-engine "engines.zoo:sequential_${preset}" \
            "${PROFILE_ARGS[@]}" >"$log" 2>&1
        rc=$?
        took=$((SECONDS - start))
        summary=$(grep -m1 -E "check\(s\) (passed|failed)|check\(s\)" "$log" | cut -c1-160)
        if [[ $rc -eq 0 ]]; then
            rows+=("| $engine | $preset | pass | $took | ${summary//|/\\|} |")
        else
            # FAILED ...::test_conformance[<factory>-<check>]: the check's name.
            failed=$(grep -E "^FAILED" "$log" | sed -E 's/.*-([a-z_]+)\]$/\1/' | sort -u \
                     | paste -sd, -)
            rows+=("| $engine | $preset | fail (exit $rc): ${failed:-see $log} | $took | ${summary//|/\\|} |")
        fi
        echo "${rows[-1]}"
    done
done
{
    echo "| engine | preset | verdict | s | what ran |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
} | tee "$OUT"
