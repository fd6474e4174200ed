"""transformers continuous-batching configurations, each a zero-argument factory for
`--engine` or `--engine-variant NAME=engines.adapters.hf_variants:FACTORY`.

All run the "tiny" preset (max_model_len 512) with 16-token blocks. The library chunks a
prompt by its per-batch token budget (`max_batch_tokens`), and under cache pressure it evicts
running requests and prefills them again later (no CPU swap space is configured); with
`allow_block_sharing` it hashes complete blocks and gives later prompts that start with the
same blocks those blocks (prefix sharing). Each engine counts what it exercised
(`exercised()`; engines.adapters._exercised).
"""

from __future__ import annotations

from engines.adapters.hf_continuous import HFContinuousEngine, hf_continuous

__all__ = ["hf_block_sharing", "hf_small_budget", "hf_small_cache", "hf_stress"]

_PAGE = 16
_FULL_LENGTH = 512 // _PAGE  # blocks one request at max_model_len needs


def hf_block_sharing() -> HFContinuousEngine:
    """Prefix sharing on (the library's default), blocks for a full batch at full length."""
    return hf_continuous(label="hf_block_sharing", allow_block_sharing=True)


def hf_small_budget() -> HFContinuousEngine:
    """A 32-token batch budget: decode rows and prefill chunks share 32 tokens a step, so
    most prompts are prefilled over several steps."""
    return hf_continuous(label="hf_small_budget", max_batch_tokens=32)


def hf_small_cache() -> HFContinuousEngine:
    """32 blocks (512 tokens): one request at full length fits, two long ones do not, so the
    library evicts a running request and prefills it again later."""
    return hf_continuous(label="hf_small_cache", num_blocks=_FULL_LENGTH)


def hf_stress() -> HFContinuousEngine:
    """All at once: prefix sharing, a 32-token budget, 32 blocks and 4 requests a batch."""
    return hf_continuous(label="hf_stress", allow_block_sharing=True, max_batch_tokens=32,
                         num_blocks=_FULL_LENGTH, max_batch_size=4)
