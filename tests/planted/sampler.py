"""What the planted sampling bugs share: a continuous engine whose one override is how a step's
rows are sampled (`SamplerEngine._sample`), and a row that stands for a request state under
other sampling parameters (`Row`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from engines.core import sampling
from engines.core.request_state import RequestState
from engines.protocol import SamplingParams, StepOutput
from engines.slot.continuous import ContinuousBatchEngine

__all__ = ["Row", "Sampled", "SamplerEngine"]

Sampled = tuple[list[int], list[Mapping[int, float] | None], list[float | None]]


class Row:
    """A row's request state, with the sampling parameters the bug gives it (its generator,
    output and grammar kept)."""

    def __init__(self, seq: RequestState, params: SamplingParams) -> None:
        self.seq, self.request = seq, dataclasses.replace(seq.request, params=params)
        self.generator, self.output = seq.generator, seq.output
        self.matcher = seq.matcher  # guided rows: the constraint mask reads their grammar


class SamplerEngine(ContinuousBatchEngine):
    """A continuous engine (4 slots by default) whose rows are sampled by `_sample`: the
    engine's own sampler unless a bug overrides it."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 4)
        super().__init__(**kw)

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        return sampling.sample(logits, seqs)

    def _emit(self, logits: torch.Tensor, seqs: list[RequestState],
              outputs: list[StepOutput]) -> None:
        tokens, tops, logprobs = self._sample(logits, seqs)
        for seq, token, top, logprob in zip(seqs, tokens, tops, logprobs, strict=True):
            outputs.append(seq.append(token, top, logprob))
            if seq.finished:
                self._finish(seq)
