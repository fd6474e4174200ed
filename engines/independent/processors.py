"""A request's logits processing as transformers' own processors and warpers, in the order
engines.protocol.SamplingParams states: the constraints (guided, allowed ids, bad words,
logit bias), min_tokens, the repetition penalty, then presence and frequency penalties; and,
where the request samples, temperature, min_p, top_k and top_p.

Each is the library's class, given our protocol's meaning through its arguments:

- allowed_token_ids: PrefixConstrainedLogitsProcessor, whose function returns the list;
- bad_words: NoBadWordsLogitsProcessor, shown only the output (vLLM matches a word's prefix
  against the output tokens; transformers' own generate shows it the prompt too, so a word
  whose prefix ends the prompt would be banned at the first token: `OutputOnly` below);
- logit_bias: SequenceBiasLogitsProcessor with single-token sequences;
- min_tokens: MinNewTokensLengthLogitsProcessor with the stop ids as its "eos" ids (our
  protocol has no EOS: min_tokens holds back the stop ids, and nothing else);
- repetition_penalty: RepetitionPenaltyLogitsProcessor over prompt and output;
- the warpers: TemperatureLogitsWarper, MinPLogitsWarper, TopKLogitsWarper,
  TopPLogitsWarper (vLLM's order, min_p first; the protocol's docstring lists top_k, top_p,
  min_p, which only changes what a sampled request may draw, never the greedy token).

No library has presence and frequency penalties with vLLM's (OpenAI's) semantics: over the
output only, a token generated c times loses frequency_penalty x c, plus presence_penalty once
(transformers' closest is a repetition penalty over everything). `PresenceFrequency` below is
written here, from that definition, and shares no code with engines.core.sampling (whose own
piece has a hand-computed test, tests/engines/core/test_sampling.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.generation import (
    LogitsProcessor,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engines.protocol import SamplingParams

__all__ = ["OutputOnly", "PresenceFrequency", "processors"]


class OutputOnly(LogitsProcessor):
    """A processor shown the generated tokens only (input_ids past the prompt)."""

    def __init__(self, inner: LogitsProcessor, prompt_len: int) -> None:
        self.inner = inner
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor
                 ) -> torch.FloatTensor:
        out: torch.FloatTensor = self.inner(input_ids[:, self.prompt_len:], scores)
        return out


class PresenceFrequency(LogitsProcessor):
    """vLLM's presence and frequency penalties over the output tokens."""

    def __init__(self, presence: float, frequency: float, prompt_len: int) -> None:
        self.presence = presence
        self.frequency = frequency
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor
                 ) -> torch.FloatTensor:
        out = scores.clone()
        for row, ids in enumerate(input_ids[:, self.prompt_len:].tolist()):
            for token in set(ids):
                out[row, token] -= self.frequency * ids.count(token) + self.presence
        return out  # type: ignore[return-value]


def _allowed(ids: tuple[int, ...]) -> Callable[[int, torch.Tensor], list[int]]:
    listed = list(ids)
    return lambda batch_id, input_ids: listed


def processors(params: SamplingParams, prompt_len: int,
               guided: LogitsProcessor | None = None) -> LogitsProcessorList:
    """The processors and warpers of one request (`guided`: its grammar's mask, first)."""
    p = params
    out: list[Any] = [] if guided is None else [guided]
    if p.allowed_token_ids is not None:
        out.append(PrefixConstrainedLogitsProcessor(_allowed(tuple(p.allowed_token_ids)), 1))
    if p.bad_words:
        out.append(OutputOnly(NoBadWordsLogitsProcessor([list(w) for w in p.bad_words]),
                              prompt_len))
    if p.logit_bias:
        out.append(SequenceBiasLogitsProcessor([[[int(t)], float(b)] for t, b in p.logit_bias]))
    if p.min_tokens and p.stop_token_ids:
        out.append(MinNewTokensLengthLogitsProcessor(prompt_len, p.min_tokens,
                                                     list(p.stop_token_ids)))
    if p.repetition_penalty != 1.0:
        out.append(RepetitionPenaltyLogitsProcessor(p.repetition_penalty))
    if p.presence_penalty or p.frequency_penalty:
        out.append(PresenceFrequency(p.presence_penalty, p.frequency_penalty, prompt_len))
    if p.temperature > 0.0:
        out.append(TemperatureLogitsWarper(p.temperature))
        if p.min_p > 0.0:
            out.append(MinPLogitsWarper(p.min_p))
        if p.top_k > 0:
            out.append(TopKLogitsWarper(p.top_k))
        if p.top_p < 1.0:
            out.append(TopPLogitsWarper(p.top_p))
    return LogitsProcessorList(out)
