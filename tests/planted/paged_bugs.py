"""Planted bugs in the paged engine: PagedEngine with one method overridden each, each a
mistake real paged engines have made (prefix caches returning another prefix's KV, blocks
freed under a sharer, preemption duplicating output, chunk positions off by one, aborts
leaking blocks), and each visible only under some workloads.

`caught_by` names the suite check meant to catch it. tests/test_paged_planted.py shows each
symptom on a hand-made workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines.paged.blocks import BlockKey, block_key
from engines.paged.engine import PagedEngine
from engines.paged.forward import Row
from engines.paged.state import PagedRequest
from engines.protocol import StepOutput
from engines.sequential import SequentialEngine


class PrefixKeyIgnoresPast(PagedEngine):
    """A prefix-cache key hashes the block's own tokens only, not what came before it."""

    # A request whose first block equals a block cached at another index (or after another
    # prefix) is handed KV computed at other positions in another context.
    caught_by = "reference_parity"
    reference = SequentialEngine  # the suite harness runs reference_parity against it

    def _block_key(self, parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        return block_key(None, tokens)


class FreesSharedBlocks(PagedEngine):
    """A finishing request returns its blocks outright, even prefix blocks others still hold."""

    # The sharer's block is counted free (then reallocated and overwritten).
    caught_by = "kv_accounting"

    def _release_blocks(self, seq: PagedRequest) -> None:
        for block in seq.blocks:
            self.pool.free([block] * self.pool.ref_counts[block])
        seq.blocks = []


class RepeatsTokenOnResume(PagedEngine):
    """Preemption drops the last sampled token to recompute it, though it was already sent."""

    # Its KV was never computed, so "the recompute will produce it": it does, and the client
    # gets it twice (max_tokens + 1 tokens in all). Needs a preemption, so it is planted in
    # a pool of 8 blocks for a context of 128 tokens (the largest request still fits alone):
    # requests sharing a prefix while one decodes a long budget run out of blocks.
    caught_by = "budget_finish"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_model_len", 128)
        kw.setdefault("num_blocks", 8)
        super().__init__(**kw)

    def _preempt(self, seq: PagedRequest) -> None:
        super()._preempt(seq)
        if seq.output:
            seq.output.pop()


class ChunkStartsOneEarly(PagedEngine):
    """A continuing prompt chunk is placed one position early (last cached, not next)."""

    # Its tokens get positions and KV slots shifted back by one: the previous chunk's last
    # KV is overwritten and the chunk's own last slot never written. Needs a prompt chunked:
    # longer than the budget left beside a decoding request (alone, with no one decoding, a
    # prompt is prefilled whole), so the engine's own alone run is right and the reference's
    # tokens tell.
    caught_by = "reference_parity"
    reference = SequentialEngine

    def _row(self, seq: PagedRequest, n: int) -> Row:
        row = super()._row(seq, n)
        if 0 < row.start < len(seq.request.prompt_token_ids):
            return Row(row.tokens, row.start - 1, row.blocks, row.wants_logits)
        return row


class AbortLeaksBlocks(PagedEngine):
    """An aborted running request leaves the batch but never returns its blocks."""

    # Held by no table and not free: after the drain, free < total.
    caught_by = "kv_accounting"

    def _take_aborts(self, outputs: list[StepOutput]) -> list[PagedRequest]:
        for seq in super()._take_aborts(outputs):
            self.running.remove(seq)
        return []


PAGED_PLANTED: list[Any] = [
    PrefixKeyIgnoresPast,
    FreesSharedBlocks,
    RepeatsTokenOnResume,
    ChunkStartsOneEarly,
    AbortLeaksBlocks,
]
