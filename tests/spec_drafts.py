"""A scripted drafter for the repo's speculation tests: drafts taken from a given
continuation per prompt, so a test decides which drafts are accepted (all of them, with the
model's own continuation; none, with tokens it never generates; another request's)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from engines.paged.engine import PagedEngine
from engines.paged.speculate import Speculation
from engines.paged.state import PagedRequest


class ScriptedDrafter:
    """Drafts per prompt: the next tokens of `continuations[prompt]` after those the request
    has generated (engines.paged.drafters.Drafter)."""

    def __init__(self, continuations: Mapping[tuple[int, ...], list[int]], k: int = 3) -> None:
        self.continuations, self.k = continuations, k
        self.probs: dict[PagedRequest, list[torch.Tensor]] = {}  # greedy drafts only

    def _next(self, seq: PagedRequest) -> list[int]:
        known = self.continuations[seq.request.prompt_token_ids]
        return known[len(seq.output) : len(seq.output) + self.k]

    def wants(self, seq: PagedRequest, k: int) -> int:
        return min(k, len(self._next(seq)))

    def propose(self, counts: Mapping[PagedRequest, int]) -> dict[PagedRequest, list[int]]:
        return {seq: self._next(seq)[:n] for seq, n in counts.items()}


def scripted(engine: type[PagedEngine], drafts: Mapping[tuple[int, ...], list[int]],
             **kw: object) -> PagedEngine:
    """A speculating `engine` (PagedEngine or a planted subclass) drafting from `drafts`."""
    made = engine(speculation=Speculation("ngram", num_tokens=3), **kw)  # type: ignore[arg-type]
    made.drafter = ScriptedDrafter(drafts)
    return made
