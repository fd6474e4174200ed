"""Planted bugs in the reference ContinuousBatchEngine's model path and sampler: the kinds that
corrupt a request served alone just as much as one served in a batch, so self-parity passes
and only the second-wave oracles (prefill/decode consistency, a reference engine, the `seeds`
check) can see them."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from engines.core.sampling import make_generator
from engines.protocol import StepOutput
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine


class DecodePositionOffByOne(ContinuousBatchEngine):
    """The decode-only path rotates the new token's query and key one position too far (RoPE
    at length + 1): prefill is right, every pure decode step is off. Alone runs are as wrong
    as batched ones, so parity cannot see it; prefilling what was decoded can."""

    caught_by = "prefill_decode"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        runner, rotary = self.runner, self.runner.rotary
        decode = runner.decode

        def shifted(x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return rotary(x, pos + 1)  # type: ignore[no-any-return]

        def off_by_one(tokens: torch.Tensor, cache: Any) -> torch.Tensor:
            runner.rotary = shifted  # type: ignore[assignment]
            try:
                return decode(tokens, cache)
            finally:
                runner.rotary = rotary

        runner.decode = off_by_one  # type: ignore[method-assign]


class DropsQKVBias(ContinuousBatchEngine):
    """A model port that loads Qwen2's q/k/v projections without their biases (a Llama port
    reused for Qwen2, which has them). Prefill and decode agree, batched and alone agree:
    only a reference engine over the same weights sees that every token is wrong."""

    caught_by = "reference_parity"
    reference = SequentialEngine  # the harness gives the suite this reference

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        # Copies: the fused layers are shared by every engine over this model.
        self.runner.layers = [dataclasses.replace(layer, qkv_b=None)
                              for layer in self.runner.layers]


class ConstantSeed(ContinuousBatchEngine):
    """The request's seed never reaches the sampler: every sampled request gets a generator
    seeded with the engine's default (the llama.cpp #7381 class). Reproducible, so parity
    passes; only the `seeds` check's sensitivity test sees that seeds change nothing."""

    caught_by = "seeds"

    def add_request(self, request: Any) -> None:
        super().add_request(request)
        seq = self._live[request.request_id][0]
        if seq.generator is not None:
            seq.generator = make_generator(0, self.device)


class SeedDroppedBesideUnseeded(ContinuousBatchEngine):
    """When an unseeded sampled request shares a step with seeded ones, every sampled row
    draws from one shared unseeded generator (the vLLM #51226 class: a seed dropped when
    another request in the batch has none). Exposed only in such mixed batches."""

    caught_by = "seeds"

    def step(self) -> list[StepOutput]:
        rows = [*self.running, *list(self.waiting)[: self.max_batch_size - len(self.running)]]
        sampled = [s for s in rows if s.generator is not None]
        if any(s.request.params.seed is None for s in sampled):
            shared = make_generator(None, self.device)
            for seq in sampled:
                seq.generator = shared
        return super().step()


MODEL_PLANTED: list[Any] = [
    DecodePositionOffByOne,
    DropsQKVBias,
    ConstantSeed,
    SeedDroppedBesideUnseeded,
]
