"""Paged engine: one block KV pool for all requests, chunked prefill under a per-step token
budget, prefix caching and preemption by recompute (the vLLM V1 / Sarathi-Serve design).

One step: retire aborted requests; schedule the running requests, decode rows first, then
unfinished prompts in chunks, each oldest first, then admit waiting ones while the token
budget, the batch size and free blocks allow; one forward pass over every scheduled span;
sample for each request whose span reached its last token; retire finished requests.

Blocks are allocated as tokens need them. When a running request needs a block and none is
free, the most recently admitted request gives its blocks back and goes to the front of the
queue; on return it is recomputed from its prompt and every token generated so far (its full
blocks are usually still in the prefix cache), and its output goes on from where it stopped.

Not SlotIntrospection: requests have no slots that stay compact (`max_concurrency` says how
many run at once); KVIntrospection describes the pool instead.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from engines.base import EngineCore
from engines.blocks import BlockKey, BlockPool, block_key
from engines.models import DEFAULT_PRESET
from engines.paged_forward import PagedForward, Row
from engines.paged_state import PagedRequest
from engines.protocol import InvalidRequest, Request, StepOutput
from engines.sampling import sample

DEFAULT_BLOCK_SIZE = 16
# Tokens one step may compute, decode rows and prompt chunks together: a CPU default. On the
# tiny preset a step costs a fixed ~0.7 ms (the model's ~160 small ops) plus ~5-10 us a
# token, more for a chunk over a long cached prefix. Beside 7 decode rows, a 57-token chunk
# over 420 cached tokens made the step 1.6x a decode step, an 89-token one 2.1-2.7x
# (shared machine); 80 is the budget whose full steps stay near 2x in the worst case. The
# bench (--quick, 2 runs each, ratios to continuous in one paired run) measured for budgets
# 64 / 80 / 96 / 112: ITL spike 1.15-1.19 / 1.25-1.32 / 1.33-1.85 / 1.96-2.00, capacity
# 0.85-0.86 / 0.91-0.95 / 0.89-0.96 / 0.98-1.00 of continuous. A smaller budget pays the
# fixed cost more often per prompt token; continuous pays it once per prompt, and spikes
# 8-15x (scripts/paged_budgets.py reruns this). On a GPU, where a step's cost is flat over
# hundreds of tokens, pass a larger one (vLLM uses thousands).
DEFAULT_TOKEN_BUDGET = 80


class PagedEngine(EngineCore[PagedRequest]):
    name = "paged"

    def __init__(
        self,
        model: Any = DEFAULT_PRESET,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        max_batch_size: int = 8,
        max_model_len: int | None = None,
        seed: int = 0,
        block_size: int = DEFAULT_BLOCK_SIZE,
        num_blocks: int | None = None,  # default: the slot cache's memory, batch x context
        max_num_batched_tokens: int = DEFAULT_TOKEN_BUDGET,
        enable_prefix_caching: bool = True,
    ) -> None:
        super().__init__(model, device=device, dtype=dtype, max_batch_size=max_batch_size,
                         max_model_len=max_model_len, seed=seed)
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        if max_num_batched_tokens < max_batch_size:
            raise ValueError(f"max_num_batched_tokens: {max_num_batched_tokens} is below "
                             f"max_batch_size {max_batch_size}; every running request must "
                             "be able to decode in every step")
        if num_blocks is None:
            num_blocks = max_batch_size * -(-self.max_model_len // block_size)
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        self.kv_block_size = block_size
        self.kv_total_blocks = num_blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_concurrency = max_batch_size
        self.pool = BlockPool(num_blocks, enable_prefix_caching=enable_prefix_caching)
        self.runner = PagedForward(self.model, num_blocks=num_blocks, block_size=block_size)
        self.preemptions = 0  # requests sent back to the queue to free blocks, ever

    @property
    def prefix_cache_hits(self) -> int:
        """Blocks taken from the prefix cache instead of being computed, ever."""
        return self.pool.hits

    # --- KVIntrospection ----------------------------------------------------------------------

    def kv_free_blocks(self) -> int:
        return self.pool.num_free()

    def kv_block_tables(self) -> dict[Hashable, Sequence[int]]:
        return {seq.request.request_id: tuple(seq.blocks) for seq in self.running}

    def kv_cached_tokens(self) -> dict[Hashable, int]:
        return {seq.request.request_id: seq.num_computed for seq in self.running}

    # --- requests ------------------------------------------------------------------------------

    def _check(self, request: Request) -> None:
        super()._check(request)
        prompt, budget = len(request.prompt_token_ids), request.params.max_tokens
        need = self._blocks_for(prompt + budget - 1)  # the last token's KV is never computed
        if need > self.kv_total_blocks:
            field = "prompt_token_ids" if self._blocks_for(prompt) > self.kv_total_blocks else (
                "max_tokens")
            raise InvalidRequest(
                f"{field}: prompt length {prompt} + max_tokens {budget} needs {need} KV blocks "
                f"of {self.kv_block_size} tokens; the pool has {self.kv_total_blocks} "
                "(num_blocks), so this request could never run")

    def _new_state(self, request: Request, generator: torch.Generator | None) -> PagedRequest:
        return PagedRequest(request, generator)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.kv_block_size)

    # --- one step ------------------------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        for seq in self._take_aborts(outputs):
            self._retire(seq)
        plan = self._schedule()
        if not plan:
            return outputs
        logits = self.runner.forward([self._row(seq, n) for seq, n in plan.items()])
        ready = []
        for seq, n in plan.items():
            seq.num_computed += n
            self._cache_full_blocks(seq)
            if seq.num_computed == seq.num_tokens:
                ready.append(seq)
        tokens, tops = sample(logits, ready)
        for seq, token, top in zip(ready, tokens, tops, strict=True):
            outputs.append(seq.append(token, top))
            if seq.finished:
                self._finish(seq)
                self._retire(seq)
        return outputs

    def _row(self, seq: PagedRequest, n: int) -> Row:
        start = seq.num_computed
        return Row(seq.tokens(start, start + n), start, seq.blocks, start + n == seq.num_tokens)

    def _schedule(self) -> dict[PagedRequest, int]:
        """Tokens to compute per request this step, within the budget, blocks allocated."""
        plan: dict[PagedRequest, int] = {}
        # Decode rows first, then unfinished prompts, each oldest first (a stable sort): a long
        # prompt never delays the next token of a request that is already generating.
        for seq in sorted(self.running, key=lambda s: s.num_pending > 1):
            room = self.max_num_batched_tokens - sum(plan.values())
            if room > 0 and seq in self.running:  # not preempted for an older request
                n = min(seq.num_pending, room)
                if self._grow(seq, n, plan):
                    plan[seq] = n
        self._admit(plan)
        return plan

    def _grow(self, seq: PagedRequest, n: int, plan: dict[PagedRequest, int]) -> bool:
        """Blocks for n more tokens of seq, preempting the most recently admitted requests
        while none are free. False if seq itself had to go."""
        need = self._blocks_for(seq.num_computed + n) - len(seq.blocks)
        if need <= 0:
            return True
        while not self.pool.can_allocate(need):
            victim = self.running[-1]
            self._preempt(victim)
            plan.pop(victim, None)
            if victim is seq:
                return False
        seq.blocks.extend(self.pool.allocate(need))
        return True

    def _admit(self, plan: dict[PagedRequest, int]) -> None:
        """First come first served; a request waits (and so do those behind it) until the
        budget, the batch and the pool have room for its first chunk. Never preempts."""
        while self.waiting and len(self.running) < self.max_batch_size:
            room = self.max_num_batched_tokens - sum(plan.values())
            seq = self.waiting[0]
            hits = self._cached_prefix(seq)
            computed = len(hits) * self.kv_block_size
            n = min(seq.num_tokens - computed, room)
            fresh = self._blocks_for(computed + n) - len(hits)
            revived = sum(self.pool.ref_counts[b] == 0 for b in hits)  # stop being free
            if n <= 0 or not self.pool.can_allocate(fresh + revived):
                return
            self.waiting.popleft()
            self.pool.share(hits)
            seq.blocks = hits + self.pool.allocate(fresh)
            seq.num_computed, seq.num_registered = computed, len(hits)
            self.running.append(seq)
            plan[seq] = n

    # --- prefix cache, preemption, retirement --------------------------------------------------

    def _block_key(self, parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
        return block_key(parent, tokens)

    def _cached_prefix(self, seq: PagedRequest) -> list[int]:
        """Cached blocks for seq's leading full blocks; its last token is always computed (its
        logits give the next token), so a fully cached request still computes one block."""
        if not self.pool.enable_prefix_caching:
            return []
        full = (seq.num_tokens - 1) // self.kv_block_size
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
        self._release_blocks(seq)
        seq.num_computed = seq.num_registered = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _retire(self, seq: PagedRequest) -> None:
        self.running.remove(seq)
        self._release_blocks(seq)

    def _release_blocks(self, seq: PagedRequest) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
