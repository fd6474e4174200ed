"""A toy continuous-batching engine of its own that speaks engines.protocol and passes the
conformance suite: run it with

    pytest --pyargs engines.testing.conformance --engine examples.toy_engine:ToyEngine

Its "model" is a hash: the next token is a hash of every (token, position) key the slot has
cached. So any batching bug that corrupts the cache (stale keys after slot reuse, a wrong
position, rows swapped during compaction) changes the tokens, as it would in a real model.

The scheduler is the textbook one: at the start of a step retire aborted requests and admit
waiting ones FCFS into free slots (a prefill, whose first token comes out in that step);
decode every other running request; at the end retire finished ones, moving the last row
into each freed slot so occupied slots stay a prefix.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from engines.protocol import Capabilities, FinishReason, InvalidRequest, Request, StepOutput

_MASK = (1 << 61) - 1


def _key(token: int, position: int) -> int:
    return (token * 0x9E3779B1 + position * 0x85EBCA77 + 1) & _MASK


@dataclass(eq=False)
class Seq:
    request: Request
    generated: list[int] = field(default_factory=list)
    rng: random.Random | None = None
    aborted: bool = False
    finish: FinishReason | None = None

    @property
    def rid(self) -> Hashable:
        return self.request.request_id


class ToyEngine:
    def capabilities(self) -> Capabilities:
        """What it supports beyond the base protocol: nothing, every field at its default. An
        engine that knowingly breaks a check would say `Capabilities(expected_failed_checks=
        {"zero_waste": "static batching computes finished rows"})`."""
        return Capabilities()

    def __init__(self, max_batch_size: int = 4, vocab_size: int = 512, max_model_len: int = 96):
        self.max_batch_size = max_batch_size
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.wasted_slot_steps = 0
        self.waiting: deque[Seq] = deque()
        self.slots: list[Seq | None] = [None] * max_batch_size
        self.kv: list[list[int]] = [[] for _ in range(max_batch_size)]  # cached keys per slot
        self.live: dict[Hashable, Seq] = {}  # every added, unfinished request

    # -- protocol -----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        self.validate(request)
        seq = Seq(request)
        if request.params.temperature > 0:
            seq.rng = random.Random(request.params.seed)
        self.live[request.request_id] = seq
        self.waiting.append(seq)

    def abort_request(self, request_id: Hashable) -> None:
        if request_id in self.live:  # unknown or finished: no-op
            self.live[request_id].aborted = True

    def has_work(self) -> bool:
        return bool(self.live)

    def slot_table(self) -> Sequence[Hashable | None]:
        return [None if s is None else s.rid for s in self.slots]

    def slot_lengths(self) -> Sequence[int]:
        return [0 if s is None else len(kv) for s, kv in zip(self.slots, self.kv, strict=True)]

    def step(self) -> list[StepOutput]:
        outputs = self.retire_aborted()
        admitted = self.admit()
        for slot, seq in enumerate(self.slots):
            if seq is None or seq.finish is not None:
                continue
            token = self.prefill(slot) if seq in admitted else self.decode(slot)
            seq.generated.append(token)
            seq.finish = self.finish_reason(seq)
            outputs.append(StepOutput(seq.rid, (token,), seq.finish, self.top(seq, token)))
        self.retire_finished()
        return outputs

    # -- scheduling ---------------------------------------------------------------------------
    def occupied(self) -> int:
        return sum(s is not None for s in self.slots)

    def retire_aborted(self) -> list[StepOutput]:
        out = []
        for seq in [s for s in self.waiting if s.aborted]:
            self.waiting.remove(seq)
            out.append(self.finish_now(seq))
        for slot in reversed(range(self.max_batch_size)):
            running = self.slots[slot]
            if running is not None and running.aborted:
                self.free_slot(slot)
                out.append(self.finish_now(running))
        return out

    def finish_now(self, seq: Seq) -> StepOutput:
        del self.live[seq.rid]
        return StepOutput(seq.rid, (), FinishReason.ABORT)

    def admit(self) -> list[Seq]:
        admitted = []
        while self.waiting and self.occupied() < self.max_batch_size:
            seq = self.waiting.popleft()
            self.slots[self.occupied()] = seq
            admitted.append(seq)
        return admitted

    def retire_finished(self) -> None:
        # Highest slot first, so the row moving into a freed slot is never a finished one.
        for slot in reversed(range(self.max_batch_size)):
            seq = self.slots[slot]
            if seq is not None and seq.finish is not None:
                del self.live[seq.rid]
                self.free_slot(slot)

    def free_slot(self, slot: int) -> None:
        last = self.occupied() - 1  # compaction: the last row (and its KV) moves into the hole
        self.slots[slot], self.kv[slot] = self.slots[last], self.kv[last]
        self.slots[last], self.kv[last] = None, []

    def finish_reason(self, seq: Seq) -> FinishReason | None:
        if seq.generated[-1] in seq.request.params.stop_token_ids:
            return FinishReason.STOP
        if len(seq.generated) >= seq.request.params.max_tokens:
            return FinishReason.LENGTH
        return None

    # -- the "model" --------------------------------------------------------------------------
    def prefill(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        self.kv[slot] = [_key(t, pos) for pos, t in enumerate(seq.request.prompt_token_ids)]
        return self.sample(slot)

    def decode(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        position = len(seq.request.prompt_token_ids) + len(seq.generated) - 1
        self.kv[slot].append(_key(seq.generated[-1], position))
        return self.sample(slot)

    def sample(self, slot: int) -> int:
        h = 0
        for k in self.kv[slot]:
            h = (h * 1_000_003 + k) & _MASK
        h ^= h >> 29
        seq = self.slots[slot]
        if seq is not None and seq.rng is not None:  # seeded: the request's own RNG
            h += seq.rng.randrange(self.vocab_size)
        return h % self.vocab_size

    def top(self, seq: Seq, token: int) -> tuple[Mapping[int, float], ...] | None:
        n = seq.request.params.logprobs
        if not n:
            return None
        return ({(token + j) % self.vocab_size: -0.5 - j for j in range(n)},)

    # -- input checks -------------------------------------------------------------------------
    def validate(self, r: Request) -> None:
        def token_ok(t: object) -> bool:
            return isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab_size

        p = r.params
        if r.request_id in self.live:
            raise InvalidRequest(f"request_id: {r.request_id!r} is already in flight")
        if not r.prompt_token_ids or not all(token_ok(t) for t in r.prompt_token_ids):
            raise InvalidRequest(f"prompt_token_ids: bad prompt {r.prompt_token_ids!r}")
        if not isinstance(p.max_tokens, int) or p.max_tokens < 1:
            raise InvalidRequest(f"max_tokens: must be >= 1, got {p.max_tokens!r}")
        if len(r.prompt_token_ids) + p.max_tokens > self.max_model_len:
            raise InvalidRequest(f"max_tokens: {p.max_tokens} does not fit max_model_len")
        if not all(token_ok(t) for t in p.stop_token_ids):
            raise InvalidRequest(f"stop_token_ids: bad ids {p.stop_token_ids!r}")
        if not p.temperature >= 0:
            raise InvalidRequest(f"temperature: must be >= 0, got {p.temperature!r}")


def one_slot() -> ToyEngine:
    """A config variant: the same engine with one slot. Every request must get the same
    tokens on it (`--engine-variant one_slot=examples.toy_engine:one_slot`)."""
    return ToyEngine(max_batch_size=1)
