"""Planted bugs in the reference ContinuousBatchEngine's per-row sampling: the classes real
engines' trackers report most (per-request parameters leaking between rows of a batch), one
sampler override each. Each needs the logits processing the suite now draws (the engine
declares every SamplingParams field).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engines.core import sampling
from engines.core.request_state import RequestState
from engines.protocol import SamplingParams
from engines.sequential import SequentialEngine
from tests.planted.sampler import Row, Sampled, SamplerEngine


def _sample_as(logits: torch.Tensor, seqs: Sequence[RequestState],
               params_of: Callable[[int, RequestState], SamplingParams]) -> Sampled:
    rows: list[Any] = [Row(s, params_of(i, s)) for i, s in enumerate(seqs)]
    return sampling.sample(logits, rows)


class PenaltiesFromFirstRow(SamplerEngine):
    """The penalty parameters of the batch come from its first row (vLLM #5607: tensors sized
    from the first request): a row beside a penalized first row is penalized too, and a
    penalized row beside an unpenalized first one is not. Alone, every row is its own first."""

    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        first = seqs[0].request.params
        return _sample_as(logits, seqs, lambda _, s: dataclasses.replace(
            s.request.params, repetition_penalty=first.repetition_penalty,
            frequency_penalty=first.frequency_penalty, presence_penalty=first.presence_penalty))


class TopKFromFirstRow(SamplerEngine):
    """Every sampled row draws under the first row's top_k (a per-batch scalar where a
    per-row tensor belongs)."""

    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        first = seqs[0].request.params
        return _sample_as(logits, seqs,
                          lambda _, s: dataclasses.replace(s.request.params, top_k=first.top_k))


class LastParamsForAll(SamplerEngine):
    """The last row's parameters are applied to the whole batch, budget and stops aside
    (lmms-eval #1325)."""

    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        last = seqs[-1].request.params
        return _sample_as(logits, seqs, lambda _, s: dataclasses.replace(
            last, max_tokens=s.request.params.max_tokens,
            stop_token_ids=s.request.params.stop_token_ids, logprobs=s.request.params.logprobs))


class PresenceOverPrompt(SamplerEngine):
    """presence_penalty counts the prompt's tokens as well as the output's (vllm-metal #69
    mixed the two up). Alone it is just as wrong: only a reference engine sees it."""

    caught_by = "reference_parity"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        logits = logits.clone()
        for i, seq in enumerate(seqs):
            p = seq.request.params
            if p.presence_penalty:
                only_prompt = sorted(set(seq.request.prompt_token_ids) - set(seq.output))
                logits[i, only_prompt] -= p.presence_penalty
        return sampling.sample(logits, seqs)


class MinTokensIgnoredMidBatch(SamplerEngine):
    """min_tokens holds back stop ids only for a request that starts in an idle engine; one
    admitted into a running batch may stop before it (its mask set up with the batch's, not
    its own). Alone, every request starts in an idle engine."""

    caught_by = "budget_finish"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._mid_batch: set[object] = set()

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        running = any(s.output for s in seqs)
        for s in seqs:
            if not s.output and running:
                self._mid_batch.add(s.request.request_id)

        def params_of(_: int, s: RequestState) -> SamplingParams:
            if s.request.request_id in self._mid_batch:
                return dataclasses.replace(s.request.params, min_tokens=0)
            return s.request.params
        return _sample_as(logits, seqs, params_of)


class NeighboursLogprobs(SamplerEngine):
    """Each row returns the top logprobs of the row before it (a shifted gather): the tokens
    are right, the values RL and evaluation users read are another request's."""

    caught_by = "logprobs"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        tokens, tops, chosen = sampling.sample(logits, seqs)
        if len(seqs) > 1:
            tops = [tops[i - 1] if tops[i] is not None else None for i in range(len(seqs))]
        return tokens, tops, chosen


SAMPLING_PLANTED: list[Any] = [PenaltiesFromFirstRow, TopKFromFirstRow, LastParamsForAll,
                               PresenceOverPrompt, MinTokensIgnoredMidBatch,
                               NeighboursLogprobs]
