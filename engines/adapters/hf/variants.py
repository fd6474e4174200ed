"""transformers continuous-batching configurations, each a zero-argument factory for
`--engine` or `--engine-variant NAME=engines.adapters.hf.variants:FACTORY`.

All run the "tiny" preset. The library chunks a prompt by its per-batch token budget
(`max_batch_tokens`); under cache pressure it evicts running requests and prefills them again
later (no CPU swap space is configured here); with `allow_block_sharing` it hashes complete
blocks and hands them to later prompts that start with the same tokens (prefix sharing).
They are sized for the conformance suite's workloads (a few short prompts and at most one long
one, small budgets): 4-token blocks (the library's minimum), so that repeated short prompts
share blocks, and small pools that declare a 32-token context and hold exactly one request at
full length (measured under the ci profile: a 64-token pool preempted once in the whole run, a
32-token one six times). Each engine counts what it exercised (`exercised()`;
engines.adapters.common.exercised).
"""

from __future__ import annotations

from engines.adapters.hf.adapter import HFContinuousEngine, hf_continuous

__all__ = ["hf_bf16", "hf_block_sharing", "hf_small_budget", "hf_small_cache", "hf_stress"]

_PAGE = 4
_SMALL_CONTEXT = 32  # tokens: 8 blocks, one request at full length


def hf_bf16() -> HFContinuousEngine:
    """Deployment precision: the default configuration with the weights in bf16 (the paged
    cache follows them). Compare with the sequential reference in bf16, tie-aware."""
    return hf_continuous(label="hf_bf16", dtype="bfloat16")


def hf_block_sharing() -> HFContinuousEngine:
    """Prefix sharing on (the library's default), 4-token blocks, room for a full batch."""
    return hf_continuous(label="hf_block_sharing", allow_block_sharing=True, page_size=_PAGE)


def hf_small_budget() -> HFContinuousEngine:
    """A 16-token batch budget: decode rows and prefill chunks share 16 tokens a step, so
    long prompts and prompts arriving beside running requests are prefilled over several
    steps."""
    return hf_continuous(label="hf_small_budget", max_batch_tokens=16)


def hf_small_cache() -> HFContinuousEngine:
    """A 32-token context and 8 blocks of 4 tokens, no safety margin (new prefills start
    while any block is free): requests admitted into a nearly full pool run it dry as they
    decode, and the library evicts a running request and prefills it again later."""
    return hf_continuous(label="hf_small_cache", max_model_len=_SMALL_CONTEXT, page_size=_PAGE,
                         num_blocks=_SMALL_CONTEXT // _PAGE, safety_margin=0.0)


def hf_stress() -> HFContinuousEngine:
    """All at once: prefix sharing, a 16-token budget, the 8-block pool of hf_small_cache
    (no safety margin) and 4 requests a batch."""
    return hf_continuous(label="hf_stress", allow_block_sharing=True, max_batch_tokens=16,
                         max_model_len=_SMALL_CONTEXT, page_size=_PAGE,
                         num_blocks=_SMALL_CONTEXT // _PAGE, safety_margin=0.0,
                         max_batch_size=4)
