"""Seed groups: one prompt sampled at temperature 1 under 6..8 distinct seeds (enough for the
`seeds` check's 1e-6 false-alarm bound on a model as uncertain as the tiny preset), one seed
twice, added to the `seeds` check's workloads: it tells reproducible from insensitive with
them. Drawn where seeded sampling is (not for an engine that declares `seeds` broken, but for
the `seeds` check itself, whose strict xfail must be able to fail)."""

from __future__ import annotations

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import Drawing, Feature, prompts

__all__ = ["FEATURE", "seed_groups"]


@st.composite
def seed_groups(draw: st.DrawFn, limits: Drawing, start: int) -> list[Request]:
    """The group, its requests r<start>, r<start+1>, ..."""
    prompt = draw(prompts(limits), label="group_prompt")
    seeds = draw(st.lists(st.integers(0, 2**16), min_size=6, max_size=8, unique=True),
                 label="group_seeds")
    budget = draw(st.integers(1, limits.max_tokens), label="group_budget")
    return [Request(prompt, SamplingParams(max_tokens=budget, temperature=1.0, seed=s,
                                           logprobs=limits.logprobs,
                                           prompt_logprobs=limits.prompt_logprobs),
                    request_id=f"r{start + i}")
            for i, s in enumerate([*seeds, seeds[0]])]


FEATURE = Feature("seed_groups", needs="seeded sampling (not declared broken)",
                  declared=lambda limits: limits.sampling, extra=seed_groups)
