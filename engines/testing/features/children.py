"""Hypothesis draws of requests with n > 1 (parallel samples of one prompt), for engines that
declare `n`: seeded and unseeded sampled families (whose children must differ), greedy ones
(whose children must agree), half of them with stop ids, each asking for the sampled tokens'
logprobs (which bound how likely identical children are by chance: properties/children.py).

Families compose with stop strings (engines.testing.composition): drawn from child 0's text
served alone, so one child completes one and its siblings most often do not; and are aborted
late, after a child has finished. The seed workloads hold both, hand-picked (`family_workloads`),
and families that overflow a KV pool (the engine's or a config variant's, where the seats
the pool serves can overflow it: `families_past_the_pool`), so that forked children are
preempted while their siblings still read the blocks they share.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, pseudo_tokens
from engines.testing.features.stop_strings import FEATURE as STOP_STRINGS
from engines.testing.features.stop_strings import completed_by
from engines.testing.limits import EngineLimits
from engines.testing.workload import Abort, Workload

__all__ = ["CHILD_BUDGET", "FEATURE", "PAST_THE_POOL", "draws_children", "families",
           "families_past_the_pool", "family_workloads"]

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


def family_workloads(limits: Drawing, req: Make, alone: AloneFn) -> list[Workload]:
    """Sampled families under fixed seeds (so the same every run), where seeded sampling is
    drawn: one whose stop string child 0 completes (taken from child 0's text served alone,
    across a token boundary where it has one; its siblings, under other seeds, most often
    complete it elsewhere or not at all), where the engine takes stop strings; and two aborted
    after child 0 finished (its first token is a stop id), while their siblings run."""
    if not limits.sampling or "temperature" not in limits.sampling_fields:
        return []
    budget = max(2, min(CHILD_BUDGET, limits.max_model_len - 4))
    out: list[Workload] = []

    def family(i: int, prompt: tuple[int, ...], seed: int, **kw: object) -> Request:
        r = req(i, prompt, budget, n=3, temperature=1.0, seed=seed, **kw)
        # The sampled tokens' logprobs, as drawn families ask: the children check's bound on
        # identical children needs them.
        return dataclasses.replace(r, params=dataclasses.replace(
            r.params, logprobs=max(1, limits.logprobs)))

    prompt = (3, 1, 4)
    own = alone(prompt, family(0, prompt, 7).params)
    stop = completed_by(limits, own) if limits.draws(STOP_STRINGS) else None
    if stop is not None:
        hit = family(0, prompt, 7, stop=(stop,))
        out.append(Workload((hit, req(1, (2, 7), budget)), (0, 0),
                            label="a family whose stop string one child completes"))
    if limits.abortable:
        aborted = []
        for i, (p, seed) in enumerate((((5, 9, 2), 11), ((6, 5), 12))):
            first = alone(p, family(i, p, seed).params)[:1]  # child 0 stops at its first token
            aborted.append(family(i, p, seed, stop_token_ids=tuple(first)))
        out.append(Workload(tuple(aborted), (0, 0), (Abort(3, "r0"), Abort(5, "r1")),
                            label="families aborted after a child finished"))
    return out


PAST_THE_POOL = "families past a pool of"


def families_past_the_pool(limits: Drawing, req: Make, blocks: int, seats: int
                           ) -> Workload | None:
    """For a pool of `blocks` serving `seats` requests at once: families of 3 children (one
    a seat), 16 children at most, whose shared prompts and outputs together need a quarter
    more blocks than the pool holds (prompts two fifths of each family's share, outputs a
    fifth each child): the engine must preempt while children decode. Seeded sampled where
    seeded sampling is drawn, else greedy. None where whole-context requests in every seat
    still fit the pool, or a family's share does not fit the context."""
    n = 3
    families = max(1, min(seats, 16) // n)
    share = -(-blocks * limits.block * 5 // 4 // families)
    prompt, out = max(1, share * 2 // 5), max(2, share // 5)
    if (prompt + out > limits.max_model_len
            or seats * -(-limits.max_model_len // limits.block) <= blocks):
        return None
    sampled = limits.sampling and "temperature" in limits.sampling_fields
    reqs = []
    for i in range(families):
        extra: dict[str, object] = ({"temperature": 1.0, "seed": 900 + i} if sampled else {})
        r = req(i, pseudo_tokens(700 + i, prompt, limits.vocab_size), out, n=n, **extra)
        if sampled:  # the children check's bound on identical children needs these
            r = dataclasses.replace(r, params=dataclasses.replace(
                r.params, logprobs=max(1, limits.logprobs)))
        reqs.append(r)
    return Workload(tuple(reqs), (0,) * len(reqs), label=f"{PAST_THE_POOL} {blocks} blocks")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    out = [] if alone is None else family_workloads(drawing, req, alone)
    pools = {*drawing.variant_pools, *([(drawing.kv_blocks, drawing.slots)]
                                       if drawing.kv_blocks is not None else [])}
    for blocks, seats in sorted(pools):
        found = families_past_the_pool(drawing, req, blocks, seats)
        if found is not None:
            out.append(found)
    return out


FEATURE = Feature("children", needs="n in supported_sampling (of the engine and of every engine "
                  "it is compared with)", declared=draws_children, extra=families,
                  seeds=_seeds, composes=frozenset({STOP_STRINGS.name}))
