"""Planted bugs at the edges the suite's second wave of checks reaches: finish order at the last
budgeted token, token ids past the vocabulary, service inside the batch, an introspection stub,
and a validation off by one. Plus RetireAtStart, a correct engine the suite must pass."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Any

from engines.protocol import FinishReason, Request, StepOutput
from examples.toy_engine import Seq, ToyEngine, _key


class StopLosesToBudget(ToyEngine):
    """Checks the budget before the stop ids, so a stop token that arrives as the last budgeted
    token finishes the request with LENGTH (the sglang #31599 / mistral.rs #1539 class).
    Exposed only when the stop id fires exactly at max_tokens."""

    caught_by = "budget_finish"

    def finish_reason(self, seq: Seq) -> FinishReason | None:
        if len(seq.generated) >= seq.request.params.max_tokens:
            return FinishReason.LENGTH
        if seq.generated[-1] in seq.request.params.stop_token_ids:
            return FinishReason.STOP
        return None


class PaddedVocabUnmasked(ToyEngine):
    """The output layer is padded by 8 rows to a friendlier size and the padded logits are
    never masked, so sampling can return ids vocab_size .. vocab_size+7. Batched and alone
    runs agree: only the token range check sees it."""

    caught_by = "token_range"

    def sample(self, slot: int) -> int:
        token = super().sample(slot)
        seq = self.slots[slot]
        kv = len(self.kv[slot])
        if seq is not None and kv % 5 == 0:  # now and then the top "logit" is a padded row
            return self.vocab_size + kv % 8
        return token


class OneRowPerStep(ToyEngine):
    """Admits every waiting request it has slots for, but decodes only one running row per
    step, round robin (a batched kernel someone replaced with a loop that breaks early).
    Tokens stay right and every request finishes; the others just wait their turn."""

    caught_by = "work_conservation"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.turn = 0

    def step(self) -> list[StepOutput]:
        outputs = self.retire_aborted()
        admitted = self.admit()
        running = [i for i, s in enumerate(self.slots) if s is not None and s.finish is None]
        chosen = {i for i in running if self.slots[i] in admitted}
        decoding = [i for i in running if i not in chosen]
        if decoding:
            chosen.add(decoding[self.turn % len(decoding)])
            self.turn += 1
        for slot in sorted(chosen):
            seq = self.slots[slot]
            assert seq is not None
            token = self.prefill(slot) if seq in admitted else self.decode(slot)
            seq.generated.append(token)
            seq.finish = self.finish_reason(seq)
            outputs.append(StepOutput(seq.rid, (token,), seq.finish, self.top(seq, token)))
        self.retire_finished()
        return outputs


class EmptySlotTable(ToyEngine):
    """slot_table() is a stub that returns an empty list (the introspection someone meant to
    finish later). Every old slot check passed on it."""

    caught_by = "compaction"

    def slot_table(self) -> Sequence[Hashable | None]:
        return []

    def slot_lengths(self) -> Sequence[int]:
        return []


class AcceptsOnePastContext(ToyEngine):
    """Validation compares prompt + max_tokens with max_model_len + 1 (an off-by-one in a
    `>` / `>=`), so a request one token past the context is accepted."""

    caught_by = "bad_input"

    def validate(self, r: Request) -> None:
        p = r.params
        if isinstance(p.max_tokens, int) and len(r.prompt_token_ids) + p.max_tokens == \
                self.max_model_len + 1:
            return  # slips through
        super().validate(r)


class ChunkBoundaryOffByOne(ToyEngine):
    """With `chunk` set, prompts are prefilled `chunk` tokens at a time, and the first token of
    every chunk after the first is cached one position too far. The default configuration
    (no chunking) is correct, and the chunked one agrees with itself batched and alone: only
    comparing the two configurations on one workload shows it."""

    caught_by = "variants"

    def __init__(self, chunk: int = 0, **kw: int) -> None:
        super().__init__(**kw)
        self.chunk = chunk

    def prefill(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        if not self.chunk:
            return super().prefill(slot)
        self.kv[slot] = [_key(t, pos + (pos > 0 and pos % self.chunk == 0))
                         for pos, t in enumerate(seq.request.prompt_token_ids)]
        return self.sample(slot)


chunked4 = functools.partial(ChunkBoundaryOffByOne, chunk=4)  # --engine-variant chunk4=...
ChunkBoundaryOffByOne.variants = {"chunk4": chunked4}  # type: ignore[attr-defined]


class RetireAtStart(ToyEngine):
    """A CORRECT engine, the suite's control: it retires finished requests at the start of
    the next step (as the llmserve book's engine does), so a finished request holds its slot
    and has_work() stays True until that step returns. The suite must pass it."""

    caught_by = None

    def has_work(self) -> bool:
        return bool(self.live) or any(s is not None for s in self.slots)

    def step(self) -> list[StepOutput]:
        ToyEngine.retire_finished(self)  # the last step's finished requests leave now
        return super().step()

    def retire_finished(self) -> None:
        pass  # not at the end of a step: at the start of the next


EDGE_PLANTED: list[Any] = [
    StopLosesToBudget,
    PaddedVocabUnmasked,
    OneRowPerStep,
    EmptySlotTable,
    AcceptsOnePastContext,
    ChunkBoundaryOffByOne,
]
CONTROLS: list[Any] = [RetireAtStart]

