"""vLLM CPU configurations users turn on, each a zero-argument factory for `--engine` or
`--engine-variant NAME=engines.adapters.vllm_variants:FACTORY`.

All run the "tiny" preset (max_model_len 512) with 32-token KV blocks, the smallest the CPU
attention backend accepts, so that short shared prefixes fill whole blocks and a small pool
runs out quickly. Each engine counts what it exercised (`exercised()`); a run's totals per
factory are written where BATCHING_ENGINES_EXERCISED points (engines.adapters._exercised).
"""

from __future__ import annotations

from engines.adapters.vllm import VLLMEngine, vllm_cpu

__all__ = [
    "vllm_chunked_prefill",
    "vllm_one_seq",
    "vllm_preemption",
    "vllm_prefix_caching",
    "vllm_stress",
]

_BLOCK = 32
_FULL_LENGTH = 512 // _BLOCK  # blocks one request at max_model_len needs


def vllm_prefix_caching() -> VLLMEngine:
    """Automatic prefix caching on (vLLM's own default), 8 sequences, blocks for all of them:
    a prompt that repeats a full 32-token block of an earlier or running one reuses its KV."""
    return vllm_cpu(label="vllm_prefix_caching", enable_prefix_caching=True,
                    block_size=_BLOCK, num_blocks=8 * _FULL_LENGTH)


def vllm_chunked_prefill() -> VLLMEngine:
    """Chunked prefill under a 32-token step budget: any prompt longer than what is left of
    the budget after the running requests' decode tokens is prefilled over several steps."""
    return vllm_cpu(label="vllm_chunked_prefill", max_num_batched_tokens=32,
                    block_size=_BLOCK, num_blocks=8 * _FULL_LENGTH)


def vllm_preemption() -> VLLMEngine:
    """A KV pool of 16 blocks (512 tokens): one request at full length fits, two long ones do
    not, so vLLM preempts the newest running request and later recomputes it."""
    return vllm_cpu(label="vllm_preemption", block_size=_BLOCK, num_blocks=_FULL_LENGTH)


def vllm_one_seq() -> VLLMEngine:
    """max_num_seqs 1: requests run strictly one at a time, the rest queue."""
    return vllm_cpu(label="vllm_one_seq", max_batch_size=1, block_size=_BLOCK,
                    num_blocks=_FULL_LENGTH)


def vllm_stress() -> VLLMEngine:
    """All at once: prefix caching, a 32-token budget (chunked prefill), 16 blocks
    (preemption) and 4 sequences."""
    return vllm_cpu(label="vllm_stress", max_batch_size=4, enable_prefix_caching=True,
                    max_num_batched_tokens=32, block_size=_BLOCK, num_blocks=_FULL_LENGTH)
