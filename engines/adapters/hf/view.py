"""Read-only views into transformers' continuous batching: what it exercised, and its KV pool.

All private state of `ContinuousBatchProcessor` (`.scheduler`, `.cache`), in the two layouts
the supported releases have:
- 5.18 and later: `cache.cache_allocators` (one allocator per attention type) with a
  per-request `block_table`, blocks carved out of `cache.pool` sectors, and a `ledger` whose
  `cached_blocks` are complete, unreferenced blocks kept for prefix sharing (evictable). A
  model with sliding and full layers has two allocators over the one pool (block ids are
  unique across them): the view is their union, a request's full-attention blocks first, so
  that its block j still holds tokens j * block_size onwards, then its sliding-window blocks
  (a window's worth, reused in a ring). Where every layer slides (no full-attention
  allocator), a request holds the KV of its last `window` tokens only, and says so;
- 5.16 and 5.17: `cache.group_cache_managers` with a per-request `block_table`, and
  `cache._block_manager`, whose `num_free_blocks` already counts cached blocks as free.
Both: a request's KV covers its `position_offset` tokens. Anything else raises `Unavailable`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from engines.adapters.common.book import Live, RequestBook
from engines.adapters.common.exercised import Tally
from engines.protocol import child_key

__all__ = ["KVMixin", "KVView", "Unavailable", "count_preemptions", "count_prefix_hits"]


class Unavailable(NotImplementedError):
    """This transformers version does not lay out its cache the way the adapter reads it."""


class KVView:
    """Blocks of the pool: one allocator per attention type (5.18+), or one cache group."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        allocators = getattr(cache, "cache_allocators", None)
        groups = getattr(cache, "group_cache_managers", None)
        self._allocators: list[Any] = []
        self._group = None
        if isinstance(allocators, dict) and allocators:
            # Full attention first: its table is the one whose block j is position j's.
            self._allocators = sorted(allocators.values(),
                                      key=lambda a: a.layer_type != "full_attention")
            shapes = {(a.tokens_per_page, a.blocks_per_sector) for a in self._allocators}
            if len(shapes) != 1:
                raise Unavailable(f"transformers' paged cache: allocators of different block "
                                  f"shapes (tokens per block, blocks per sector) {sorted(shapes)}")
        elif isinstance(groups, list) and len(groups) == 1 and hasattr(cache, "_block_manager"):
            (self._group,) = groups
        else:
            raise Unavailable("transformers' paged cache: neither cache allocators (5.18+) "
                              "nor one cache group (5.16-5.17) to read blocks from")

    @property
    def block_size(self) -> int:
        if self._allocators:
            return int(self._allocators[0].tokens_per_page)
        return int(self._cache.block_size)

    @property
    def total_blocks(self) -> int:
        if self._allocators:  # the two trash sectors are not in num_sectors
            return int(self._cache.num_sectors * self._allocators[0].blocks_per_sector)
        return int(self._cache._block_manager.num_blocks)

    def free_blocks(self) -> int:
        if not self._allocators:
            return int(self._cache._block_manager.num_free_blocks)
        pool = self._cache.pool
        # Sectors not yet carved into any allocator's blocks, then each allocator's free and
        # evictable cached blocks.
        free = pool.num_free_sectors * self._allocators[0].blocks_per_sector
        for a in self._allocators:
            free += pool.count_free_blocks(a.index) + len(a.ledger.cached_blocks)
        return int(free)

    @property
    def window(self) -> int | None:
        """Where every layer is sliding-window (no full-attention allocator), the window: a
        request then holds the KV of its last `window` tokens at most (a ring of blocks), not
        of all it has cached. None where some layer keeps every token."""
        if not self._allocators or any(a.layer_type == "full_attention"
                                       for a in self._allocators):
            return None
        return min(int(a.sliding_window) for a in self._allocators)

    @property
    def extra_blocks(self) -> int:
        """Blocks a request's merged table may hold beyond its cached tokens' need
        (Capabilities.kv_extra_blocks): where sliding layers sit beside full ones, each
        sliding allocator's ring, at most a window's worth of blocks plus one it straddles.
        0 where one allocator (or every one slides: then the window bounds the cached tokens).
        5.16-5.17's one cache group allocates the block for the next token ahead of it (in
        CI's compatibility run, after a prefill step: 2 blocks of 16 for a 15-token prompt, 4
        for a 48-token one): 1 there."""
        if self._group is not None:
            return 1
        if self.window is not None or not any(a.layer_type == "full_attention"
                                              for a in self._allocators):
            return 0
        size = self.block_size
        return sum(-(-int(a.sliding_window) // size) + 1 for a in self._allocators
                   if a.layer_type != "full_attention")

    def tables(self) -> dict[str, list[int]]:
        """Library request id -> block ids, for requests holding blocks."""
        owners = self._allocators or [self._group]
        merged: dict[str, list[int]] = {}
        for owner in owners:
            for rid, ids in owner.block_table.items():
                merged.setdefault(rid, []).extend(int(b) for b in ids)
        return {rid: ids for rid, ids in merged.items() if ids}


def count_preemptions(scheduler: Any, active_before: set[str], tally: Tally) -> None:
    """Requests that were running before this step's scheduling and are queued again after it
    were preempted (their KV freed or moved to CPU; they are prefilled again)."""
    waiting = getattr(scheduler, "waiting_requests", {})
    tally.add("preemptions", len(active_before & set(waiting)))


def count_prefix_hits(cache: Any, tally: Tally) -> None:
    """Wrap the cache's prefix lookup (an instance attribute shadowing the method): every
    matched token is KV the request reuses instead of computing it."""
    search = getattr(cache, "search_prefix_match", None)
    if search is None:
        return

    def counted(request_id: str, prompt_ids: list[int]) -> int:
        matched = int(search(request_id, prompt_ids))
        tally.add("prefix_cache_hit_tokens", matched)
        return matched

    cache.search_prefix_match = counted


class KVMixin:
    """engines.protocol.KVIntrospection for the adapter, by our request ids."""

    _kv: KVView
    _book: RequestBook
    _processor: Any
    # n > 1: the library's child ids -> (the request, the child's index, its sampling row)
    _children: dict[str, tuple[Live, int, Live]]

    @property
    def kv_block_size(self) -> int:
        return self._kv.block_size

    @property
    def kv_total_blocks(self) -> int:
        return self._kv.total_blocks

    def _extra_blocks(self) -> int:
        """Capabilities.kv_extra_blocks now: the view's own extra (KVView.extra_blocks), and one
        more while a request with children is in flight: the library (checked on 5.25.0)
        sizes a request's allocation for its whole remaining prompt before holding the last
        prompt token back for the fork (scheduler.py, _process_candidates then
        _schedule_request), so for the fork's step the request and each forked child (a copy)
        hold that token's block, not yet computed (measured: 2 blocks of 4 for 4 cached
        tokens of a 5-token prompt)."""
        return self._kv.extra_blocks + (1 if self._children else 0)

    def kv_free_blocks(self) -> int:
        return self._kv.free_blocks()

    def _kv_keys(self) -> dict[str, Hashable]:
        """Library request id -> the key the protocol lists it under: a request's id, or for
        a request with n > 1 each child's engines.protocol.child_key (child 0 the request
        itself, child i the library's `<id>__child#<i - 1>`)."""
        keys: dict[str, Hashable] = {}
        for live in self._book.live():
            rid = live.request.request_id
            keys[live.key] = child_key(rid, 0) if live.request.params.n > 1 else rid
        for library_key, (live, index, _) in self._children.items():
            if live.key in keys:
                keys[library_key] = child_key(live.request.request_id, index)
        return keys

    def kv_block_tables(self) -> Mapping[Hashable, Sequence[int]]:
        tables = self._kv.tables()
        return {ours: tables[key] for key, ours in self._kv_keys().items() if key in tables}

    def kv_cached_tokens(self) -> Mapping[Hashable, int]:
        tables = self._kv.tables()
        active = self._processor.scheduler.active_requests
        window = self._kv.window
        return {
            ours: (offset if window is None else min(offset, window))
            for key, ours in self._kv_keys().items()
            if key in tables and key in active
            for offset in (int(active[key].position_offset),)
        }
