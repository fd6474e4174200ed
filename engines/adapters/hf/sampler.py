"""Per-request sampling and top logprobs for transformers' continuous batching.

The library samples from one global RNG at one global temperature and returns the chosen
token's logprob only. This hook runs the library's sampler (its argmax is kept for greedy
rows), then draws the rows of sampled requests from the same fp32 logits with each request's
own seeded generator, and reads `top_logprobs` (the top k, plus the chosen token) there too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from engines.adapters.common.book import Live

__all__ = ["RowSampler"]


class RowSampler:
    def __init__(self, runner: Any) -> None:
        self._library_sample: Callable[[torch.Tensor, torch.Tensor], None] = runner._sample
        runner._sample = self.sample  # instance attribute: shadows the method for this runner
        self.rows: list[Live | None] = []  # the request behind each logits row of the batch
        self._generators: dict[str, torch.Generator] = {}  # key -> sampled request's RNG
        self._top: dict[str, list[Mapping[int, float]]] = {}  # key -> this step's top logprobs

    def add(self, live: Live) -> None:
        params = live.request.params
        if params.temperature > 0:
            gen = torch.Generator()
            if params.seed is None:
                gen.seed()
            else:
                gen.manual_seed(int(params.seed))
            self._generators[live.key] = gen

    def take_top(self, key: str) -> list[Mapping[int, float]] | None:
        return self._top.pop(key, None)

    def forget(self, key: str) -> None:
        self._generators.pop(key, None)
        self._top.pop(key, None)

    def sample(self, scores: torch.Tensor, output_ids: torch.Tensor) -> None:
        """The library's sampler, then per-request sampling and top logprobs over its rows."""
        self._library_sample(scores, output_ids)  # greedy argmax for every row
        logits = scores[0]  # [rows, vocab], fp32, unprocessed (no logits processors are set)
        for row, live in enumerate(self.rows):
            if live is None:
                continue
            params = live.request.params
            if params.temperature > 0:
                probs = torch.softmax(logits[row] / params.temperature, dim=-1)
                token = torch.multinomial(probs, 1, generator=self._generators[live.key])
                output_ids[0, row] = token[0]
            if params.logprobs > 0:
                logprobs = torch.log_softmax(logits[row], dim=-1)
                values, ids = logprobs.topk(params.logprobs)
                top = dict(zip(ids.tolist(), values.tolist(), strict=True))
                chosen = int(output_ids[0, row])  # listed even when outside the top k
                top.setdefault(chosen, float(logprobs[chosen]))
                self._top.setdefault(live.key, []).append(top)
