"""Beam search (beam_width > 1) on the paged engine: a request's search runs as a group of
rows in the batch, one per running beam, whose block tables fork copy-on-write. A mixin over
PagedEngine's queue, running list, pool, seats and schedule.

The search itself is engines.core.beams.BeamSearch (the sequential engine's): this module
only keeps its beams' KV. Row i of a group always holds the search's beam i (its tokens are
the row's `output`); row 0 is the request's child 0, which is queued, prefilled and, at the
end, finished like any request (its siblings, children 1..n-1, are held aside and finished
with it: a search returns its n best beams at once).

- Unit of scheduling. A search advances only with the next-token logits of every running
  beam, so a group is scheduled as a whole: its rows decode in the same step or none does
  (PagedSchedule._whole_groups), preemption takes every row of the group
  (PagedSchedule._victims) and admission takes every row or none (_admit_group). A group
  holds beam_width seats from admission on, so its rows can always grow back to the width.
  Rows that are being recomputed after a preemption may reach their last token in different
  steps (chunked under the budget): each row's logits are kept until the last one's arrive,
  then the search advances once.
- Re-parenting. When the search advances, new beam i extends old beam p = parents[i]: row i
  drops its block table and takes a copy of row p's (one more hold on each block, as an
  n > 1 child takes its sibling's, engines.paged.fork), with row p's computed count and
  prefix keys; the shared partial last block is copied before the row writes into it
  (PagedForks._copy_tail). Every new table is held before any old one is freed, so a block
  that stays in some beam's table never passes through the free list.
- Ending. When the search is done, children 0..n-1 get the n best hypotheses
  (RequestState.finish_beam) and every row gives its blocks and seats back.

KV introspection lists row i of a group under engines.protocol.child_key(request id, i):
rows may share a partial block copy-on-write, like children of n > 1; their tokens are not
in any output until the search ends.

Needs beam_width <= max_batch_size (a group's seats) and a pool in which beam_width copies
of the request's longest table fit (PagedBeams._check_beams): alone in the engine, a group
then always runs, whatever it shares.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F

from engines.core.beams import BeamSearch
from engines.core.request_state import RequestState
from engines.paged.blocks import BlockPool
from engines.paged.state import BeamGroup, PagedRequest
from engines.protocol import InvalidRequest, Request, StepOutput, child_key

__all__ = ["PagedBeams"]


class PagedBeams:
    running: list[PagedRequest]
    waiting: deque[PagedRequest]
    pool: BlockPool
    free_seats: list[int]
    max_batch_size: int
    kv_total_blocks: int
    _aborts: int
    _seat: Callable[[PagedRequest], None]  # engines.paged.schedule
    _unseat: Callable[[PagedRequest], None]
    _release_blocks: Callable[[PagedRequest], None]
    _blocks_for: Callable[[int], int]
    _cached_prefix: Callable[[PagedRequest], list[int]]
    kv_block_size: int
    first_hits: dict[Hashable, int | None]  # engines.paged.schedule
    _finish: Callable[[RequestState], None]  # engines.core.engine

    beam_search = BeamSearch  # the search's rule (engines.core.beams)

    def _init_beams(self) -> None:
        self._groups: list[BeamGroup] = []
        self.beam_steps = 0  # searches advanced, ever (one per group per step)
        self.beam_reparents = 0  # rows that took another beam's block table, ever
        self.beam_group_preemptions = 0  # groups sent back to the queue whole, ever

    def _check_beams(self, request: Request) -> None:
        """InvalidRequest for a search that could never run here."""
        width = request.params.beam_width
        if width <= 1:
            return
        if width > self.max_batch_size:
            raise InvalidRequest(f"beam_width: {width} beams run as one group of rows; the "
                                 f"engine has {self.max_batch_size} seats (max_batch_size)")
        tokens = len(request.prompt_token_ids) + request.params.max_tokens - 1
        need = width * self._blocks_for(tokens)
        if need > self.kv_total_blocks:
            raise InvalidRequest(f"max_tokens: {width} beams of prompt length "
                                 f"{len(request.prompt_token_ids)} + max_tokens "
                                 f"{request.params.max_tokens} may need {need} KV blocks; "
                                 f"the pool has {self.kv_total_blocks} (num_blocks)")

    def _hold_beams(self, family: list[PagedRequest]) -> bool:
        """After add_request queued a beam search's children: only child 0 stays queued
        (its prefill is the search's first row). False if the request is no search."""
        first = family[0]
        if first.request.params.beam_width <= 1:
            return False
        for seq in family:
            seq.family = len(family)
        for seq in family[1:]:
            self.waiting.remove(seq)
        group = BeamGroup(self.beam_search(first.request.params), list(family), [first])
        first.group = group
        self._groups.append(group)
        return True

    @staticmethod
    def _row_key(seq: PagedRequest) -> Hashable | None:
        """KV introspection's key of a beam row (None for any other request)."""
        if seq.group is None:
            return None
        return child_key(seq.request.request_id, seq.group.rows.index(seq))

    # --- seats ----------------------------------------------------------------------------------

    def _reserved_seats(self) -> int:
        """Seats that running groups hold for rows they may grow (not free to others)."""
        return sum(len(g.spare) for g in self._groups)

    def _take_seats(self, group: BeamGroup) -> None:
        """Seats for an admitted group's rows, and its spares up to the width."""
        for row in group.rows:
            self._seat(row)
        while len(group.rows) + len(group.spare) < group.search.params.beam_width:
            group.spare.append(self.free_seats.pop(0))

    def _give_spare(self, group: BeamGroup) -> None:
        for seat in group.spare:
            bisect.insort(self.free_seats, seat)
        group.spare.clear()

    # --- admission, preemption (PagedSchedule's hooks) ------------------------------------------

    def _group_fits(self, group: BeamGroup) -> bool:
        """Whether the batch has seats for the whole group (beam_width of them)."""
        width = group.search.params.beam_width
        return (len(self.free_seats) >= width
                and len(self.running) + self._reserved_seats() + width <= self.max_batch_size)

    def _admit_group(self, group: BeamGroup, plan: dict[PagedRequest, int], budget: int,
                     fewer_than: int | None) -> bool:
        """Admit every row of a queued group (its first chunks within the budget, the blocks
        they need, beam_width seats), or none: False then, and the queue waits."""
        if not self._group_fits(group):
            return False
        room = budget - sum(plan.values())
        chunks = []
        fresh, revived = 0, set()
        for k, row in enumerate(group.rows):
            hits = self._cached_prefix(row)
            computed = len(hits) * self.kv_block_size
            left = row.num_tokens - computed
            if fewer_than is not None and left >= fewer_than:
                return False
            # At least a token for each row after this one: a row given none could not be
            # admitted, and a budget smaller than one row's tokens would admit none ever.
            n = min(left, room - (len(group.rows) - 1 - k))
            if n <= 0:
                return False
            room -= n
            fresh += self._blocks_for(computed + n) - len(hits)
            revived |= {b for b in hits if self.pool.ref_counts[b] == 0}  # stop being free
            chunks.append((row, hits, computed, n))
        if not self.pool.can_allocate(fresh + len(revived)):
            return False
        for _row, hits, _, _ in chunks:  # every row's hits taken before any allocation,
            self.pool.share(hits)  # which could otherwise evict a later row's cached hit
        for row, hits, computed, n in chunks:
            self.waiting.remove(row)
            row.blocks = hits + self.pool.allocate(self._blocks_for(computed + n) - len(hits))
            row.num_computed, row.num_registered = computed, len(hits)
            self.first_hits.setdefault(row.request.request_id, computed)  # counted once
            self.running.append(row)
            plan[row] = n
        self._take_seats(group)
        return True

    def _victims(self, seq: PagedRequest) -> list[PagedRequest]:
        """What preempting seq takes: seq, or every row of its group (the search cannot
        advance with a beam missing). The group's spare seats and kept logits go too."""
        group = seq.group
        if group is None:
            return [seq]
        self._give_spare(group)
        group.logprobs.clear()
        self.beam_group_preemptions += 1
        return list(reversed(group.rows))  # each goes to the queue's front: row 0 ends first

    def _whole_groups(self, plan: dict[PagedRequest, int]) -> None:
        """A group whose rows decode decodes all of them in this step, or none."""
        for group in self._groups:
            decoding = [row for row in group.rows
                        if row in self.running and row.num_pending == 1]
            if any(row not in plan for row in decoding):
                for row in decoding:
                    plan.pop(row, None)

    # --- the search -----------------------------------------------------------------------------

    def _beam_ready(self, ready: list[PagedRequest], logits: torch.Tensor,
                    outputs: list[StepOutput]) -> tuple[list[PagedRequest], torch.Tensor]:
        """Take the beam rows out of this step's ready rows: keep each one's logprobs, and
        advance every group whose rows all have theirs. The other rows and their logits
        are returned, to be sampled."""
        if not self._groups:
            return ready, logits
        keep: list[int] = []
        touched: list[BeamGroup] = []
        for at, seq in enumerate(ready):
            group = seq.group
            if group is None:
                keep.append(at)
                continue
            group.logprobs[seq] = F.log_softmax(logits[at].float(), dim=-1)
            if group not in touched:
                touched.append(group)
        for group in touched:
            if all(row in group.logprobs for row in group.rows):
                self._advance_group(group, outputs)
        if len(keep) == len(ready):
            return ready, logits
        return [ready[at] for at in keep], logits[keep]

    def _advance_group(self, group: BeamGroup, outputs: list[StepOutput]) -> None:
        stacked = torch.stack([group.logprobs.pop(row) for row in group.rows])
        parents = group.search.advance(stacked)
        self.beam_steps += 1
        if group.search.done:
            self._end_group(group, outputs)
        else:
            self._reparent(group, parents)

    def _table_of(self, row: PagedRequest | None, parent: PagedRequest) -> PagedRequest:
        """Whose table a row takes on re-parenting: its parent's (a row's own old table
        holds another beam's KV whenever the parent is another row)."""
        return parent

    def _reparent(self, group: BeamGroup, parents: list[int]) -> None:
        """Row i becomes new beam i, extending old row parents[i]: it takes that row's block
        table (held once more), computed count and prefix keys. New tables are held before
        the old ones are freed; rows beyond the new width give their seats to the spares,
        rows the width grows to take spare seats."""
        old = list(group.rows)
        leader = old[0]
        sources = [self._table_of(old[i] if i < len(old) else None, old[p])
                   for i, p in enumerate(parents)]
        states = [(list(s.blocks), s.num_computed, s.num_registered, list(s.keys),
                   s.draft_computed) for s in sources]
        for blocks, *_ in states:
            self.pool.hold(blocks)
        for row in old:
            self.pool.free(row.blocks)
            row.blocks = []
        for row in old[len(parents):]:  # the width shrank: these rows end
            self.running.remove(row)
            seat = row.seat
            row.seat = -1
            group.spare.append(seat)
            row.group = None
        rows = old[: len(parents)]
        while len(rows) < len(parents):  # the width grew: new rows, on spare seats
            row = PagedRequest(leader.request, None)
            row.root, row.lora_slot, row.family = leader.root, leader.lora_slot, leader.family
            row.chunked, row.group = leader.chunked, group
            row.seat = group.spare.pop(0)
            self.running.append(row)
            rows.append(row)
        for i, (row, state, beam) in enumerate(zip(rows, states, group.search.beams,
                                                   strict=True)):
            if i >= len(old) or sources[i] is not row:
                self.beam_reparents += 1
            (row.blocks, row.num_computed, row.num_registered, row.keys,
             row.draft_computed) = state
            row.output = list(beam)
        group.rows = rows

    def _end_group(self, group: BeamGroup, outputs: list[StepOutput]) -> None:
        """The search is done: children 0..n-1 get the n best beams; every row leaves."""
        for child, best in zip(group.children, group.search.results(), strict=True):
            outputs.append(child.finish_beam(best.tokens, best.finish_reason))
            self._finish(child)
        self._drop_group(group)

    def _drop_group(self, group: BeamGroup, keep: PagedRequest | None = None) -> None:
        """Every row (but `keep`) out of the batch or the queue, its blocks and seat given
        back; the spare seats too."""
        for row in group.rows:
            if row is keep:
                continue
            if row in self.running:
                self.running.remove(row)
                self._unseat(row)
                self._release_blocks(row)
            elif row in self.waiting:
                self.waiting.remove(row)
            row.group = None
        self._give_spare(group)
        group.logprobs.clear()
        self._groups.remove(group)

    def _release_beam_aborts(self) -> None:
        """An aborted search: child 0 is retired by the abort path like any request (row 0
        is child 0); the other rows leave now, and the held children go to the queue, where
        the abort finds them."""
        if not self._aborts:
            return
        for group in [g for g in self._groups if g.children[0].abort_pending]:
            leader = group.rows[0]
            self._drop_group(group, keep=leader)
            leader.group = None
            self.waiting.extend(group.children[1:])
