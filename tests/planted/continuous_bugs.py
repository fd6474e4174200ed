"""Planted bugs in the reference ContinuousBatchEngine itself: one method overridden each.

Slower than the toy ones (a real model runs), so the tests of the check that catches each
(tests/testing/checks/test_<check>.py) run them with the seed workloads only.
"""

from __future__ import annotations

from typing import Any

import torch

from engines.core.request_state import RequestState
from engines.slot.cache import SlotCache
from engines.slot.continuous import ContinuousBatchEngine


class ForgetsToRepoint(ContinuousBatchEngine):
    """Compaction moves the last row's KV into the freed slot and the request into its place
    in `running`, but the request keeps its old slot number: a later release frees the wrong
    slot. Exposed only when a request finishes while a later row runs on. (The cache's own
    assertion fires in the next step: the suite reports the crash with its workload.)"""

    caught_by = "crash"
    check = "compaction"  # run under it: the crash is what the report shows

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 3)
        super().__init__(**kw)

    def _release(self, seq: RequestState) -> None:
        moved = self.cache.free(seq.slot)
        last = self.running.pop()
        if moved is not None:
            self.running[seq.slot] = last  # last.slot still names the old, now free slot
        seq.slot = -1


class AbortsOnlyWaiting(ContinuousBatchEngine):
    """Aborts take effect only for waiting requests; one already running keeps its slot
    (no ABORT output ever comes). Exposed only when an abort hits a running request."""

    caught_by = "liveness"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 3)
        super().__init__(**kw)

    def _take_aborts(self, outputs: list[Any]) -> list[RequestState]:
        for seq in [s for s in self.waiting if s.abort_pending]:
            self.waiting.remove(seq)
            outputs.append(seq.abort())
            self._finish(seq)
        return []


class _OffByOneMoveCache(SlotCache):
    def free(self, slot: int) -> int | None:
        last = self.num_active - 1
        if slot != last:  # copies one column short: the moved row's newest KV is stale
            n = self.lengths[last]
            self.kv[:, :, slot, :, : n - 1] = self.kv[:, :, last, :, : n - 1]
            self.lengths[slot] = n
            self.lengths[last] = 0
            self.num_active = last
            return last
        return super().free(slot)


class CompactionCopiesShort(ContinuousBatchEngine):
    """Compaction copies the moved row's KV one column short, so the column it cached last
    keeps whatever the freed slot's previous occupant left there. Exposed only when a request
    finishes below a row that goes on decoding (the moved row's tokens change)."""

    caught_by = "parity"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 3)
        super().__init__(**kw)
        cache = self.cache
        self.cache = _OffByOneMoveCache(
            num_layers=cache.kv.shape[0],
            max_batch_size=cache.max_batch_size,
            num_kv_heads=cache.kv.shape[3],
            max_len=cache.max_len,
            head_dim=cache.kv.shape[5],
            device=cache.kv.device,
            dtype=cache.kv.dtype,
        )


class PaddedDecodeRows(ContinuousBatchEngine):
    """Decode treats every row as long as the widest (a padded-batch habit carried into the
    slot cache): a shorter row's token goes in at the widest row's position and attends over
    the stale columns past its own length. Exposed only when rows of different lengths
    decode together."""

    caught_by = "parity"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 3)
        super().__init__(**kw)
        lengths = self.cache.lengths
        decode = self.runner.decode

        def widest(tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
            n = tokens.shape[0]
            real = lengths[:n]
            cache.lengths[:n] = [max(real)] * n  # every row "as long as the longest"
            out = decode(tokens, cache)
            cache.lengths[:n] = [x + 1 for x in real]
            return out

        self.runner.decode = widest  # type: ignore[method-assign]


CONTINUOUS_PLANTED: list[Any] = [
    ForgetsToRepoint,
    AbortsOnlyWaiting,
    CompactionCopiesShort,
    PaddedDecodeRows,
]
