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
from engines.blocks import BlockPool
from engines.models import DEFAULT_PRESET
from engines.paged_forward import PagedForward, Row
from engines.paged_schedule import PagedSchedule
from engines.paged_state import PagedRequest
from engines.protocol import InvalidRequest, Request, StepOutput
from engines.sampling import sample

DEFAULT_BLOCK_SIZE = 16
# Tokens one step may compute, decode rows and prompt chunks together: a CPU default. On the
# tiny preset a step costs a fixed ~0.7 ms (the model's ~160 small ops) plus ~5-10 us a
# token, more for a chunk over a long cached prefix: beside 7 decode rows, a 57-token chunk
# over 420 cached tokens made the step 1.6x a decode step, an 89-token one 2.1-2.7x. The
# bench (--quick; ratios to continuous within one paired run; shared 2-core machine at load
# 2-5, one run at load 7 left out, where every figure moved: continuous spiked 17x):
#   budget   ITL spike (continuous 7.5-15.5x)   capacity / continuous   runs
#     64       0.92-1.19                         0.74-0.86               5
#     80       1.09-1.42                         0.82-0.95               6
#     96       1.33-1.91                         0.89-1.02               3
#    112       1.96-2.00                         0.98-1.00               2
#    128       2.52-2.67                         0.95-1.00               2
# A small budget pays the fixed cost more often per prompt token (the 32-request closed mix
# takes 120 steps at 80, 90 for continuous, which prefills each prompt whole and spikes); 80
# keeps the spike well under 2x for the least capacity given up (scripts/paged_budgets.py
# reruns this). On a GPU, where a step's cost is flat over hundreds of tokens, pass a larger
# budget (vLLM's run to thousands).
DEFAULT_TOKEN_BUDGET = 80


class PagedEngine(PagedSchedule, EngineCore[PagedRequest]):
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
        max_prefill_only_tokens: int | None = None,  # default: batch x context
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
        if max_prefill_only_tokens is None:
            max_prefill_only_tokens = max(max_num_batched_tokens,
                                          max_batch_size * self.max_model_len)
        if max_prefill_only_tokens < max_num_batched_tokens:
            raise ValueError(f"max_prefill_only_tokens: {max_prefill_only_tokens} is below "
                             f"max_num_batched_tokens {max_num_batched_tokens}")
        if num_blocks is None:
            num_blocks = max_batch_size * -(-self.max_model_len // block_size)
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        self.kv_block_size = block_size
        self.kv_total_blocks = num_blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_prefill_only_tokens = max_prefill_only_tokens
        self.max_concurrency = max_batch_size
        self.pool = BlockPool(num_blocks, enable_prefix_caching=enable_prefix_caching)
        self.runner = PagedForward(self.model, num_blocks=num_blocks, block_size=block_size,
                                   max_model_len=self.max_model_len)
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

    def _retire(self, seq: PagedRequest) -> None:
        self.running.remove(seq)
        self._release_blocks(seq)
