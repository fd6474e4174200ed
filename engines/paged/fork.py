"""n > 1 on the paged engine: the prompt is prefilled once per family and the children share
its blocks copy-on-write. A mixin over PagedEngine's queue, running list, pool and forward.

A request's first child is queued alone; its siblings are held aside. When the first child's
prefill completes (its first token is sampled), every held sibling that finds a seat takes the
first child's block table (one more reference on each block), its computed-token count, its
prefix keys and its prompt logprobs, and samples its own first token from the same logits with
its own generator (engines.core.children: seeds s + i). Siblings that find no seat go to the
queue's front and prefill on their own (their full blocks are prefix-cache hits by then).

Copy-on-write: a full shared block is never written again (the tokens after it go into new
blocks). A partially filled shared block, the prompt's last one, is: before a child writes its
next token into it, the child takes a fresh block, copies the shared block's KV into it (the
draft model's pool too, when speculating) and drops its reference on the shared one. So a
block in two children's tables holds the same tokens at every position either has cached.

KV introspection lists each child of a family under engines.protocol.child_key(id, index).

Not while speculating: there every child prefills itself (full blocks still shared through
the prefix cache), so that the verification steps need no fork of their own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

import torch

from engines.paged.blocks import BlockPool
from engines.paged.drafters import DraftModelDrafter
from engines.paged.forward import PagedForward
from engines.paged.state import PagedRequest


class PagedForks:
    running: list[PagedRequest]
    waiting: deque[PagedRequest]
    pool: BlockPool
    runner: PagedForward
    drafter: Any
    kv_block_size: int
    max_batch_size: int
    free_seats: list[int]
    _aborts: int
    _seat: Callable[[PagedRequest], None]  # engines.paged.schedule

    def _init_forks(self) -> None:
        # Siblings waiting for their first child's prefill, by request id.
        self._held: dict[Hashable, list[PagedRequest]] = {}
        self.forked_prefills = 0  # children that started from a sibling's prefill, ever
        self.cow_copies = 0  # shared partial blocks copied before a write, ever

    def _hold_siblings(self, family: list[PagedRequest]) -> None:
        """After add_request queued a family: keep all but its first child aside."""
        for seq in family:
            seq.family = len(family)
        if len(family) < 2 or self.drafter is not None:
            return
        for seq in family[1:]:
            self.waiting.remove(seq)
        self._held[family[0].request.request_id] = family[1:]

    def _release_held_aborts(self) -> None:
        """Held siblings of an aborted request go back to the queue, where the abort finds
        them (an abort marks every child of the request)."""
        if not self._aborts:
            return
        for rid, held in list(self._held.items()):
            gone = [seq for seq in held if seq.abort_pending]
            if gone:
                self.waiting.extend(gone)
                self._held[rid] = [seq for seq in held if not seq.abort_pending]
                if not self._held[rid]:
                    del self._held[rid]

    def _fork(self, ready: list[PagedRequest], logits: torch.Tensor
              ) -> tuple[list[PagedRequest], torch.Tensor]:
        """Fork the held siblings of every first child whose prefill just completed: they join
        `ready` (after it) with a copy of its logits row."""
        if not self._held:
            return ready, logits
        rows = list(range(len(ready)))
        out = list(ready)
        for at, seq in enumerate(ready):
            held = self._held.pop(seq.request.request_id, None) if not seq.output else None
            if not held:
                continue
            for sib in held:
                if len(self.running) >= self.max_batch_size or not self.free_seats:
                    break
                held = held[1:]
                self.pool.hold(seq.blocks)
                sib.blocks = list(seq.blocks)
                sib.num_computed, sib.num_registered = seq.num_computed, seq.num_registered
                sib.keys = list(seq.keys)
                sib.prompt_logprobs = list(seq.prompt_logprobs)
                sib.chunked = seq.chunked
                self.running.append(sib)
                self._seat(sib)
                self.forked_prefills += 1
                out.append(sib)
                rows.append(at)
            self.waiting.extendleft(reversed(held))  # no seat: they prefill on their own
        if len(out) == len(ready):
            return ready, logits
        return out, logits[rows]

    def _private_tail(self, seq: PagedRequest) -> int:
        """Blocks seq needs to own the partial block it writes next: 1 if that block is
        shared (copy-on-write), else 0."""
        j, partial = divmod(seq.num_computed, self.kv_block_size)
        if not partial or j >= len(seq.blocks):
            return 0
        return int(self.pool.ref_counts[seq.blocks[j]] > 1)

    def _copy_tail(self, seq: PagedRequest) -> None:
        """Copy-on-write: seq's shared partial block becomes a private copy."""
        j = seq.num_computed // self.kv_block_size
        old = seq.blocks[j]
        (new,) = self.pool.allocate(1)
        runners = [self.runner]
        if isinstance(self.drafter, DraftModelDrafter):  # its pool is indexed by our ids
            runners.append(self.drafter.runner)
        for runner in runners:
            for keys, values in runner.kv:
                keys[new].copy_(keys[old])
                values[new].copy_(values[old])
        self.pool.free([old])
        seq.blocks[j] = new
        self.cow_copies += 1
