"""Drafters for the paged engine's speculative decoding (engines.paged.speculate): each
proposes, for a decoding request, up to k tokens that the target model then verifies in one
forward.

Both draft greedily by default: a draft is a point mass, so verification needs no draft
probabilities (the target's own token at each position decides, engines.paged.speculate).
What a drafter proposes changes how many tokens a step emits, never which: a wrong draft is
rejected. DraftModelDrafter(sampled=True) draws a sampled request's drafts from its own
processed distribution instead and hands that distribution (`probs`) to the verifier, which
applies the min(1, p/q) rule (engines.paged.spec_sampling).

- NgramDrafter (prompt lookup): the last n tokens of prompt + output, found earlier in the
  same request (longest n first, the latest occurrence), propose the tokens that followed.
  Pure Python over the request's own tokens: no model, no KV.
- DraftModelDrafter: a small model sharing the target's vocabulary (the zoo's `tiny-draft`)
  runs its own paged forward over a KV pool of its own, indexed by the target's block ids: a
  request's draft KV at position p lives in the draft pool's block `blocks[p // block_size]`,
  so the draft needs no block bookkeeping; the target's allocation covers it. The draft's KV
  is valid up to `PagedRequest.draft_computed`, which verification truncates with the
  target's and preemption resets; a request's first drafting step computes the draft KV of
  its whole prompt (a prefix block taken from the cache holds the target's KV, not
  necessarily the draft's, so the draft ignores the cache). Another request writing the
  same prefix block's draft KV writes the same tokens at the same positions: at worst a
  draft changes, never an output.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from engines.models import load_model
from engines.paged.forward import PagedForward, Row
from engines.paged.spec_sampling import draft_probs, inverse_cdf, uniform
from engines.paged.state import PagedRequest


class Drafter(Protocol):
    # The distribution each of the latest proposal's drafts was drawn from, by request (only
    # requests whose drafts were sampled): what the verifier's min(1, p/q) rule needs.
    probs: dict[PagedRequest, list[torch.Tensor]]

    def wants(self, seq: PagedRequest, k: int) -> int:
        """How many draft tokens (at most k) it could propose for seq this step."""
        ...

    def propose(self, counts: Mapping[PagedRequest, int]) -> dict[PagedRequest, list[int]]:
        """Exactly counts[seq] draft tokens for each seq (its blocks cover them)."""
        ...


def prompt_lookup(tokens: Sequence[int], k: int, n_max: int, n_min: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the last n tokens of
    `tokens`, for the largest n in n_max..n_min that has one; [] when none does.

    By bytes.rfind over the tokens as 4-byte ints (a hit at an offset not a multiple of 4 is
    not a token boundary: searched again before it): C speed over a 512-token context, where
    a Python scan per row per step would cost more than the step."""
    length = len(tokens)
    if length < 2 or k < 1:
        return []
    data = array("i", tokens).tobytes()
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        pattern = data[-4 * n :]
        end = 4 * (length - 1)  # the match ends before the last token: it has a follower
        while True:
            at = data.rfind(pattern, 0, end)
            if at < 0:
                break
            if at % 4 == 0:
                start = at // 4 + n
                return list(tokens[start : start + k])
            end = at + len(pattern) - 1
    return []


class NgramDrafter:
    """Prompt lookup: see prompt_lookup. Proposals are worked out in `wants` (the schedule
    needs their count) and handed out by `propose`."""

    def __init__(self, n_max: int = 3, n_min: int = 1) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"ngram: need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_max, self.n_min = n_max, n_min
        self._found: dict[PagedRequest, list[int]] = {}
        self.probs: dict[PagedRequest, list[torch.Tensor]] = {}  # never sampled

    def wants(self, seq: PagedRequest, k: int) -> int:
        found = prompt_lookup(seq.tokens(0, seq.num_tokens), k, self.n_max, self.n_min)
        self._found[seq] = found
        return len(found)

    def propose(self, counts: Mapping[PagedRequest, int]) -> dict[PagedRequest, list[int]]:
        found, self._found = self._found, {}
        return {seq: found[seq][:n] for seq, n in counts.items()}


class DraftModelDrafter:
    """A small model's greedy tokens, k forwards (batched over the rows) a step; with
    `sampled`, a sampled request's tokens drawn from the model's processed distribution."""

    def __init__(self, model: Any, *, vocab_size: int, num_blocks: int, block_size: int,
                 max_model_len: int, seats: int, seed: int, device: torch.device,
                 dtype: torch.dtype, sampled: bool = False) -> None:
        self.sampled = sampled
        self.probs: dict[PagedRequest, list[torch.Tensor]] = {}
        if isinstance(model, torch.nn.Module):
            self.model = model
        else:
            self.model = load_model(model, seed=seed, device=device, dtype=dtype)
        config: Any = self.model.config
        if config.vocab_size != vocab_size:
            raise ValueError(f"draft_model: its vocabulary has {config.vocab_size} tokens, "
                             f"the target's {vocab_size}; a draft must share the target's")
        # Its own KV pool (num_blocks, as the target's: the target's block ids index it).
        self.runner = PagedForward(self.model, num_blocks=num_blocks, block_size=block_size,
                                   max_model_len=max_model_len, seats=seats)

    def wants(self, seq: PagedRequest, k: int) -> int:
        return k

    @torch.inference_mode()
    def propose(self, counts: Mapping[PagedRequest, int]) -> dict[PagedRequest, list[int]]:
        drafts: dict[PagedRequest, list[int]] = {seq: [] for seq in counts}
        active = [seq for seq, n in counts.items() if n > 0]
        self.probs = {seq: [] for seq in active
                      if self.sampled and seq.request.params.temperature > 0.0}
        rnd = 0
        while active:
            rows = []
            for seq in active:
                if rnd == 0:  # everything without draft KV yet, up to the last token
                    seq.draft_computed = min(seq.draft_computed, seq.num_computed)
                    start, tokens = seq.draft_computed, seq.tokens(seq.draft_computed,
                                                                   seq.num_tokens)
                else:  # the draft token just proposed, after the tokens before it
                    start, tokens = seq.num_tokens - 1 + rnd, [drafts[seq][-1]]
                rows.append(Row(tokens, start, seq.blocks, True, seat=seq.seat))
            logits = self.runner.forward(rows)
            picks = logits.argmax(dim=-1).tolist()
            drawn = [i for i, seq in enumerate(active) if seq in self.probs]
            if drawn:
                q = draft_probs(logits[drawn], [active[i] for i in drawn])
                for i, row_q in zip(drawn, q, strict=True):
                    self.probs[active[i]].append(row_q)
                    picks[i] = inverse_cdf(row_q, uniform(active[i]))
            for seq, row, token in zip(active, rows, picks, strict=True):
                drafts[seq].append(token)
                seq.draft_computed = row.start + len(row.tokens)
            rnd += 1
            active = [seq for seq in active if len(drafts[seq]) < counts[seq]]
        return drafts
