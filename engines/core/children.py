"""n > 1 (SamplingParams.n): a request's children, each a request of its own to the engine's
schedule, sharing the parent's id and told apart by `index` in their StepOutputs.

The seed rule: child i of a request seeded s samples as the same request with n = 1 and seed
s + i would (vLLM's rule for its child requests), so children are pairwise distinct seeds,
reproducible, and each can be reproduced alone; children of an unseeded request each get a
generator of their own (independent draws). Greedy children are identical by definition.

The prompt is prefilled once per family where the engine can (engines.sequential forks its
cache; the slot engines copy the prefilled slot's KV into the siblings admitted with it).
"""

from __future__ import annotations

import dataclasses

from engines.protocol import Request

__all__ = ["child_requests", "child_seed"]


def child_seed(seed: int | None, index: int) -> int | None:
    """The seed child `index` samples with (None: unseeded, its own fresh generator)."""
    return None if seed is None else seed + index


def child_requests(request: Request) -> list[Request]:
    """The request's children, each with n = 1 and its derived seed (the request itself when
    n is 1), all under the parent's request id; a beam search's children are the request
    itself, n times (the search returns its n best beams to them)."""
    params = request.params
    if params.n == 1:
        return [request]
    if params.beam_width > 1:  # beam search: one search, its n best beams (engines.core.beams)
        return [request] * params.n
    return [dataclasses.replace(request, params=dataclasses.replace(
        params, n=1, seed=child_seed(params.seed, i))) for i in range(params.n)]
