"""Planted bugs: the example ToyEngine with one method overridden, each a mistake real
batching engines make, and each visible only under some request mixes or arrival orders.

`caught_by` names the property that must catch the bug.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Any

from engines.protocol import FinishReason, Request, StepOutput
from examples.toy_engine import Seq, ToyEngine, _key


class CompactionLeavesKV(ToyEngine):
    """Compaction moves the last request into the freed slot but not its KV cache.
    Exposed only when a request finishes while a later slot is still running."""

    caught_by = "parity"

    def free_slot(self, slot: int) -> None:
        last = self.occupied() - 1
        self.slots[slot], self.slots[last] = self.slots[last], None


class CompactionHole(ToyEngine):
    """Retiring frees the slot in place and never compacts: a hole opens in the table.
    Exposed only when a request finishes while a later slot is still running."""

    caught_by = "compaction"

    def free_slot(self, slot: int) -> None:
        self.slots[slot], self.kv[slot] = None, []

    def admit(self) -> list[Seq]:
        admitted = []
        while self.waiting and None in self.slots:
            seq = self.waiting.popleft()
            self.slots[self.slots.index(None)] = seq
            admitted.append(seq)
        return admitted

    def occupied(self) -> int:
        return max((i + 1 for i, s in enumerate(self.slots) if s is not None), default=0)


class StaleKVOnReuse(ToyEngine):
    """Prefill appends to the slot's cache instead of resetting it, and retiring does not clear
    it. Exposed only when a slot is reused (more requests than slots, or a later arrival)."""

    caught_by = "parity"

    def free_slot(self, slot: int) -> None:
        last = self.occupied() - 1
        self.slots[slot], self.kv[slot] = self.slots[last], self.kv[last]
        self.slots[last] = None  # the KV of slot `last` stays behind

    def prefill(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        self.kv[slot] += [_key(t, pos) for pos, t in enumerate(seq.request.prompt_token_ids)]
        return self.sample(slot)


class PaddedPositions(ToyEngine):
    """Decode uses one position for the whole batch (the longest row's), as a padded batch
    would. Exposed only when rows of different lengths decode together."""

    caught_by = "parity"

    def decode(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        position = max(
            len(s.request.prompt_token_ids) + len(s.generated) - 1
            for s in self.slots if s is not None and s.generated
        )
        self.kv[slot].append(_key(seq.generated[-1], position))
        return self.sample(slot)


class StopOnlyFirstId(ToyEngine):
    """Checks only the first stop id. Exposed only when a request has several stop ids and
    a later one fires."""

    caught_by = "budget_finish"

    def finish_reason(self, seq: Seq) -> FinishReason | None:
        stops = seq.request.params.stop_token_ids
        if stops and seq.generated[-1] == stops[0]:
            return FinishReason.STOP
        if len(seq.generated) >= seq.request.params.max_tokens:
            return FinishReason.LENGTH
        return None


class StopIgnoredAtPrefill(ToyEngine):
    """The first token (sampled by the prefill) is never checked against the stop ids.
    Exposed only when a request's stop id is its first generated token."""

    caught_by = "budget_finish"

    def finish_reason(self, seq: Seq) -> FinishReason | None:
        if len(seq.generated) > 1 and seq.generated[-1] in seq.request.params.stop_token_ids:
            return FinishReason.STOP
        if len(seq.generated) >= seq.request.params.max_tokens:
            return FinishReason.LENGTH
        return None


class BudgetPerSlot(ToyEngine):
    """Counts generated tokens per slot instead of per request, and compaction does not move
    the counter. Exposed only when a running request is moved into a freed slot."""

    caught_by = "budget_finish"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.counts = [0] * self.max_batch_size

    def step(self) -> list[StepOutput]:
        for slot, seq in enumerate(self.slots):
            if seq is not None and not seq.generated:
                self.counts[slot] = 0
        return super().step()

    def finish_reason(self, seq: Seq) -> FinishReason | None:
        slot = self.slots.index(seq)
        self.counts[slot] += 1
        if seq.generated[-1] in seq.request.params.stop_token_ids:
            return FinishReason.STOP
        if self.counts[slot] >= seq.request.params.max_tokens:
            return FinishReason.LENGTH
        return None


class HasWorkStale(ToyEngine):
    """has_work() reads a flag refreshed only at the end of step(), so a request added to an
    engine that has drained is invisible until someone steps anyway."""

    caught_by = "liveness"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.busy = True

    def step(self) -> list[StepOutput]:
        out = super().step()
        self.busy = bool(self.live)
        return out

    def has_work(self) -> bool:
        return self.busy


class AbortAfterFinishEmits(ToyEngine):
    """abort_request queues any id it is given; the next step emits an ABORT output for it
    even when the request already finished (or never existed)."""

    caught_by = "budget_finish"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.pending: list[Hashable] = []

    def abort_request(self, request_id: Hashable) -> None:
        if request_id in self.live:
            self.live[request_id].aborted = True
        else:
            self.pending.append(request_id)

    def retire_aborted(self) -> list[StepOutput]:
        out = [StepOutput(rid, (), FinishReason.ABORT) for rid in self.pending]
        self.pending.clear()
        return out + super().retire_aborted()


class RefusalLeavesEntry(ToyEngine):
    """Registers the request before checking its prompt: a refused request stays in the
    live table, so has_work() never turns False again."""

    caught_by = "bad_input"

    def add_request(self, request: Request) -> None:
        if request.request_id not in self.live:
            self.live[request.request_id] = Seq(request)
            if not request.prompt_token_ids or any(
                not isinstance(t, int) or not 0 <= t < self.vocab_size
                for t in request.prompt_token_ids
            ):
                raise ValueError(f"prompt_token_ids: bad prompt {request.prompt_token_ids!r}")
            del self.live[request.request_id]
        super().add_request(request)


class AbortLeaksSlot(ToyEngine):
    """Aborting a running request emits its ABORT output but never frees its slot.
    Exposed only when an abort hits a request that is already running."""

    caught_by = "zero_waste"

    def retire_aborted(self) -> list[StepOutput]:
        out = []
        for seq in [s for s in self.waiting if s.aborted]:
            self.waiting.remove(seq)
            out.append(self.finish_now(seq))
        for running in self.slots:
            if running is not None and running.aborted and running.rid in self.live:
                running.finish = FinishReason.ABORT  # skipped by decode, never retired
                out.append(self.finish_now(running))
        return out

    def retire_finished(self) -> None:
        for slot in reversed(range(self.max_batch_size)):
            seq = self.slots[slot]
            if seq is not None and seq.finish not in (None, FinishReason.ABORT):
                del self.live[seq.rid]
                self.free_slot(slot)


class PrefillBudgetDrops(ToyEngine):
    """Admission caps the prompt tokens prefilled per step, but a request over the cap is
    dropped instead of put back: lost from the queue. Exposed only when a long prompt is
    admitted in the same step as others."""

    caught_by = "liveness"
    PREFILL_BUDGET = 24

    def admit(self) -> list[Seq]:
        admitted: list[Seq] = []
        budget = self.PREFILL_BUDGET
        while self.waiting and self.occupied() < self.max_batch_size:
            seq = self.waiting.popleft()
            n = len(seq.request.prompt_token_ids)
            if admitted and n > budget:
                continue  # meant to wait for the next step; it is gone
            budget -= n
            self.slots[self.occupied()] = seq
            admitted.append(seq)
        return admitted


class SharedSamplerRng(ToyEngine):
    """Seeded sampling draws from one engine-wide RNG, reseeded by each admitted request.
    Exposed only when two sampled requests are in flight together."""

    caught_by = "parity"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.rng = random.Random(0)

    def admit(self) -> list[Seq]:
        admitted = super().admit()
        for seq in admitted:
            if seq.rng is not None:
                self.rng.seed(seq.request.params.seed)
                seq.rng = self.rng
        return admitted


class OneAdmissionPerStep(ToyEngine):
    """Admits at most one waiting request per step (to bound prefill latency), leaving slots
    idle while requests wait. Exposed only when two requests wait at once."""

    caught_by = "work_conservation"

    def admit(self) -> list[Seq]:
        if self.waiting and self.occupied() < self.max_batch_size:
            seq = self.waiting.popleft()
            self.slots[self.occupied()] = seq
            return [seq]
        return []


class LengthsNotMoved(ToyEngine):
    """slot_lengths() reads a per-slot counter that compaction forgets to move.
    Exposed only when a running request is moved into a freed slot."""

    caught_by = "slot_lengths"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.lengths = [0] * self.max_batch_size

    def sample(self, slot: int) -> int:
        self.lengths[slot] = len(self.kv[slot])
        return super().sample(slot)

    def slot_lengths(self) -> Sequence[int]:
        return [0 if s is None else n for s, n in zip(self.slots, self.lengths, strict=True)]


# Any: each class adds `caught_by`, which ToyEngine itself lacks.
class LeaksBlockPerRequest(ToyEngine):
    """Each admitted request takes one of 12 KV blocks, and the block goes back to the free
    list only on abort (the path someone tested), never on a normal finish. A workload of
    the liveness check has at most 9 requests (a burst on this 4-slot engine), so this shows
    only on an engine that served earlier workloads: it reports itself idle, and then admits
    nothing."""

    caught_by = "liveness"
    BLOCKS = 12

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.free_blocks = self.BLOCKS

    def admit(self) -> list[Seq]:
        admitted = []
        while self.waiting and self.occupied() < self.max_batch_size and self.free_blocks:
            seq = self.waiting.popleft()
            self.free_blocks -= 1
            self.slots[self.occupied()] = seq
            admitted.append(seq)
        return admitted

    def finish_now(self, seq: Seq) -> StepOutput:
        if seq.generated:  # an aborted request that held a block gives it back
            self.free_blocks += 1
        return super().finish_now(seq)


PLANTED: list[Any] = [
    CompactionLeavesKV,
    CompactionHole,
    StaleKVOnReuse,
    PaddedPositions,
    StopOnlyFirstId,
    StopIgnoredAtPrefill,
    BudgetPerSlot,
    HasWorkStale,
    AbortAfterFinishEmits,
    RefusalLeavesEntry,
    AbortLeaksSlot,
    PrefillBudgetDrops,
    SharedSamplerRng,
    OneAdmissionPerStep,
    LengthsNotMoved,
    LeaksBlockPerRequest,
]
