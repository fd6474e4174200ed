"""The hand-picked hard cases, run before any random search: deterministic, so a declared
expected failure fails every time, and each aimed at a bug class real engines have had.

The scheduling and caching ones are here; each feature drawn adds its own (its `seeds` hook,
engines.testing.features). Two of those here are cases the search rarely draws:

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
from collections.abc import Callable, Sequence

from engines.protocol import Request, SamplingParams
from engines.testing.features import FEATURES, default_drawing
from engines.testing.features.base import AloneFn, pseudo_tokens, short_and_long
from engines.testing.limits import EngineLimits
from engines.testing.penalty_cases import penalty_cases
from engines.testing.workload import Abort, Workload

__all__ = ["again_after_finish", "seed_workloads", "seeded"]


def seed_workloads(limits: EngineLimits, *, alone: AloneFn | None = None) -> list[Workload]:
    """More requests than the engine runs at once with uneven budgets; one long prompt among
    short ones in staggered arrivals; slot reuse after the engine idled; aborts of a running,
    a waiting and a finished request; stop ids at the first and the last budgeted token;
    seeded sampling beside greedy and unseeded; prompts sharing whole KV blocks, and a block
    after two different prefixes; near misses of a cached and a running prompt; prompts and
    budgets across each declared position threshold; the same prompts again after they
    finished (full prefix hits); seeded sampling past a KV pool (`seeded`, below);
    the whole context; penalties on each prompt's own continuation
    (engines.testing.penalty_cases); then each drawn feature's own (`limits` may be a check's
    Drawing: plain limits draw what every check draws)."""
    drawing = default_drawing(limits)
    v = limits.vocab_size
    budget = max(1, min(limits.max_tokens, 4))
    lp = limits.logprobs

    def req(i: int, prompt: Sequence[int], max_tokens: int, **kw: object) -> Request:
        params = SamplingParams(max_tokens=max(1, min(max_tokens, limits.max_model_len - 1)),
                                logprobs=lp, prompt_logprobs=drawing.prompt_logprobs,
                                **kw)  # type: ignore[arg-type]
        return Request(tuple(prompt)[: limits.max_model_len - params.max_tokens], params,
                       request_id=f"r{i}")

    burst = [req(i, [(7 * i + j) % v for j in range(1 + i % 3)], 1 + (i % 2) * 3)
             for i in range(limits.burst)]
    mixed = short_and_long(limits, req)
    reuse = [req(0, [9, 8], 1), req(1, [3, 1, 4], 3), req(2, [9, 8], 1), req(3, [2, 7, 1], 2)]
    out = [
        Workload(tuple(burst), tuple(0 for _ in burst), label="more requests than slots"),
        Workload(tuple(mixed), (0, 1, 1, 2), label="long prompt among short ones"),
        Workload(tuple(reuse), (0, 0, 1, 1 + budget + 4), label="slot reuse after idle"),
    ]
    blk = limits.block
    if limits.max_model_len > 3 * blk + limits.long_budget:
        a, x, c = (pseudo_tokens(s, blk, v) for s in (1, 2, 3))
        # x follows a, then c, then starts a prompt: a prefix cache keyed on a block's own
        # tokens alone hands the later ones KV computed in another context.
        shared = [req(0, a + x + (5,), limits.long_budget), req(1, c + x + (6,), 3),
                  req(2, a + x + (7, 8), 3), req(3, a + x + (5,), 2), req(4, x + (9,), 3)]
        out.append(Workload(tuple(shared), (0, 0, 1, 3, 4), label="shared prefix blocks"))
    if limits.max_model_len > 2 * blk + 3 + budget:
        out.append(_near_misses(limits, req, budget))
    if limits.reachable_thresholds:
        out.append(_past_thresholds(limits, req))
    if limits.kv_blocks is not None:
        out.append(_past_the_pool(limits, req))
    pools = {*limits.variant_pools, *([(limits.kv_blocks, limits.slots)]
                                      if limits.kv_blocks is not None else [])}
    for blocks, seats in sorted(pools):
        found = _overflowing(limits, req, blocks, seats)
        if found is not None:
            out.append(found)
            if limits.sampling:  # the same, seeded: a preempted request keeps its RNG
                out.append(seeded(found))
    again = again_after_finish(limits, req, min(budget, 2))
    if again is not None:
        out.append(again)
    whole = max(1, limits.max_model_len - 2)
    edge = [req(0, pseudo_tokens(9, whole, v), 2), req(1, [3, 4], budget)]
    out.append(Workload(tuple(edge), (0, 1), label="the whole context, admitted mid-stream"))
    if limits.abortable:
        # A running request, a waiting one, and one that already finished (a no-op).
        aborts = (Abort(0, f"r{len(burst) - 1}"), Abort(1, "r1"), Abort(2, "r0"))
        out.append(Workload(tuple(burst), tuple(0 for _ in burst), aborts, label="aborts"))
    if alone is not None:
        out.append(_stop_edges(limits, alone, budget))
        penalties = penalty_cases(limits, req, alone)
        if penalties is not None:
            out.append(penalties)
    if limits.sampling:
        # The unseeded request first, so it shares the first step with seeded ones however
        # few slots the engine has; six distinct seeds and one repeated.
        unseeded = req(0, (3, 1), budget, temperature=1.0)
        sampled = [req(i + 1, (3, 1), budget, temperature=1.0, seed=s)
                   for i, s in enumerate((11, 22, 33, 44, 55, 66, 11))]
        out.append(Workload((unseeded, *sampled, req(8, (2,), budget)), (0,) * 8 + (1,),
                            label="seeded sampling beside unseeded and greedy"))
    for feature in FEATURES:  # each drawn feature's own, in the registry's order
        if feature.seeds is not None and drawing.draws(feature):
            out += feature.seeds(drawing, req, alone)
    return out


def _stop_edges(limits: EngineLimits, alone: AloneFn, budget: int) -> Workload:
    """Stops that fire on the first token (listed after one that never fires), on the last
    budgeted token (STOP, not LENGTH), and a prompt token that must not stop the request."""
    lp = limits.logprobs
    p0, p1, p2 = (1, 2, 3), (4, 5), (6, 7)
    first = alone(p0, SamplingParams(max_tokens=budget, logprobs=lp))
    last = alone(p1, SamplingParams(max_tokens=budget, logprobs=lp))
    plain = alone(p2, SamplingParams(max_tokens=budget, logprobs=lp))
    never = next(t for t in range(limits.vocab_size) if t not in first)
    in_prompt = [t for t in p2 if t not in plain][:1]
    at_last = last[-1] if list(last).index(last[-1]) == len(last) - 1 else None
    stops = [
        Request(p0, SamplingParams(max_tokens=budget, stop_token_ids=(never, first[0]),
                                   logprobs=lp), request_id="r0"),
        Request(p1, SamplingParams(max_tokens=budget, logprobs=lp,
                                   stop_token_ids=(at_last,) if at_last is not None else ()),
                request_id="r1"),
        Request(p2, SamplingParams(max_tokens=budget, stop_token_ids=tuple(in_prompt),
                                   logprobs=lp), request_id="r2"),
    ]
    return Workload(tuple(stops), (0, 0, 1), label="stop tokens at the edges")


def _past_the_pool(limits: EngineLimits, req: Callable[..., Request]) -> Workload:
    """As many requests as run at once, with prompts and budgets that together need a
    quarter more KV blocks than the pool holds (where the context allows): an engine that
    preempts must do so here, and give every request its tokens all the same."""
    assert limits.kv_blocks is not None
    n = max(2, min(limits.slots, 16))
    budget = max(1, min(limits.long_budget, limits.max_model_len // 4))
    need = -(-limits.kv_blocks * limits.block * 5 // 4 // n) - budget
    length = max(1, min(limits.max_model_len - budget, need))
    reqs = [req(i, pseudo_tokens(100 + i, length, limits.vocab_size), budget) for i in range(n)]
    return Workload(tuple(reqs), tuple(0 for _ in reqs), label="more KV than the pool holds")


def _overflowing(limits: EngineLimits, req: Callable[..., Request], blocks: int,
                 seats: int) -> Workload | None:
    """For a pool of `blocks` serving `seats` requests at once: that many requests (16 at
    most) whose prompts fill most of the pool, so that every one is admitted, and whose
    outputs then need a quarter more blocks than it holds: the engine must preempt while
    they decode. None where whole-context requests in every seat still fit the pool."""
    n = max(2, min(seats, 16))
    tokens = -(-blocks * limits.block * 5 // 4 // n)
    if tokens > limits.max_model_len or seats * -(-limits.max_model_len // limits.block) <= blocks:
        return None
    prompt = max(1, tokens * 3 // 5)
    reqs = [req(i, pseudo_tokens(300 + i, prompt, limits.vocab_size), tokens - prompt)
            for i in range(n)]
    return Workload(tuple(reqs), (0,) * n,
                    label=f"prompts filling a pool of {blocks} blocks, outputs past it")

def _near_misses(limits: EngineLimits, req: Callable[..., Request], budget: int) -> Workload:
    """A prompt of two full blocks and a tail, then near misses of it while it runs and after
    it finished (its blocks cached): its first block's last token changed (equal up to it), a
    token inside its second block changed, and its second block's last token changed. A
    prefix-cache key that ignores part of a block hands them its KV."""
    blk, v = limits.block, limits.vocab_size
    base = pseudo_tokens(7, 2 * blk + 3, v)

    def changed(pos: int) -> tuple[int, ...]:
        return (*base[:pos], (base[pos] + 1) % v, *base[pos + 1:])

    reqs = [req(0, base, 2 * budget + 4), req(1, changed(blk - 1), budget),
            req(2, changed(blk + blk // 2), budget), req(3, changed(2 * blk - 1), budget),
            req(4, changed(blk - 1), budget)]
    # r1-r3 arrive while r0 decodes (its prompt blocks cached and held); r4 once it is done.
    late = 2 * budget + 4 + 2 * budget + 6
    return Workload(tuple(reqs), (0, 2, 2, 3, late), label="near-miss prompts")


def _past_thresholds(limits: EngineLimits, req: Callable[..., Request]) -> Workload:
    """Per declared position threshold (a sliding window, a RoPE scaling threshold), a prompt
    ending just short of it whose output crosses it, and one ending just past it, beside a
    short request: the code past the threshold runs, in prefill and in decode, batched."""
    reqs: list[Request] = []
    for i, (_, at) in enumerate(limits.reachable_thresholds):
        seed = 200 + 2 * i
        short = max(1, at - 2)
        past = min(at + 3, limits.max_model_len - 2)
        reqs += [req(len(reqs), pseudo_tokens(seed, short, limits.vocab_size),
                     min(6, limits.max_model_len - short)),
                 req(len(reqs) + 1, pseudo_tokens(seed + 1, past, limits.vocab_size),
                     min(3, limits.max_model_len - past))]
    reqs.append(req(len(reqs), (5, 4, 3), 4))
    return Workload(tuple(reqs), tuple(i // 3 for i in range(len(reqs))),
                    label="across the declared position thresholds")


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
