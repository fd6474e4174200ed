"""A seed workload where a speculating engine's drafts can hit (issue 32): prompt lookup and
draft models are accepted where the continuation repeats what came before, which the
search's random prompts rarely give. Two prompts: a short chunk repeated (the continuation
of its latest occurrence is in the prompt), and a prompt followed by its own greedy
continuation and the prompt again (the model, served it again, tends to repeat it: random
weights decode in cycles). Each greedy and, where seeded sampling is drawn, sampled and
seeded, with budgets long enough for several drafting steps, arriving together. On an engine
that does not speculate these are ordinary requests; the coverage summary's speculation sentence
(engines.testing.spec_coverage) says whether drafts were accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, pseudo_tokens
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["FEATURE", "draft_hit_workload"]

BUDGET = 12  # tokens a request: three or four drafting steps at k = 3


def draft_hit_workload(limits: EngineLimits, req: Callable[..., Request],
                       alone: AloneFn) -> Workload | None:
    """The two prompts, greedy and sampled each; None where the context is too short."""
    v = limits.vocab_size
    budget = min(BUDGET, limits.max_model_len // 3)
    room = limits.max_model_len - budget
    if budget < 4 or room < 12:
        return None
    chunk = pseudo_tokens(17, 4, v)
    repeated = tuple(chunk * 3)[:room]
    seed = pseudo_tokens(23, 5, v)
    own = alone(seed, SamplingParams(max_tokens=min(8, room - 2 * len(seed))))
    echoed = (*seed, *own, *seed)[:room]
    prompts: Sequence[tuple[int, ...]] = (repeated, echoed)
    reqs: list[Request] = []
    for prompt in prompts:
        reqs.append(req(len(reqs), prompt, budget))
        # Sampled only where seeded sampling is drawn: an engine that declares seeds broken
        # is sent no sampled request outside the check named `seeds` (it may refuse them all).
        if "temperature" not in limits.sampling_fields or not limits.sampling:
            continue
        reqs.append(req(len(reqs), prompt, budget, temperature=0.8, seed=32 + len(reqs)))
    return Workload(tuple(reqs), (0,) * len(reqs), label="prompts whose drafts can hit")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    found = draft_hit_workload(drawing, req, alone) if alone is not None else None
    return [] if found is None else [found]


# Speculation is an engine's configuration, not a request's: every engine gets the workload,
# and one that does not speculate serves ordinary requests.
FEATURE = Feature("drafts", needs="nothing", declared=lambda limits: True, everywhere=True,
                  seeds=_seeds)
