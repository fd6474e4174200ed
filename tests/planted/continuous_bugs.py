"""Planted bugs in the reference ContinuousBatchEngine itself: one method overridden each.

Slower than the toy ones (a real model runs), so tests/test_planted_bugs.py checks them
with the seed workloads only.
"""

from __future__ import annotations

from typing import Any

from engines.continuous import ContinuousBatchEngine
from engines.sequence import Sequence


class ForgetsToRepoint(ContinuousBatchEngine):
    """Compaction moves the last row's KV into the freed slot and the request into its place
    in `running`, but the request keeps its old slot number: a later release frees the wrong
    slot. Exposed only when a request finishes while a later row runs on. (The cache's own
    assertion fires in the next step: the suite reports the crash with its workload.)"""

    caught_by = "compaction"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 3)
        super().__init__(**kw)

    def _release(self, seq: Sequence) -> None:
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

    def _take_aborts(self, outputs: list[Any]) -> list[Sequence]:
        for seq in [s for s in self.waiting if s.abort_pending]:
            self.waiting.remove(seq)
            outputs.append(seq.abort())
            self._finish(seq)
        return []


CONTINUOUS_PLANTED: list[Any] = [ForgetsToRepoint, AbortsOnlyWaiting]
