"""The paged engine at other per-step token budgets, for the bench: the ITL / capacity trade
(the table in engines/paged/engine.py); and with 16 seats in the KV memory the continuous engine
reserves for 8 (`seats_16`).

A decode step on the tiny CPU preset costs ~0.6 ms, almost all of it fixed, and a prompt
token ~5.5 us plus its attention over what came before, so the budget trades the admission
spike against the steps a prompt's chunks take (each holding a seat that does not decode).
The default rotation, one budget per run:

    python -m engines.bench --quick \\
        --engine static=engines.slot.static:StaticBatchEngine \\
        --engine continuous=engines.slot.continuous:ContinuousBatchEngine \\
        --engine paged=scripts.paged_budgets:budget_112

Put several paged engines in one run only knowing that an engine stepped right after one
of its own kind runs 4-6% faster than after another (two identical paged engines measured
so, paired): the rotation order is part of what such a run measures.
"""

from __future__ import annotations

from engines.paged.engine import PagedEngine

# The table was measured at 8 seats, each with a whole context of KV (PagedEngine's default
# before it took 16 seats sharing that memory): the budgets keep that configuration.
EIGHT_SEATS = {"max_batch_size": 8, "kv_slots": 8}


def _engine(budget: int) -> PagedEngine:
    return PagedEngine(max_num_batched_tokens=budget, max_batch_size=EIGHT_SEATS["max_batch_size"],
                       kv_slots=EIGHT_SEATS["kv_slots"])


def budget_64() -> PagedEngine:
    return _engine(64)


def budget_80() -> PagedEngine:
    return _engine(80)


def budget_96() -> PagedEngine:
    return _engine(96)


def budget_104() -> PagedEngine:
    return _engine(104)


def budget_112() -> PagedEngine:
    return _engine(112)


def budget_128() -> PagedEngine:
    return _engine(128)


def budget_256() -> PagedEngine:
    return _engine(256)


def seats_16() -> PagedEngine:
    """16 requests at once in 256 blocks of 16 tokens: the memory of the continuous engine's
    8 slots of 512 tokens, which it must reserve whole per request (PagedEngine's default
    now, at its default budget)."""
    return PagedEngine(max_batch_size=16, num_blocks=256)
