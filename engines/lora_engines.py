"""Zero-argument factories of our engines serving the tiny preset's first ZOO_ADAPTERS seeded
LoRA adapters (engines.loras.zoo_loras), for the suite's tenant draws and isolation check:

    pytest --pyargs engines.testing.conformance \\
        --engine engines.lora_engines:paged_with_loras \\
        --reference-engine engines.lora_engines:sequential_with_loras \\
        --engine-variant no_prefix_caching=engines.lora_engines:paged_no_prefix_caching \\
        --engine-variant small_pool=engines.lora_engines:paged_small_pool \\
        --engine-variant budget_8=engines.lora_engines:paged_budget_8

Each serves the same adapter names from the same directories, so every engine compared
serves every drawn request. The paged configurations are engines.paged.variants' (the
default engine's pool, a pool of one whole context, an 8-token budget), with the adapters.
"""

from __future__ import annotations

from typing import Any

from engines.loras import zoo_loras
from engines.models import DEFAULT_PRESET, preset_max_model_len
from engines.paged import DEFAULT_BLOCK_SIZE, PagedEngine
from engines.sequential import SequentialEngine

__all__ = ["ZOO_ADAPTERS", "paged_budget_8", "paged_no_prefix_caching", "paged_small_pool",
           "paged_with_loras", "sequential_with_loras"]

ZOO_ADAPTERS = 3  # a batch mixes ranks 8 and 4, and two adapters share a rank


def _adapters() -> dict[str, str]:
    return zoo_loras(DEFAULT_PRESET, ZOO_ADAPTERS)


def _paged(**kwargs: Any) -> PagedEngine:
    return PagedEngine(DEFAULT_PRESET, loras=_adapters(), **kwargs)


def paged_with_loras() -> PagedEngine:
    """The default paged engine, serving the adapters."""
    return _paged()


def sequential_with_loras() -> SequentialEngine:
    """The sequential reference, serving the adapters through PEFT."""
    return SequentialEngine(DEFAULT_PRESET, loras=_adapters())


def paged_no_prefix_caching() -> PagedEngine:
    """No block ever shared: every tenant computes its own."""
    return _paged(enable_prefix_caching=False)


def paged_small_pool() -> PagedEngine:
    """A pool of one whole context for 16 seats: tenants' blocks are evicted and preempted."""
    context = preset_max_model_len(DEFAULT_PRESET) or 512
    return _paged(max_batch_size=16, num_blocks=-(-context // DEFAULT_BLOCK_SIZE))


def paged_budget_8() -> PagedEngine:
    """8 tokens a step: prompts chunked at boundaries the default never uses."""
    return _paged(max_batch_size=8, kv_slots=8, max_num_batched_tokens=8,
                  max_prefill_only_tokens=8)
