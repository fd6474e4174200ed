"""Hypothesis draws of requests with n > 1 (parallel samples of one prompt), for engines that
declare `n`: seeded and unseeded sampled families (whose children must differ), greedy ones
(whose children must agree), half of them with stop ids, each asking for the sampled tokens'
logprobs (which bound how likely identical children are by chance: properties/children.py).
"""

from __future__ import annotations

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import Drawing, Feature
from engines.testing.limits import EngineLimits

__all__ = ["CHILD_BUDGET", "FEATURE", "draws_children", "families"]

# Tokens per child: enough that identical sampled children are implausible for a correct
# engine (the property computes how implausible from the logprobs).
CHILD_BUDGET = 8
# Stop ids, where drawn: one in this many of the vocabulary (a sampled token hits one about
# once in this many draws, so children of one request often end at different steps).
STOP_STRIDE = 16


def draws_children(limits: EngineLimits) -> bool:
    """Whether requests with n > 1 may be drawn: every engine compared declares `n`."""
    return "n" in limits.sampling_fields


@st.composite
def families(draw: st.DrawFn, limits: Drawing, start: int) -> list[Request]:
    """1..3 requests with 2..4 children each: sampled at temperature 1 (seeded or unseeded)
    where the engine reproduces seeds, else greedy, or greedy by draw."""
    out = []
    for i in range(draw(st.integers(1, 3), label="families")):
        cap = max(1, min(limits.short_prompt, limits.max_model_len - 2))
        prompt = tuple(draw(st.lists(st.integers(0, limits.vocab_size - 1), min_size=1,
                                     max_size=cap), label=f"family{i}.prompt"))
        budget = max(1, min(CHILD_BUDGET, limits.max_model_len - len(prompt)))
        kind = draw(st.sampled_from(["seeded", "unseeded", "greedy"]), label=f"family{i}.kind")
        sampled = limits.sampling and kind != "greedy"
        seed = draw(st.integers(0, 2**16), label=f"family{i}.seed") if kind == "seeded" else None
        # Half the families stop on one id in STOP_STRIDE: children then end at different
        # steps, so a sibling runs on after another child's blocks were released.
        stride = draw(st.one_of(st.none(), st.integers(0, STOP_STRIDE - 1)),
                      label=f"family{i}.stops")
        stops = () if stride is None else tuple(range(stride, limits.vocab_size, STOP_STRIDE))
        params = SamplingParams(max_tokens=budget, n=draw(st.integers(2, 4), label="n"),
                                temperature=1.0 if sampled else 0.0,
                                seed=seed if sampled else None, logprobs=max(1, limits.logprobs),
                                stop_token_ids=stops)
        out.append(Request(prompt, params, request_id=f"r{start + i}"))
    return out


FEATURE = Feature("children", needs="n in supported_sampling (of the engine and of every engine "
                  "it is compared with)", declared=draws_children, extra=families)
