"""Planted bugs in the paged engine: PagedEngine with one method overridden each, each a
mistake real paged engines have made (prefix caches returning another prefix's KV, blocks
freed under a sharer, preemption duplicating output, chunk positions off by one, aborts
leaking blocks), and each visible only under some workloads.

`caught_by` names the suite check meant to catch it. tests/engines/paged/test_planted.py shows each
symptom on a hand-made workload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
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


class SmallPool(PagedEngine):
    """A pool of 8 blocks for a context of 128 tokens (the largest request still fits alone),
    for bugs that need a preemption: requests sharing a prefix while one decodes a long
    budget run out of blocks within a few tokens each."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_model_len", 128)
        kw.setdefault("num_blocks", 8)
        super().__init__(**kw)


class RepeatsTokenOnResume(SmallPool):
    """Preemption drops the last sampled token to recompute it, though it was already sent."""

    # Its KV was never computed, so "the recompute will produce it": it does, and the client
    # gets it twice (max_tokens + 1 tokens in all).
    caught_by = "budget_finish"

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
            return dataclasses.replace(row, start=row.start - 1)
        return row


class AbortLeaksBlocks(PagedEngine):
    """An aborted running request leaves the batch but never returns its blocks."""

    # Held by no table and not free: after the drain, free < total.
    caught_by = "kv_accounting"

    def _take_aborts(self, outputs: list[StepOutput]) -> list[PagedRequest]:
        for seq in super()._take_aborts(outputs):
            self.running.remove(seq)
        return []


class PrefixKeyIgnoresLastToken(PagedEngine):
    """A prefix-cache key leaves out the block's last token (an off-by-one in the slice)."""

    # A prompt equal to a cached or running one up to a block's last token is handed that
    # one's KV for it. Only a near miss shows it: prompts that share whole blocks, or none,
    # get the right blocks.
    caught_by = "reference_parity"
    reference = SequentialEngine

    def _block_key(self, parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        return block_key(parent, tokens[:-1])


class HoldsSpareBlock(PagedEngine):
    """Every allocation takes a block more than the tokens need, kept until the request ends."""

    # "For the next token". Tokens are right and every block is accounted for (held or
    # free); the request just holds a block none of its KV is in. Only the upper bound on a
    # request's blocks sees it.
    caught_by = "kv_accounting"

    def _blocks_for(self, tokens: int) -> int:
        return super()._blocks_for(tokens) + (tokens > 0)


class PreemptedTableLingers(PagedEngine):
    """The KV view lists a waiting preempted request's still-cached blocks as its table."""

    # It will take them back when it resumes, so the view lists them already. Those blocks
    # are held by nobody and counted free: held + free exceeds the pool. Its tokens are
    # right (the view is all that is wrong). Planted on 8 seats with a whole context each
    # (PagedEngine's default before), a pool that holds every request running at once, so
    # the engine itself never preempts: only the KV checks on a variant with a smaller pool
    # (one whole context's worth of blocks for 16 seats) reach the bug.
    caught_by = "kv_accounting"

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 8)
        kw.setdefault("kv_slots", 8)
        super().__init__(**kw)

    def kv_block_tables(self) -> dict[Hashable, Sequence[int]]:
        tables = super().kv_block_tables()
        for seq in self.waiting:
            hits = self._cached_prefix(seq) if seq.output else []  # output: it ran before
            if hits:
                tables[seq.request.request_id] = tuple(hits)
        return tables


def _small_pool_lingering() -> PreemptedTableLingers:
    # engines.paged.variants.small_pool's configuration: one whole context for 16 seats.
    return PreemptedTableLingers(max_batch_size=16, num_blocks=512 // 16)


PreemptedTableLingers.variants = {"small_pool": _small_pool_lingering}  # type: ignore[attr-defined]


class ResumeKeepsOldBlockIds(PagedEngine):
    """The forward pass patches a resumed request's old block table instead of replacing it."""

    # The runner keeps its own copy of each request's table and appends the ids past its
    # length, as a growing request needs; a preempted request resumes with new blocks, and
    # the copy keeps the old ids (vLLM V1's input batch carries `resumed_from_preemption` for
    # exactly this). Those went back to the pool at the preemption, and the request that
    # needed them wrote its own KV there: the resumed request reads and writes another's KV.
    # The KV view lists the new table (every block accounted for), so only the tokens tell.
    # Planted on the default configuration: its 16 seats can need twice its pool (8 whole
    # contexts), so the suite's workloads that overflow the pool make it preempt; 8 seats of
    # 8 whole contexts (the default before) never preempt, and nothing reaches the bug.
    caught_by = "reference_parity"
    reference = SequentialEngine

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._runner_tables: dict[PagedRequest, list[int]] = {}

    def _row(self, seq: PagedRequest, n: int) -> Row:
        row = super()._row(seq, n)
        kept = self._runner_tables.setdefault(seq, [])
        kept.extend(row.blocks[len(kept):])  # patched: only ids past the copy's end are new
        return dataclasses.replace(row, blocks=list(kept))


def resume_keeps_old_block_ids_eight_seats() -> ResumeKeepsOldBlockIds:
    """The same bug on PagedEngine's default before (8 seats, a whole context each): nothing
    preempts, so the suite passes it (the proof that only default-engine preemption bites)."""
    return ResumeKeepsOldBlockIds(max_batch_size=8, kv_slots=8)


class PromptLogprobsStaleOnHit(PagedEngine):
    """A prefix hit's prompt-logprob entries are copied from the latest running request."""

    # The cached positions have no logits, so their entries are taken from a request that
    # computed that far, the most recently admitted one, whether or not it shares the prefix
    # (vLLM PR #42245's stale, order-dependent values): right when it does, another
    # prompt's values when it does not.
    caught_by = "prompt_logprobs"
    reference = SequentialEngine

    def _cached_prefix(self, seq: PagedRequest) -> list[int]:
        full = (seq.num_tokens - 1) // self.kv_block_size
        hits = self.pool.lookup(seq.prefix_keys(full, self.kv_block_size, self._block_key))
        if not seq.request.params.prompt_logprobs or seq.prompt_logprobs or not hits:
            return super()._cached_prefix(seq)
        computed = len(hits) * self.kv_block_size
        source = next((s for s in reversed(self.running)
                       if len(s.prompt_logprobs) > computed), None)
        if source is None:
            return super()._cached_prefix(seq)
        seq.prompt_logprobs = list(source.prompt_logprobs[: computed + 1])
        return hits


PAGED_PLANTED: list[Any] = [
    PrefixKeyIgnoresPast,
    FreesSharedBlocks,
    RepeatsTokenOnResume,
    ChunkStartsOneEarly,
    AbortLeaksBlocks,
    PrefixKeyIgnoresLastToken,
    HoldsSpareBlock,
    PreemptedTableLingers,
    ResumeKeepsOldBlockIds,
    PromptLogprobsStaleOnHit,
]
