"""Unseeded draws, the seed workload of the `sampling_distribution` check (no seed needed, so
it judges engines that declare `seeds` broken too): two groups of DRAWS unseeded one-token
draws, two prompts at two temperatures, interleaved in one burst, so that a row that samples
another row's distribution, a temperature ignored or applied twice, shows as draws that do not
follow the reference engine's distribution (engines.testing.distribution).
"""

from __future__ import annotations

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["DRAWS", "DRAW_PROMPTS", "DRAW_TEMPERATURES", "FEATURE", "distribution_workload",
           "draw_prompt"]

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


def draw_prompt(limits: EngineLimits, i: int) -> tuple[int, ...]:
    room = max(1, limits.max_model_len - 1)
    return tuple(t % limits.vocab_size for t in DRAW_PROMPTS[i][:room])


def distribution_workload(limits: Drawing) -> Workload:
    """limits.unseeded_draws draws per (prompt, temperature) group, interleaved, arriving
    together: one-token budgets, no seed, nothing else asked."""
    n = limits.unseeded_draws
    reqs: list[Request] = []
    for _ in range(n):
        for g, temperature in enumerate(DRAW_TEMPERATURES):
            reqs.append(Request(draw_prompt(limits, g),
                                SamplingParams(max_tokens=1, temperature=temperature),
                                request_id=f"r{len(reqs)}"))
    return Workload(tuple(reqs), (0,) * len(reqs), label="unseeded draws of two prompts")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return [distribution_workload(drawing)] if drawing.unseeded_draws else []


FEATURE = Feature("unseeded_draws", needs="temperature in supported_sampling (of the engine and "
                  "of every engine it is compared with)",
                  declared=lambda limits: "temperature" in limits.sampling_fields,
                  configure=lambda limits, setting: {"unseeded_draws": setting}, seeds=_seeds)
