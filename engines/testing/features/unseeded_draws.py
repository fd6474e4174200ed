"""The seed workloads of the checks of unseeded sampling (no seed needed, so they judge
engines that declare `seeds` broken too):

- greedy_filters: sampled requests under a filter that leaves one token (top_k 1, min_p 1,
  top_p 1e-6) beside greedy ones of the same prompts; each must give the greedy tokens.
- sampling_distribution: two groups of DRAWS unseeded one-token draws, two prompts at two
  temperatures, interleaved in one burst, so that a row that samples another row's
  distribution, a temperature ignored or applied twice, shows as draws that do not follow
  the reference engine's distribution (engines.testing.distribution).
"""

from __future__ import annotations

from engines.protocol import Request, SamplingParams
from engines.testing.limits import EngineLimits
from engines.testing.processing import GREEDY_FILTERS
from engines.testing.workload import Workload

__all__ = ["DRAWS", "DRAW_PROMPTS", "DRAW_TEMPERATURES", "distribution_workload",
           "greedy_filter_workload"]

# Draws per group: the false-alarm bound of the test at 160 draws is 1.2e-5 per group
# (engines.testing.distribution.false_alarm_bound), two groups a run.
DRAWS = 160
# One temperature that is not 1, or a temperature applied twice (or ignored, at 1) could not
# show; 1 itself, judged from any reference's top candidates (0.5 needs its whole
# distribution to be re-tempered).
DRAW_TEMPERATURES = (1.0, 0.5)
# Fixed prompts (token ids modulo the vocabulary): different first-token distributions on
# the tiny presets (binned TV 0.4 to 0.8 from each other), none all but certain.
DRAW_PROMPTS = ((11, 402, 87, 5, 260, 31), (640, 3, 199, 77, 512, 9))


def _prompt(limits: EngineLimits, i: int) -> tuple[int, ...]:
    room = max(1, limits.max_model_len - 1)
    return tuple(t % limits.vocab_size for t in DRAW_PROMPTS[i][:room])


def distribution_workload(limits: EngineLimits) -> Workload:
    """limits.unseeded_draws draws per (prompt, temperature) group, interleaved, arriving
    together: one-token budgets, no seed, nothing else asked."""
    n = limits.unseeded_draws
    reqs: list[Request] = []
    for _ in range(n):
        for g, temperature in enumerate(DRAW_TEMPERATURES):
            reqs.append(Request(_prompt(limits, g),
                                SamplingParams(max_tokens=1, temperature=temperature),
                                request_id=f"r{len(reqs)}"))
    return Workload(tuple(reqs), (0,) * len(reqs), label="unseeded draws of two prompts")


def greedy_filter_workload(limits: EngineLimits) -> Workload:
    """Per declared greedy filter, two prompts at temperatures 1 and 1.5, unseeded, beside a
    greedy request of each prompt, arriving together."""
    budget = max(1, min(limits.max_tokens, 4, limits.max_model_len - 6))
    prompts = [_prompt(limits, 0)[:5], _prompt(limits, 1)[:5]]
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
