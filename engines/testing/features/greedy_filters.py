"""Greedy filters: unseeded sampled requests under a filter that leaves one token (top_k 1,
min_p 1, top_p 1e-6), drawn beside the others in the `greedy_filters` check's workloads
(strategies.sampling_params draws them where the Drawing names filters) and in its seed
workload, beside greedy requests of the same prompts: each must give the greedy tokens,
whether or not the engine reproduces seeds.
"""

from __future__ import annotations

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.features.unseeded_draws import draw_prompt
from engines.testing.processing import GREEDY_FILTERS, declared_greedy_filters
from engines.testing.workload import Workload

__all__ = ["FEATURE", "greedy_filter_workload"]


def greedy_filter_workload(limits: Drawing) -> Workload:
    """Per declared greedy filter, two prompts at temperatures 1 and 1.5, unseeded, beside a
    greedy request of each prompt, arriving together."""
    budget = max(1, min(limits.max_tokens, 4, limits.max_model_len - 6))
    prompts = [draw_prompt(limits, 0)[:5], draw_prompt(limits, 1)[:5]]
    reqs: list[Request] = []

    def add(prompt: tuple[int, ...], **kw: object) -> None:
        reqs.append(Request(prompt, SamplingParams(max_tokens=budget, logprobs=limits.logprobs,
                                                   **kw),  # type: ignore[arg-type]
                            request_id=f"r{len(reqs)}"))

    for prompt in prompts:
        add(prompt)
    for name in limits.greedy_filters:
        for i, prompt in enumerate(prompts):
            add(prompt, temperature=(1.0, 1.5)[i], **{name: GREEDY_FILTERS[name]})
    return Workload(tuple(reqs), (0,) * len(reqs), label="filters that leave one token")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return [greedy_filter_workload(drawing)] if drawing.greedy_filters else []


FEATURE = Feature("greedy_filters", needs="temperature and one of top_k, min_p, top_p in "
                  "supported_sampling (of the engine and of every engine it is compared with)",
                  declared=lambda limits: bool(declared_greedy_filters(limits)),
                  configure=lambda limits, setting: {
                      "greedy_filters": declared_greedy_filters(limits)},
                  seeds=_seeds)
