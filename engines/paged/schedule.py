"""The paged engine's schedule: how many tokens each request computes this step and the
blocks they need, preemption when the pool runs dry, and the prefix cache's lookups and
registrations. A mixin over PagedEngine's queue, running list and block pool.

Policy (vLLM V1's token budget, with Sarathi-Serve's decode-first order): every decoding
request gets its one token; then prompts, fewest tokens left first, each given min(tokens it
has pending, budget left). Waiting requests are admitted first come first served while the
batch, the budget and the pool have room, and the queue's head competes with the running
prompts as soon as a seat is free, so a short prompt is not held behind a long one's chunks
(vLLM's partial-prefill limits answer the same head-of-line blocking). When a running request
needs a block and none is free, the most recently admitted request (possibly itself) gives
back its blocks and goes to the front of the queue, to be recomputed from its prompt and its
tokens so far.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

from engines.paged.blocks import BlockKey, BlockPool, block_key
from engines.paged.state import PagedRequest


class PagedSchedule:
    running: list[PagedRequest]  # in admission order
    waiting: deque[PagedRequest]
    pool: BlockPool
    kv_block_size: int
    max_batch_size: int
    max_num_batched_tokens: int  # while any request decodes
    max_prefill_only_tokens: int  # while none does
    preemptions: int
    free_seats: list[int]  # seats no running request holds, lowest first
    # StepOutput.cached_prompt_tokens: per request, its prefix-cache hit tokens at its first
    # admission until its next output reports them (then None, until it leaves).
    first_hits: dict[Hashable, int | None]

    def _seat(self, seq: PagedRequest) -> None:
        """Give an admitted request the lowest free seat (none if a subclass leaked them:
        the forward then gives it a scratch table row)."""
        seq.seat = self.free_seats.pop(0) if self.free_seats else -1

    def _unseat(self, seq: PagedRequest) -> None:
        if seq.seat >= 0:
            bisect.insort(self.free_seats, seq.seat)
            seq.seat = -1

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.kv_block_size)

    def _schedule(self) -> dict[PagedRequest, int]:
        """Tokens to compute per request this step, within the budget, blocks allocated."""
        plan: dict[PagedRequest, int] = {}
        decoding = [seq for seq in self.running if seq.num_pending == 1]
        # The budget bounds how long a step keeps decoding requests from their next token.
        # With none decoding nobody waits on the step: fewer, larger steps cost the fixed part
        # of a step less often (the closed mix's first 8 prompts, 2,650 tokens, in one step,
        # not six: 92 steps in all instead of 109 at a budget of 96).
        budget = (self.max_num_batched_tokens if any(seq.output for seq in decoding)
                  else self.max_prefill_only_tokens)
        for seq in decoding:
            self._take(seq, budget, plan)
        self._whole_groups(plan)  # beam search (engines.paged.beams): all of a group or none
        self._add_drafts(decoding, plan, budget)  # speculation (engines.paged.speculate)
        # Fewest tokens left first: each prompt that completes starts decoding a step sooner
        # (the bench's 200-request draw, all queued: 527 steps instead of 541 oldest first at
        # a budget of 96), and the queue's head goes before any running prompt with more
        # tokens left.
        for seq in sorted((s for s in self.running if s.num_pending > 1),
                          key=lambda s: s.num_pending):
            self._admit(plan, budget, fewer_than=seq.num_pending)
            self._take(seq, budget, plan)
        self._admit(plan, budget)
        return plan

    def _add_drafts(self, decoding: list[PagedRequest], plan: dict[PagedRequest, int],
                    budget: int) -> None:
        """Speculation's hook: decoding rows may take draft tokens to verify (none here)."""

    def _take(self, seq: PagedRequest, budget: int, plan: dict[PagedRequest, int]) -> None:
        room = budget - sum(plan.values())
        if room > 0 and seq in self.running:  # not preempted for an older request
            n = min(seq.num_pending, room)
            if self._grow(seq, n, plan):
                plan[seq] = n

    def _grow(self, seq: PagedRequest, n: int, plan: dict[PagedRequest, int]) -> bool:
        """Blocks for n more tokens of seq, preempting the most recently admitted requests
        while none are free. False if seq itself had to go."""
        while True:
            # A shared partial block it writes into is copied first (engines.paged.fork);
            # preempting a sibling may leave it unshared.
            cow = self._private_tail(seq)
            need = max(self._blocks_for(seq.num_computed + n) - len(seq.blocks), 0) + cow
            if need <= 0:
                return True
            if self.pool.can_allocate(need):
                break
            # The most recent request, or every row of its beam group (engines.paged.beams).
            for victim in self._victims(self.running[-1]):
                self._preempt(victim)
                plan.pop(victim, None)
            if seq not in self.running:
                return False
        if cow:
            self._copy_tail(seq)
        if need > cow:
            seq.blocks.extend(self.pool.allocate(need - cow))
        return True

    # Beam search's hooks (engines.paged.beams); no groups without it.

    def _reserved_seats(self) -> int:
        return 0

    def _victims(self, seq: PagedRequest) -> list[PagedRequest]:
        return [seq]

    def _whole_groups(self, plan: dict[PagedRequest, int]) -> None:
        pass

    def _admit_group(self, group: Any, plan: dict[PagedRequest, int], budget: int,
                     fewer_than: int | None) -> bool:
        return False

    def _private_tail(self, seq: PagedRequest) -> int:
        """Blocks seq needs before writing, to copy a shared block (none without forks)."""
        return 0

    def _copy_tail(self, seq: PagedRequest) -> None:
        """Copy-on-write of seq's shared partial block (engines.paged.fork)."""

    def _admit(self, plan: dict[PagedRequest, int], budget: int,
               fewer_than: int | None = None) -> None:
        """First come first served; a request waits (and so do those behind it) until the
        budget, the batch and the pool have room for its first chunk, or while it has
        `fewer_than` tokens or more to compute. Never preempts."""
        while (self.waiting
               and len(self.running) + self._reserved_seats() < self.max_batch_size):
            room = budget - sum(plan.values())
            seq = self.waiting[0]
            if seq.group is not None:  # a beam search's rows, all or none (engines.paged.beams)
                if not self._admit_group(seq.group, plan, budget, fewer_than):
                    return
                continue
            hits = self._cached_prefix(seq)
            computed = len(hits) * self.kv_block_size
            if fewer_than is not None and seq.num_tokens - computed >= fewer_than:
                return
            n = min(seq.num_tokens - computed, room)
            fresh = self._blocks_for(computed + n) - len(hits)
            revived = sum(self.pool.ref_counts[b] == 0 for b in hits)  # stop being free
            if n <= 0 or not self.pool.can_allocate(fresh + revived):
                return
            self.waiting.popleft()
            self.pool.share(hits)
            seq.blocks = hits + self.pool.allocate(fresh)
            seq.num_computed, seq.num_registered = computed, len(hits)
            self.first_hits.setdefault(seq.request.request_id, computed)  # counted once
            self.running.append(seq)
            self._seat(seq)
            plan[seq] = n

    # --- prefix cache, preemption ---------------------------------------------------------------

    def _block_key(self, parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        return block_key(parent, tokens)

    def _cached_prefix(self, seq: PagedRequest) -> list[int]:
        """Cached blocks for seq's leading full blocks; its last token is always computed (its
        logits give the next token), so a fully cached request still computes one block."""
        if not self.pool.enable_prefix_caching:
            return []
        full = (seq.num_tokens - 1) // self.kv_block_size
        if seq.request.params.prompt_logprobs and \
                len(seq.prompt_logprobs) < len(seq.request.prompt_token_ids):
            # Prompt logprobs need the logits of every position they lack an entry for
            # (PagedEngine's prompt logprobs): no cached block past the last one they have.
            full = min(full, max(len(seq.prompt_logprobs) - 1, 0) // self.kv_block_size)
        return self.pool.lookup(seq.prefix_keys(full, self.kv_block_size, self._block_key))

    def _cache_full_blocks(self, seq: PagedRequest) -> None:
        full = seq.num_computed // self.kv_block_size
        if not self.pool.enable_prefix_caching or full <= seq.num_registered:
            return
        keys = seq.prefix_keys(full, self.kv_block_size, self._block_key)
        for j in range(seq.num_registered, full):
            self.pool.register(seq.blocks[j], keys[j])
        seq.num_registered = full

    def _preempt(self, seq: PagedRequest) -> None:
        self.running.remove(seq)
        self._unseat(seq)
        self._release_blocks(seq)
        seq.num_computed = seq.num_registered = seq.draft_computed = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _release_blocks(self, seq: PagedRequest) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
