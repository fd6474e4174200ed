"""Per-row constraints as one additive mask over the logits (engines.protocol.SamplingParams'
constraint steps): `guided` (tokens that would leave the grammar), `allowed_token_ids` (every
other id), `bad_words` (the last token of a listed sequence whose other tokens the output
ends with; a one-token word always) at -inf, and `logit_bias` added to the raw logit. The
mask is added before min_tokens, penalties and temperature: a bias is a change of the raw
logit, so a repetition penalty divides the biased value, and temperature scales it.

Two builders of the same mask, deliberately unalike, so that parity between the sequential
reference and the batched engines tests the batched one:

- `row_mask`: one request's row, id by id in Python (the sequential reference's);
- `batch_mask`: every row of a batch in a few tensor ops (the slot and paged engines').
  Per row, only the building of index lists is Python; the mask is filled in one step for
  all rows, and rows without constraints are zero (their logits bit for bit unchanged).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import torch

from engines.core.request_state import RequestState
from engines.protocol import SamplingParams

__all__ = ["batch_mask", "constrained", "ending_bans", "row_mask"]

NEG_INF = float("-inf")


def constrained(params: SamplingParams) -> bool:
    return bool(params.allowed_token_ids is not None or params.logit_bias or params.bad_words
                or params.guided is not None)


def ending_bans(bad_words: Sequence[Sequence[int]], output: Sequence[int]) -> list[int]:
    """The tokens `bad_words` bans next: each word's last token where the output ends with
    the rest of the word (a one-token word is always banned)."""
    banned = []
    n = len(output)
    for word in bad_words:
        k = len(word) - 1
        if k == 0 or (k <= n and all(output[n - k + j] == word[j] for j in range(k))):
            banned.append(word[-1])
    return banned


def row_mask(seq: RequestState, vocab_size: int, device: torch.device) -> torch.Tensor | None:
    """One request's mask as a [1, vocab] float32 row, or None if it has no constraint."""
    p = seq.request.params
    if not constrained(p):
        return None
    values = [0.0] * vocab_size
    for token, bias in p.logit_bias:
        values[token] += float(bias)
    banned: set[int] = set(ending_bans(p.bad_words, seq.output))
    if p.allowed_token_ids is not None:
        allowed = set(p.allowed_token_ids)
        banned |= {t for t in range(vocab_size) if t not in allowed}
    if seq.matcher is not None:
        bits = seq.matcher.allowed_bits()
        banned |= {t for t in range(vocab_size) if not bits[t >> 3] >> (t & 7) & 1}
    for token in banned:
        values[token] = NEG_INF
    return torch.tensor([values], dtype=torch.float32, device=device)


def _flat(rows: Sequence[tuple[int, Sequence[int]]], vocab: int) -> torch.Tensor:
    ids = array("q")
    for r, tokens in rows:
        base = r * vocab
        ids.extend(base + t for t in tokens)
    return torch.frombuffer(ids, dtype=torch.long) if ids else torch.empty(0, dtype=torch.long)


def batch_mask(seqs: Sequence[RequestState], vocab_size: int,
               device: torch.device) -> torch.Tensor | None:
    """Every row's mask as one [rows, vocab] float32 tensor, or None if no row has a
    constraint (which costs a step nothing)."""
    rows = [(r, seq.request.params) for r, seq in enumerate(seqs)
            if constrained(seq.request.params)]
    if not rows:
        return None
    n = len(seqs)
    mask = torch.zeros(n * vocab_size, dtype=torch.float32)
    biased = [(r, p) for r, p in rows if p.logit_bias]
    if biased:
        at = _flat([(r, [t for t, _ in p.logit_bias]) for r, p in biased], vocab_size)
        mask.index_put_((at,), torch.tensor([float(b) for _, p in biased
                                             for _, b in p.logit_bias]), accumulate=True)
    # What is kept: everything, but on rows with allowed ids only those, on guided rows only
    # what the grammar allows; then the bad words' endings are dropped.
    keep = torch.ones(n, vocab_size, dtype=torch.bool)
    listed = [(r, p.allowed_token_ids) for r, p in rows if p.allowed_token_ids is not None]
    if listed:
        only = torch.zeros(n * vocab_size, dtype=torch.bool)
        only[_flat([(r, ids) for r, ids in listed if ids is not None], vocab_size)] = True
        keep[[r for r, _ in listed]] = only.view(n, vocab_size)[[r for r, _ in listed]]
    guided = [r for r, _ in rows if seqs[r].matcher is not None]
    if guided:
        bits = torch.frombuffer(bytearray(b"".join(seqs[r].matcher.allowed_bits()  # type: ignore[union-attr]
                                                    for r in guided)), dtype=torch.uint8)
        bits = bits.view(len(guided), -1)
        unpacked = (bits[:, :, None] >> torch.arange(8, dtype=torch.uint8)) & 1
        keep[guided] &= unpacked.view(len(guided), -1)[:, :vocab_size].bool()
    bans = [(r, ending_bans(p.bad_words, seqs[r].output)) for r, p in rows if p.bad_words]
    if bans:
        keep.view(-1)[_flat(bans, vocab_size)] = False
    mask = mask.view(n, vocab_size).masked_fill_(~keep, NEG_INF)
    return mask if device.type == "cpu" else mask.to(device)
