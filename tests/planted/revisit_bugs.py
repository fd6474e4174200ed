"""Planted bugs in the paged engine that only the seed workloads of engines.testing.seed_workloads
reach (one line each; the unmutated engine is right in both cases):

- FullHitComputesNothing: a prompt whose every block is cached takes all of them, so nothing
  is left to compute for its last token's logits, and admission waits for work that never
  comes: the engine hangs (has_work() stays true), and the requests queued behind it too.
  Reached only by a prompt of a whole number of blocks sent again once its blocks are cached.
- ReseedsOnResume: a preempted seeded request's RNG restarts from its seed when it resumes,
  so it draws its first tokens' random numbers again. Reached only by seeded requests that
  are preempted: on a config variant with a small pool, beside the main engine that is not.
"""

from __future__ import annotations

from typing import Any

from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.paged.variants import small_pool


class FullHitComputesNothing(PagedEngine):
    caught_by = "liveness"

    def _cached_prefix(self, seq: PagedRequest) -> list[int]:
        if not self.pool.enable_prefix_caching:
            return []
        full = seq.num_tokens // self.kv_block_size  # the bug: the last token's block too
        return self.pool.lookup(seq.prefix_keys(full, self.kv_block_size, self._block_key))


class ReseedsOnResume(PagedEngine):
    caught_by = "variants"

    def _preempt(self, seq: PagedRequest) -> None:
        super()._preempt(seq)
        seed = seq.request.params.seed
        if seq.generator is not None and seed is not None:
            seq.generator.manual_seed(seed)  # the bug: the resumed request's RNG restarts


def reseeds_on_resume_small_pool() -> ReseedsOnResume:
    """engines.paged.variants.small_pool's configuration, with the bug."""
    made = small_pool()
    kw: dict[str, Any] = {"max_batch_size": made.max_batch_size,
                          "num_blocks": made.kv_total_blocks}
    return ReseedsOnResume(**kw)


ReseedsOnResume.variants = {"small_pool": reseeds_on_resume_small_pool}  # type: ignore[attr-defined]

REVISIT_PLANTED: list[Any] = [FullHitComputesNothing, ReseedsOnResume]
