"""Planted bugs in the reference engines' constraints (issue 33): the mistakes real engines'
trackers report for constrained decoding under batching, one method overridden each. A
neighbour's mask on a row, a per-slot table not cleared or not moved with its row, a grammar
state out of step with its tokens, a bias in the wrong place among the sampling steps. Each
is visible only where the suite draws constraints (the engines declare CONSTRAINT_PARAMS)
and only under some mixes.

`caught_by` names the suite check meant to catch it; tests/testing/checks/test_constraints.py runs
the search on each and on the correct engines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from engines.core import sampling
from engines.core.constraints import batch_mask
from engines.core.request_state import RequestState
from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from tests.planted.paged_bugs import SmallPool
from tests.planted.sampler import Sampled, SamplerEngine


class _Params:
    """A row's request state seen with other sampling parameters (the mask builders and the
    sampler read only these members)."""

    def __init__(self, seq: RequestState, **change: Any) -> None:
        self.request = dataclasses.replace(
            seq.request, params=dataclasses.replace(seq.request.params, **change))
        self.generator, self.output, self.matcher = seq.generator, seq.output, seq.matcher


class MaskRowStaleAfterCompaction(SamplerEngine):
    """Constraint masks are kept per slot as admitted, not moved with a compacted row."""

    # The row moved into a freed slot is masked with the finished request's constraints
    # (its allowed ids, its grammar's state); alone, nothing is ever compacted.
    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        table: dict[int, RequestState] = self.__dict__.setdefault("_mask_rows", {})
        for seq in seqs:
            if not seq.output:  # admitted this step: its slot's mask is set up
                table[seq.slot] = seq

        def stale(rows: Sequence[RequestState], vocab: int, device: torch.device
                  ) -> torch.Tensor | None:
            return batch_mask([table.get(s.slot, s) for s in rows], vocab, device)
        return sampling.sample(logits, seqs, masks=stale)


class UnguidedRowsMasked(SamplerEngine):
    """Rows without constraints get the first guided row's grammar mask."""

    # One bitmask computed per batch, broadcast where a per-row one belongs.
    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        def broadcast(rows: Sequence[RequestState], vocab: int, device: torch.device
                      ) -> torch.Tensor | None:
            mask = batch_mask(rows, vocab, device)
            guided = [i for i, s in enumerate(rows) if s.matcher is not None]
            if mask is None or not guided:
                return mask
            free = [i for i, s in enumerate(rows) if not mask[i].any()
                    and s.request.params.logit_bias == ()]
            mask[free] = mask[guided[0]].clone()
            return mask
        return sampling.sample(logits, seqs, masks=broadcast)


class BiasAfterTemperature(SamplerEngine):
    """logit_bias is added last, after the repetition penalty and the temperature."""

    # The protocol adds it to the raw logit (OpenAI's and vLLM's place): a penalty divides
    # the biased value, the temperature scales it. Added last, a greedy row with a repetition
    # penalty on a biased token chooses otherwise, alone as in a batch: only the reference
    # engine sees it (sampled rows too, which no check compares with a reference).
    caught_by = "reference_parity"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        logits = logits.float().clone()
        for i, seq in enumerate(seqs):
            p = seq.request.params
            context = {*seq.request.prompt_token_ids, *seq.output}
            for t, b in p.logit_bias:
                # The raw logit y whose processing with the bias (as the engine does it)
                # gives what processing it and adding the bias after would: v = pen(x) + bT.
                penalized = p.repetition_penalty != 1.0 and t in context
                x, rp = float(logits[i, t]), p.repetition_penalty
                px = (x / rp if x > 0 else x * rp) if penalized else x
                v = px + b * (p.temperature if p.temperature > 0 else 1.0)
                y = (v * rp if v > 0 else v / rp) if penalized else v
                logits[i, t] = y - b
        return sampling.sample(logits, seqs)


class AllowedIdsLeakInSlot(SamplerEngine):
    """A slot's allowed ids are not cleared for the next request in that slot."""

    # The next request in the slot (or a row compacted into it) samples from the previous
    # one's allowed ids.
    caught_by = "parity"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        table: dict[int, tuple[int, ...]] = self.__dict__.setdefault("_allowed", {})
        rows: list[Any] = []
        for seq in seqs:
            allowed = seq.request.params.allowed_token_ids
            if allowed is not None:
                table[seq.slot] = allowed
            if allowed is None and seq.slot in table:
                rows.append(_Params(seq, allowed_token_ids=table[seq.slot]))
            else:
                rows.append(seq)
        return sampling.sample(logits, rows)


def bans_one_early(bad_words: Sequence[Sequence[int]], output: Sequence[int]) -> list[int]:
    """engines.core.constraints.ending_bans with each word's earlier tokens compared one
    position early (output[n - k + j - 1] for output[n - k + j])."""
    n, banned = len(output), []
    for word in bad_words:
        k = len(word) - 1
        if k == 0 or (k + 1 <= n and all(output[n - k + j - 1] == word[j] for j in range(k))):
            banned.append(word[-1])
    return banned


class BadWordPrefixOneEarly(SamplerEngine):
    """A bad word's earlier tokens are compared with the output one position early."""

    # A word of two or more tokens the request would complete is completed, alone as in a
    # batch (a reference sharing the engine's mask code would complete it too): only the
    # constraints check, which reads the tokens, sees it.
    caught_by = "constraints"

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        def early(rows: Sequence[RequestState], vocab: int, device: torch.device
                  ) -> torch.Tensor | None:
            plain: list[Any] = [_Params(s, bad_words=()) if s.request.params.bad_words else s
                                for s in rows]
            mask = batch_mask(plain, vocab, device)
            for r, seq in enumerate(rows):
                bans = bans_one_early(seq.request.params.bad_words, seq.output)
                if bans:
                    mask = mask if mask is not None else torch.zeros(len(rows), vocab,
                                                                     device=device)
                    mask[r, bans] = float("-inf")
            return mask
        return sampling.sample(logits, seqs, masks=early)


class MatcherNotResetOnRecompute(SmallPool):
    """A preempted request's grammar is replayed over its tokens without a reset first."""

    # The grammar then has its tokens twice: it is in error (masking nothing) or elsewhere
    # in its language, and the resumed request leaves it. Alone, nothing is preempted; in
    # the small pool guided requests are preempted while decoding.
    caught_by = "constraints"

    def _preempt(self, seq: PagedRequest) -> None:
        super()._preempt(seq)
        if seq.matcher is not None:
            for token in seq.output:
                seq.matcher.advance(token)


CONSTRAINT_PLANTED: list[Any] = [MaskRowStaleAfterCompaction, UnguidedRowsMasked,
                                 BiasAfterTemperature, AllowedIdsLeakInSlot,
                                 MatcherNotResetOnRecompute, BadWordPrefixOneEarly]
# The correct engines these are planted in, for the no-false-alarm half of the tests.
CONTROLS: dict[str, Any] = {"continuous": ContinuousBatchEngine, "paged": PagedEngine}
