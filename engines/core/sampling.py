"""Choosing a token per batch row: the request's own logits processing (min_tokens, penalties,
temperature, min_p, top_k, top_p, in engines.protocol.SamplingParams' order), greedy or a draw
from its own RNG, plus the raw top logprobs.

Every row is processed from its own request's parameters and history only, so what a
neighbour in the batch asks for can never reach it (the bug class behind vLLM #5607, where
penalty tensors were sized from the first row). The processing is one batched pass over the
rows that need it, each parameter a per-row column ([rows, 1]), and a step that is a no-op for
a row (a penalty of 1 or 0, min_p 0, top_k 0, top_p 1) leaves that row's logits bit for bit as
they were; each row's arithmetic is the one it gets alone (row-wise softmax, sort and cumsum
read only their own row), so batching cannot move a token. What stays per row: the draw's
noise, from the row's own generator (a request's RNG is its own, so batching cannot perturb
it), and the top-logprob lists handed back.

Where a per-row constraint goes (issue 33): `additive_mask` below, added to the logits before
any of this, greedy rows included; the raw logprobs are of the unmasked logits.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence

import torch

from engines.core.constraints import batch_mask
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


def additive_mask(seqs: Sequence[RequestState], vocab_size: int,
                  device: torch.device) -> torch.Tensor | None:
    """The hook for per-row constraints (allowed ids, logit bias, bad words, grammar masks):
    a float32 [rows, vocab_size] tensor added to the rows' logits before penalties,
    temperature, filters and the greedy choice (0 where allowed, -inf where banned, or a
    bias), or None when no row is constrained, which costs the step nothing. The batched
    engines' builder (engines.core.constraints.batch_mask)."""
    return batch_mask(seqs, vocab_size, device)


MaskFn = Callable[[Sequence[RequestState], int, torch.device], "torch.Tensor | None"]


def _column(values: Sequence[float], device: torch.device) -> torch.Tensor:
    """A per-row parameter as a float32 [rows, 1] column (float32, as the logits: a row's
    arithmetic with it is then the same as with the Python float it came from)."""
    return torch.tensor(values, dtype=torch.float32, device=device)[:, None]


def _flat_ids(rows: Sequence[Sequence[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """Row r's token t at r * vocab + t, for every token of every row: one int64 tensor."""
    ids = array("q")
    for r, tokens in enumerate(rows):
        base = r * vocab
        ids.extend(base + t for t in tokens)
    if not ids:
        return torch.empty(0, dtype=torch.long, device=device)
    out = torch.frombuffer(ids, dtype=torch.long)
    return out if device.type == "cpu" else out.to(device)


def penalize(x: torch.Tensor, params: Sequence[SamplingParams],
             prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> torch.Tensor:
    """Steps 1-3 (min_tokens, repetition, frequency and presence penalties) on float32 logits
    [rows, vocab], in place where a row asks for them; returns x."""
    n, vocab = x.shape
    flat = x.view(-1)
    # 1. min_tokens: the stop ids cannot be chosen before min_tokens are out.
    banned = [p.stop_token_ids if p.min_tokens and len(out) < p.min_tokens else ()
              for p, out in zip(params, outputs, strict=True)]
    if any(banned):
        flat.index_fill_(0, _flat_ids(banned, vocab, x.device), NEG_INF)
    # 2. repetition over prompt and output: divides a positive logit, multiplies a negative.
    rep = [p.repetition_penalty != 1.0 for p in params]
    if any(rep):
        seen = torch.zeros(n * vocab, dtype=torch.bool, device=x.device)
        seen.index_fill_(0, _flat_ids([(*prompts[i], *outputs[i]) if rep[i] else ()
                                       for i in range(n)], vocab, x.device), True)
        penalty = _column([p.repetition_penalty for p in params], x.device)
        x = torch.where(seen.view(n, vocab), torch.where(x > 0, x / penalty, x * penalty), x)
    # 3. frequency (per occurrence) and presence (once) over the output only.
    counted = [bool(out) and bool(p.frequency_penalty or p.presence_penalty)
               for p, out in zip(params, outputs, strict=True)]
    if any(counted):
        counts = torch.bincount(
            _flat_ids([out if c else () for out, c in zip(outputs, counted, strict=True)],
                      vocab, x.device), minlength=n * vocab).view(n, vocab).to(x.dtype)
        x -= (_column([p.frequency_penalty for p in params], x.device) * counts
              + _column([p.presence_penalty for p in params], x.device) * (counts > 0))
    return x


def filter_rows(x: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Step 4 before the draw, on float32 logits [rows, vocab]: logits / temperature, then
    min_p, top_k and top_p, each on what the previous kept (removed tokens at -inf). Every
    row needs temperature > 0."""
    x = x / _column([p.temperature for p in params], x.device)
    if any(p.min_p > 0.0 for p in params):
        probs = torch.softmax(x, dim=-1)
        floor = _column([p.min_p for p in params], x.device) * probs.amax(dim=-1, keepdim=True)
        x = x.masked_fill(probs < floor, NEG_INF)
    vocab = x.shape[-1]
    top_k = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
    top_p = [p.top_p < 1.0 for p in params]
    if any(top_k):
        # The k-th largest value per row; rows without top_k keep everything (-inf floor).
        ranked = x.sort(dim=-1, descending=True, stable=True).values
        at = torch.tensor([max(k - 1, 0) for k in top_k], device=x.device)[:, None]
        kth = ranked.gather(1, at).masked_fill(
            torch.tensor([k == 0 for k in top_k], device=x.device)[:, None], NEG_INF)
        x = x.masked_fill(x < kth, NEG_INF)
    if any(top_p):
        probs, order = torch.softmax(x, dim=-1).sort(dim=-1, descending=True, stable=True)
        # Keep each token whose more likely predecessors sum to less than top_p: the smallest
        # set reaching top_p, and always the most likely token. A row without top_p keeps
        # all (its cumsum can round past 1.0).
        drop = (probs.cumsum(dim=-1) - probs) >= _column([p.top_p for p in params], x.device)
        drop[:, 0] = False
        drop &= torch.tensor(top_p, device=x.device)[:, None]
        x = x.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), NEG_INF)
    return x


def penalized(logits: torch.Tensor, params: SamplingParams, prompt: Sequence[int],
              output: Sequence[int]) -> torch.Tensor:
    """Steps 1-3 on one row's logits ([vocab]) as float32; the input is not modified."""
    return penalize(logits.float().clone()[None], [params], [prompt], [output])[0]


def filtered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Step 4 on one row's logits ([vocab]); needs temperature > 0."""
    return filter_rows(logits.float()[None], [params])[0]


def _processes(params: SamplingParams) -> bool:
    """Whether the row needs more than temperature (then it is penalized and filtered)."""
    return bool(params.min_tokens or params.repetition_penalty != 1.0
                or params.frequency_penalty or params.presence_penalty or params.min_p
                or params.top_k > 0 or params.top_p < 1.0)


def _tops(logits: torch.Tensor, seqs: Sequence[RequestState], tokens: Sequence[int]
          ) -> tuple[list[Mapping[int, float] | None], list[float | None]]:
    """The raw top logprobs and the chosen token's raw logprob of every row that asked: one
    log_softmax, one topk per distinct count asked (a row's candidates among equal values are
    then those it gets alone), one host copy."""
    n = len(seqs)
    tops: list[Mapping[int, float] | None] = [None] * n
    chosen: list[float | None] = [None] * n
    wanting = [i for i, seq in enumerate(seqs) if seq.request.params.logprobs]
    if not wanting:
        return tops, chosen
    index = torch.tensor(wanting, device=logits.device)
    raw = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
    picked = raw.gather(1, torch.tensor([tokens[i] for i in wanting],
                                        device=logits.device)[:, None]).flatten().tolist()
    by_k: dict[int, list[int]] = {}
    for j, i in enumerate(wanting):
        by_k.setdefault(seqs[i].request.params.logprobs, []).append(j)
    for k, members in by_k.items():
        values, ids = raw[members].topk(k, dim=-1)
        for j, row_ids, row_values in zip(members, ids.tolist(), values.tolist(), strict=True):
            top = dict(zip(row_ids, row_values, strict=True))
            top.setdefault(tokens[wanting[j]], picked[j])
            tops[wanting[j]] = top
    for j, i in enumerate(wanting):
        chosen[i] = picked[j]
    return tops, chosen


# For callers that choose the tokens themselves (speculation's min(1, p/q) rule).
top_logprobs = _tops


def argmax_rows(x: torch.Tensor) -> list[int]:
    """Each row's argmax of a 2-D `x`: ties to the first index, a NaN above everything (the
    first NaN), as torch.argmax. A CPU fp32 tensor goes through numpy's, which is vectorized:
    2.5 against ATen's 16 us on a [16, 1024] batch, ~1.5% of a tiny-preset decode step."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and not x.requires_grad:
        return x.numpy().argmax(axis=-1).tolist()  # type: ignore[no-any-return]
    return x.argmax(dim=-1).tolist()  # type: ignore[no-any-return]


def sample(
    logits: torch.Tensor, seqs: Sequence[RequestState], *, masks: MaskFn | None = None,
    processed_tops: bool = False,
) -> tuple[list[int], list[Mapping[int, float] | None], list[float | None]]:
    """One token per row of `logits` ([n, vocab]) for the sequence in that row, its raw top
    logprobs and its own raw logprob (None where the request asked for no logprobs).
    `masks`: the constraint mask's builder (default additive_mask). `processed_tops`: the
    logprobs are of the processed distribution instead (constraints, penalties; then the
    temperature and filters where the row samples), as Capabilities.logprobs_of "processed"
    says."""
    params = [seq.request.params for seq in seqs]
    mask = (masks or additive_mask)(seqs, logits.shape[-1], logits.device)
    chosen_from = logits if mask is None else logits.float() + mask
    tokens = argmax_rows(chosen_from)  # one host sync for greedy rows
    basis = chosen_from.float().clone() if processed_tops else logits
    processed = [i for i, p in enumerate(params) if _processes(p)]
    drawn = [i for i, p in enumerate(params) if p.temperature > 0.0]
    if processed or drawn:
        rows = sorted({*processed, *drawn})
        index = torch.tensor(rows, device=logits.device)
        x = chosen_from.index_select(0, index).float()
        if processed:
            x = penalize(x, [params[i] for i in rows],
                         [seqs[i].request.prompt_token_ids for i in rows],
                         [seqs[i].output for i in rows])
        greedy = [j for j, i in enumerate(rows) if params[i].temperature == 0.0]
        if processed_tops:
            basis[index] = x
        if greedy:
            best = argmax_rows(x[greedy])
            for j, token in zip(greedy, best, strict=True):
                tokens[rows[j]] = token
        if drawn:
            at = [j for j, i in enumerate(rows) if params[i].temperature > 0.0]
            kept = filter_rows(x[at], [params[rows[j]] for j in at])
            if processed_tops:
                basis[index[at]] = kept
            probs = torch.softmax(kept, dim=-1)
            # torch.multinomial(row, 1, generator) is argmax(row / q), q ~ Exp(1) drawn from
            # the generator (its one-sample path): the same tokens and generator states, with
            # only the noise drawn per row, each from its request's own generator.
            noise = torch.empty_like(probs)
            for row, j in zip(noise, at, strict=True):
                row.exponential_(generator=seqs[rows[j]].generator)
            for j, token in zip(at, argmax_rows(probs / noise), strict=True):
                tokens[rows[j]] = token
    tops, chosen = _tops(basis, seqs, tokens)
    return tokens, tops, chosen
