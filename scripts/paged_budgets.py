"""The paged engine at other per-step token budgets, for the bench: the ITL / capacity trade;
and with 16 seats in the KV memory the continuous engine reserves for 8 (`seats_16`).

A step's cost on the tiny CPU preset is a fixed ~0.7 ms (the model's ~100 small ops) plus
~10 us a token, so the budget trades the admission spike against prefill throughput:

    python -m engines.bench --quick \\
        --engine continuous=engines.continuous:ContinuousBatchEngine \\
        --engine paged=engines.paged:PagedEngine \\
        --engine paged_96=scripts.paged_budgets:budget_96 \\
        --engine paged_128=scripts.paged_budgets:budget_128
"""

from __future__ import annotations

from engines.paged import PagedEngine


def budget_64() -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=64)


def budget_96() -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=96)


def budget_112() -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=112)


def budget_128() -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=128)


def budget_256() -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=256)


def seats_16() -> PagedEngine:
    """16 requests at once in 256 blocks of 16 tokens: the memory of the continuous engine's
    8 slots of 512 tokens, which it must reserve whole per request."""
    return PagedEngine(max_batch_size=16, num_blocks=256)
