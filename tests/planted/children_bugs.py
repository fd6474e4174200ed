"""Planted bugs in n > 1 (engines.core.children) on the reference ContinuousBatchEngine, and
in the paged engine's copy-on-write forks (engines.paged.fork)."""

from __future__ import annotations

from typing import Any

from engines.core.sampling import make_generator
from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.protocol import Request
from engines.slot.continuous import ContinuousBatchEngine


class ChildrenShareASeed(ContinuousBatchEngine):
    """Every child of a seeded request samples with the request's own seed (vLLM PR #10980,
    llama.cpp PR #18700): n identical samples. Reproducible, so alone and batched agree."""

    caught_by = "children"

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        params = request.params
        if params.temperature > 0 and params.seed is not None:
            for seq in self._live[request.request_id]:
                seq.generator = make_generator(params.seed, self.device)


class ForkedBlockFreedUnderSibling(PagedEngine):
    """A finishing child returns the blocks it forked from its sibling outright (every hold
    on them, as if it were their only holder) while the sibling still reads them; the blocks
    are counted free, then handed to other requests and overwritten."""

    caught_by = "kv_accounting"

    def _release_blocks(self, seq: PagedRequest) -> None:
        if seq.family > 1:
            for block in seq.blocks:
                self.pool.free([block] * self.pool.ref_counts[block])
        else:  # the sibling's own release then skips what is already free
            self.pool.free([b for b in seq.blocks if self.pool.ref_counts[b] > 0])
        seq.blocks = []


class ChildWritesSharedBlock(PagedEngine):
    """No copy-on-write: a child writes its token into the partial prompt block it shares
    with its siblings, overwriting what they read at that position (each sibling then
    writes its own there in turn)."""

    caught_by = "kv_accounting"

    def _private_tail(self, seq: PagedRequest) -> int:
        return 0


CHILDREN_PLANTED: list[Any] = [ChildrenShareASeed, ForkedBlockFreedUnderSibling,
                               ChildWritesSharedBlock]
