"""Low temperatures: requests sampled at temperatures between 1e-2 and 1e-4, seeded or not,
drawn in the `low_temperature` check's workloads (half of the drawn requests whose processing
is otherwise the identity, greedy or sampled) and in its seed workload, beside greedy requests
of the same prompts. At such a temperature a draw is the greedy token unless the two are
within a few temperatures of each other in logprob (engines.testing.checks.low_temperature).

Why: the suite's other sampled requests run at 0.7 to 1.5, while dividing logits by a tiny
temperature is where samplers break: an overflow to inf and a NaN softmax (vLLM #890, a
float16 multinomial crashing below 3e-4 in microsoft/aici #19), a "guard" that serves a small
or non-positive temperature at 1.0 instead, or a floor on the temperature. Stops at 1e-4:
vLLM serves temperatures below 1e-5 greedily, which is right, so going lower tests nothing
more. An engine that raises small temperatures to a floor of its own declares it
(Capabilities.min_temperature: vLLM's 0.01), and none below it is drawn (the header says so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.features.unseeded_draws import draw_prompt
from engines.testing.processing import not_identity
from engines.testing.workload import Workload

__all__ = ["FEATURE", "TEMPERATURES", "drawn_temperatures", "low_temperature_params",
           "low_temperature_workload"]

TEMPERATURES: tuple[float, ...] = (1e-2, 1e-3, 3e-4, 1e-4)


def drawn_temperatures(limits: Drawing) -> tuple[float, ...]:
    """TEMPERATURES from the lowest every engine compared samples at (Capabilities
    .min_temperature: a lower one would be served at it, so it would test nothing the floor
    does not); none where the floor is above them all (the check is then skipped)."""
    return tuple(t for t in TEMPERATURES if t >= limits.min_temperature)


def _plain(params: SamplingParams) -> bool:
    """A request (greedy or sampled) with no processing but its temperature, whose greedy run
    is then the one to compare a low-temperature draw with (no min_tokens either: the stop ids
    it bans come later in the draw)."""
    return (not params.min_tokens and params.n == 1 and params.beam_width == 1
            and not_identity(dataclasses.replace(params, temperature=0.0)) is None)


@st.composite
def low_temperature_params(draw: st.DrawFn, limits: Drawing, prompt: Sequence[int],
                           params: SamplingParams, alone: AloneFn | None) -> SamplingParams:
    """`params` at a low temperature (seeded where the engines reproduce seeds), or unchanged:
    only a request with no other processing is turned, and half of those."""
    drawn = drawn_temperatures(limits)
    if not drawn or not _plain(params) or not draw(st.booleans(), label="low_temperature"):
        return params
    temperature = draw(st.sampled_from(drawn), label="temperature")
    seeded = limits.sampling and draw(st.booleans(), label="seeded")
    seed = draw(st.integers(0, 2**16), label="seed") if seeded else None
    return dataclasses.replace(params, temperature=temperature, seed=seed)


def low_temperature_workload(limits: Drawing) -> Workload:
    """Two prompts, each greedy and at every low temperature unseeded, arriving together (the
    greedy ones first, so that a batch holds greedy and low-temperature rows at once)."""
    budget = max(1, min(limits.max_tokens, 8, limits.max_model_len - 6))
    prompts = [draw_prompt(limits, 0)[:5], draw_prompt(limits, 1)[:5]]
    params = [SamplingParams(max_tokens=budget, logprobs=limits.logprobs, temperature=t)
              for t in (0.0, *drawn_temperatures(limits))]
    pairs = [(prompt, p) for p in params for prompt in prompts]
    reqs = [Request(prompt, p, request_id=f"r{i}") for i, (prompt, p) in enumerate(pairs)]
    return Workload(tuple(reqs), (0,) * len(reqs), label="low temperatures beside greedy")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return [low_temperature_workload(drawing)]


FEATURE = Feature("low_temperature", needs="temperature in supported_sampling (of the engine "
                  "and of every engine it is compared with)",
                  declared=lambda limits: "temperature" in limits.sampling_fields,
                  params=low_temperature_params, seeds=_seeds)
