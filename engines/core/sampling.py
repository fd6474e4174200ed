"""Greedy and seeded sampling of a batch of logits rows, plus top-logprobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from engines.core.request_state import RequestState


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def _top(logits: torch.Tensor, k: int, chosen: int) -> Mapping[int, float]:
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    values, ids = logprobs.topk(k)
    top = dict(zip(ids.tolist(), values.tolist(), strict=True))
    top.setdefault(chosen, float(logprobs[chosen]))
    return top


def sample(
    logits: torch.Tensor, seqs: Sequence[RequestState]
) -> tuple[list[int], list[Mapping[int, float] | None]]:
    """One token per row of `logits` ([n, vocab]) for the sequence in that row."""
    tokens: list[int] = logits.argmax(dim=-1).tolist()  # one host sync for the greedy rows
    tops: list[Mapping[int, float] | None] = [None] * len(seqs)
    for i, seq in enumerate(seqs):
        params = seq.request.params
        if params.temperature > 0.0:
            probs = torch.softmax(logits[i].float() / params.temperature, dim=-1)
            tokens[i] = int(torch.multinomial(probs, 1, generator=seq.generator))
        if params.logprobs:
            tops[i] = _top(logits[i], params.logprobs, tokens[i])
    return tokens, tops
