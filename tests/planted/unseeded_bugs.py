"""Engines for the checks of unseeded sampling and of `logprobs_of`: a correct engine whose top
logprobs are processed (declared), and one-line sampler bugs in the reference
ContinuousBatchEngine that only a check of unseeded draws can see (the seeded ones are right,
or the engine is judged on unseeded draws only)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engines.core import sampling
from engines.core.request_state import RequestState
from engines.sequential import SequentialEngine
from tests.planted.sampler import Row, Sampled, SamplerEngine

__all__ = ["DoubleTemperatureUnseeded", "GreedyWhenUnseeded", "ProcessedLogprobs",
           "ProcessedLogprobsOff", "TopKIgnored", "WrongRowUnseeded"]


def _processed_tops(logits: torch.Tensor, seqs: Sequence[RequestState], tokens: Sequence[int],
                    shift: float = 0.0
                    ) -> tuple[list[Mapping[int, float] | None], list[float | None]]:
    """Top logprobs of each row's processed distribution: penalties, then (sampled rows)
    temperature and filters, as vLLM's processed_logprobs; `shift` added to every value."""
    tops: list[Mapping[int, float] | None] = []
    chosen: list[float | None] = []
    for row, seq, token in zip(logits, seqs, tokens, strict=True):
        p = seq.request.params
        if not p.logprobs:
            tops.append(None)
            chosen.append(None)
            continue
        x = sampling.penalized(row, p, seq.request.prompt_token_ids, seq.output)
        if p.temperature > 0:
            x = sampling.filtered(x, p)
        logp = torch.log_softmax(x, dim=-1) + shift
        values, ids = logp.topk(p.logprobs)
        top = dict(zip(ids.tolist(), values.tolist(), strict=True))
        top.setdefault(token, float(logp[token]))
        tops.append(top)
        chosen.append(float(logp[token]))
    return tops, chosen


class ProcessedLogprobs(SamplerEngine):
    """Correct: its top logprobs are of the processed distribution, and it says so
    (Capabilities.logprobs_of "processed"). Against a raw reference they differ wherever a penalty,
    temperature or filter applies; the logprobs check must compare only where none does."""

    CAPABILITIES = dataclasses.replace(SamplerEngine.CAPABILITIES, logprobs_of="processed")
    reference = SequentialEngine
    shift = 0.0

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        tokens, _, _ = sampling.sample(logits, seqs)
        tops, chosen = _processed_tops(logits, seqs, tokens, self.shift)
        return tokens, tops, chosen


class ProcessedLogprobsOff(ProcessedLogprobs):
    """Declares processed logprobs and returns them 0.01 too high (a log-normalizer dropped):
    the same on every run of its own, so only the reference sees it, where processing is the
    identity (greedy, no penalty)."""

    caught_by = "logprobs"
    shift = 0.01


class GreedyWhenUnseeded(SamplerEngine):
    """An unseeded request at temperature > 0 is served greedily (a sampler that draws only
    where a generator was seeded): seeded requests are right, so `seeds` passes."""

    caught_by = "sampling_distribution"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        rows: list[Any] = [Row(s, dataclasses.replace(s.request.params, temperature=0.0))
                           if s.request.params.seed is None else s for s in seqs]
        return sampling.sample(logits, rows)


class DoubleTemperatureUnseeded(SamplerEngine):
    """Unseeded rows divide their logits by the temperature twice (once in a pre-scaling path
    and again in the sampler): right at temperature 1, too sharp below it."""

    caught_by = "sampling_distribution"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        scaled = logits.float().clone()
        for i, s in enumerate(seqs):
            t = s.request.params.temperature
            if t > 0 and s.request.params.seed is None:
                scaled[i] /= t
        return sampling.sample(scaled, seqs)


class WrongRowUnseeded(SamplerEngine):
    """An unseeded sampled row draws from the next row's distribution (a shifted gather of the
    probabilities): alone it is right, in a batch of different prompts it is not."""

    caught_by = "sampling_distribution"
    reference = SequentialEngine

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 8)
        super().__init__(**kw)

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        tokens, tops, chosen = sampling.sample(logits, seqs)
        if len(seqs) > 1:
            shifted = logits.roll(-1, dims=0)
            drawn = [i for i, s in enumerate(seqs)
                     if s.request.params.temperature > 0 and s.request.params.seed is None]
            if drawn:
                again = sampling.sample(shifted[drawn], [seqs[i] for i in drawn])[0]
                for i, token in zip(drawn, again, strict=True):
                    tokens[i] = token
        return tokens, tops, chosen


class TopKIgnored(SamplerEngine):
    """top_k is ignored for unseeded requests (the filter read from a per-seed config): a
    top_k=1 draw at temperature > 0 is a full draw, not the greedy token."""

    caught_by = "greedy_filters"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        rows: list[Any] = [Row(s, dataclasses.replace(s.request.params, top_k=0))
                           if s.request.params.seed is None else s for s in seqs]
        return sampling.sample(logits, rows)


