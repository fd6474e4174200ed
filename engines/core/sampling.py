"""Choosing a token per batch row: the request's own logits processing (min_tokens, penalties,
temperature, min_p, top_k, top_p, in engines.protocol.SamplingParams' order), greedy or a draw
from its own RNG, plus the raw top logprobs.

Each row is processed from its own request's parameters and history only, so what a
neighbour in the batch asks for can never reach it (the bug class behind vLLM #5607, where
penalty tensors were sized from the first row). Rows that ask for nothing beyond temperature
take the same path as before these parameters existed, so their draws are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from engines.core.request_state import RequestState
from engines.protocol import SamplingParams

NEG_INF = float("-inf")


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def _top(logprobs: torch.Tensor, k: int, chosen: int) -> Mapping[int, float]:
    values, ids = logprobs.topk(k)
    top = dict(zip(ids.tolist(), values.tolist(), strict=True))
    top.setdefault(chosen, float(logprobs[chosen]))
    return top


def penalized(logits: torch.Tensor, params: SamplingParams, prompt: Sequence[int],
              output: Sequence[int]) -> torch.Tensor:
    """Steps 1-3 (min_tokens, repetition, frequency and presence penalties) on one row's
    logits ([vocab], float32); the input is not modified."""
    x = logits.float().clone()
    if params.min_tokens and len(output) < params.min_tokens and params.stop_token_ids:
        x[list(params.stop_token_ids)] = NEG_INF
    if params.repetition_penalty != 1.0:
        seen = torch.tensor(sorted({*prompt, *output}), device=x.device)
        values = x[seen]
        x[seen] = torch.where(values > 0, values / params.repetition_penalty,
                              values * params.repetition_penalty)
    if output and (params.frequency_penalty or params.presence_penalty):
        counts = torch.bincount(torch.tensor(list(output), device=x.device),
                                minlength=x.numel()).to(x.dtype)
        x -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
    return x


def filtered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Step 4 before the draw: logits / temperature, then min_p, top_k and top_p, each on what
    the previous kept (removed tokens at -inf). Needs temperature > 0."""
    x = logits / params.temperature
    if params.min_p > 0.0:
        probs = torch.softmax(x, dim=-1)
        x = x.masked_fill(probs < params.min_p * probs.max(), NEG_INF)
    if 0 < params.top_k < x.numel():
        kth = x.topk(params.top_k).values[-1]
        x = x.masked_fill(x < kth, NEG_INF)
    if params.top_p < 1.0:
        probs, order = torch.softmax(x, dim=-1).sort(descending=True)
        # Keep each token whose more likely predecessors sum to less than top_p: the smallest
        # set reaching top_p, and always the most likely token.
        drop = (probs.cumsum(dim=-1) - probs) >= params.top_p
        drop[0] = False
        x = x.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), NEG_INF)
    return x


def _processes(params: SamplingParams) -> bool:
    """Whether the row needs more than temperature (then it takes the general path)."""
    return bool(params.min_tokens or params.repetition_penalty != 1.0
                or params.frequency_penalty or params.presence_penalty or params.min_p
                or params.top_k > 0 or params.top_p < 1.0)


def sample(
    logits: torch.Tensor, seqs: Sequence[RequestState]
) -> tuple[list[int], list[Mapping[int, float] | None], list[float | None]]:
    """One token per row of `logits` ([n, vocab]) for the sequence in that row, its raw top
    logprobs and its own raw logprob (None where the request asked for no logprobs)."""
    tokens: list[int] = logits.argmax(dim=-1).tolist()  # one host sync for the greedy rows
    tops: list[Mapping[int, float] | None] = [None] * len(seqs)
    chosen: list[float | None] = [None] * len(seqs)
    for i, seq in enumerate(seqs):
        params = seq.request.params
        row = logits[i]
        if _processes(params):
            row = penalized(row, params, seq.request.prompt_token_ids, seq.output)
            if params.temperature == 0.0:
                tokens[i] = int(row.argmax())
        if params.temperature > 0.0:
            scaled = (filtered(row, params) if _processes(params)
                      else row.float() / params.temperature)
            probs = torch.softmax(scaled, dim=-1)
            tokens[i] = int(torch.multinomial(probs, 1, generator=seq.generator))
        if params.logprobs:
            raw = torch.log_softmax(logits[i].float(), dim=-1)
            tops[i] = _top(raw, params.logprobs, tokens[i])
            chosen[i] = float(raw[tokens[i]])
    return tokens, tops, chosen
