"""A planted liar: an engine that declares `batch_invariant` in bf16 and is not.

--parity=auto holds an engine that declares batch invariance to exact parity at any dtype
(engines.testing.precision). The declaration is the engine's word: an engine that gives it
without computing so (the plain bf16 paged engine, whose decode buckets pad to their longest
row and whose prompt chunks go through ATen's SDPA, blocked by the chunk) must fail `parity`,
not be forgiven its near-ties. tests/testing/checks/test_parity.py hunts it, and the paged
engine's real invariant mode (engines.paged.variants:bf16_invariant) through the same hunt.
"""

from __future__ import annotations

from typing import Any

from engines.paged.engine import PagedEngine

__all__ = ["ClaimsBatchInvariance", "INVARIANCE_PLANTED"]


class ClaimsBatchInvariance(PagedEngine):
    """The plain bf16 paged engine with `batch_invariant` declared: a row's bf16 roundings
    move with its bucket's padding and its prompt's chunking, so a near-tie flips a greedy
    token batched that alone it does not."""

    caught_by = "parity"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "bfloat16")
        super().__init__(**kwargs)
        self.batch_invariant = True  # the lie: declared, with the plain forward


INVARIANCE_PLANTED: list[Any] = [ClaimsBatchInvariance]
