"""Two seed workloads the search rarely draws, each aimed at a bug class that hides there:

- the same prompts sent again once the earlier requests with them have finished, at lengths
  on and either side of one and two KV blocks: the second time every full block is cached (a
  full prefix-cache hit, the last token's block included where the length is a multiple of
  the block). An engine that takes every block as cached has nothing left to compute for the
  last token's logits; real ones have hung there. The step bound turns a hang into a
  `liveness` failure, never a hung test.
- seeded sampled requests that overflow a KV pool (the engine's or a config variant's), so
  that the engine preempts them: a seeded request's tokens are a function of the request, so
  a variant that preempts must give it the main engine's tokens (`variants`), and a preempted
  engine the alone run's (`parity`). A resumed request whose RNG restarts (reseeded) breaks it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from engines.protocol import Request
from engines.testing.limits import EngineLimits
from engines.testing.strategies import pseudo_tokens
from engines.testing.workload import Workload

__all__ = ["again_after_finish", "seeded"]


def again_after_finish(limits: EngineLimits, req: Callable[..., Request],
                       budget: int) -> Workload | None:
    """Prompts of one and two blocks and one token either side, then each again after every
    earlier request has finished (arrivals past a generous bound on their service). None
    where not even one block fits beside the budget."""
    blk, v = limits.block, limits.vocab_size
    room = limits.max_model_len - budget
    lengths = [n for n in (blk - 1, blk, blk + 1, 2 * blk) if 1 <= n <= room]
    if blk not in lengths:
        return None
    prompts = [pseudo_tokens(400 + n, n, v) for n in lengths]
    first = [req(i, p, budget) for i, p in enumerate(prompts)]
    # Served one at a time, prefilled 4 tokens a step: the first wave is done by then.
    late = sum(-(-len(p) // 4) + budget + 2 for p in prompts) + 4
    again = [req(len(first) + i, p, budget) for i, p in enumerate(prompts)]
    return Workload((*first, *again), (0,) * len(first) + (late,) * len(again),
                    label="the same prompts again after they finished (full prefix hits)")


def seeded(w: Workload, seed: int = 1000) -> Workload:
    """w with every request sampled at temperature 1 under a seed of its own."""
    reqs = tuple(dataclasses.replace(r, params=dataclasses.replace(
        r.params, temperature=1.0, seed=seed + i)) for i, r in enumerate(w.requests))
    return dataclasses.replace(w, requests=reqs, label=f"{w.label}, seeded sampling")
