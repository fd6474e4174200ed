"""Hypothesis strategies for batching workloads: request mixes and arrival schedules.

Public API, for use in your own tests:

- `EngineLimits` (engines.testing.limits): what the strategies need to know about an engine;
  `EngineLimits.of(engine)` reads it through the protocol. Every strategy also takes a
  `Drawing` (engines.testing.features): the limits plus the features one check draws; given
  plain limits, a strategy draws what every check draws (features.default_drawing).
- `prompts`, `sampling_params`, `request_mixes`: short prompts mostly, some built from a small
  pool of shared KV-block-sized chunks (so prefix caches hit, and the same block follows
  different prefixes), some long ones at the edges that matter (the whole context, block and
  power-of-two lengths and one either side) admitted mid-stream, duplicates; budgets from 1,
  a few long enough to cross KV blocks; greedy, seeded and unseeded sampling; stop ids that
  fire at the first token, at the last budgeted one, anywhere, several at once, or a prompt
  token (drawn from the request's own output served alone, given an `alone` callable);
  near misses of a cached or running prompt (one token of one of its full KV blocks
  changed); prompts and budgets that cross the engine's declared position thresholds (a
  sliding window, a RoPE scaling threshold); and bursts of more than twice the engine's
  concurrency; and whatever the features drawn add (engines.testing.features: constraints,
  stop strings, tenants on some requests, for engines that declare them).
- `arrival_schedules`, `aborts_for`: a burst at step 0, staggered arrivals, arrivals after the
  engine has drained and idled; aborts while waiting, running or already done.
- `workloads`: all of it, the features' extra requests (seed groups, n > 1 families, beams),
  composed with the features they compose with (engines.testing.composition), and bad
  requests (engines.testing.features.bad_requests), as one Workload.

Everything shrinks toward fewer, shorter, greedy requests arriving together at step 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.composition import composed, late_aborts
from engines.testing.features import FEATURES, Drawing, default_drawing
from engines.testing.features.bad_requests import bad_requests_for
from engines.testing.features.base import AloneFn, prompts, pseudo_tokens
from engines.testing.features.constraints import satisfiable
from engines.testing.limits import EngineLimits
from engines.testing.processing import GREEDY_FILTERS
from engines.testing.workload import Abort, Workload

__all__ = [
    "AloneFn",
    "Drawing",
    "EngineLimits",
    "aborts_for",
    "arrival_schedules",
    "prompts",
    "request_mixes",
    "sampling_params",
    "workloads",
]

def edge_lengths(limits: EngineLimits, room: int) -> list[int]:
    """Lengths up to `room` where engines' off-by-ones live: all of it, block and
    power-of-two multiples, and one either side of each."""
    edges = {room, room - 1}
    for step in (limits.block, *(2**j for j in range(4, 13))):
        for k in range(1, room // step + 1):
            edges |= {k * step - 1, k * step, k * step + 1}
    return sorted(n for n in edges if 1 <= n <= room)


@st.composite
def long_prompts(draw: st.DrawFn, limits: EngineLimits, room: int) -> tuple[int, ...]:
    length = draw(st.sampled_from(edge_lengths(limits, room)) | st.integers(1, room),
                  label="long_prompt_len")
    seed = draw(st.integers(0, 2**16), label="long_prompt_seed")
    return pseudo_tokens(seed, length, limits.vocab_size)


@st.composite
def shared_prefix_prompts(draw: st.DrawFn, limits: EngineLimits,
                          pool: Sequence[tuple[int, ...]], room: int) -> tuple[int, ...]:
    """Blocks from the workload's pool, in any order, then a tail: prompts share whole-block
    prefixes, and one block may follow different prefixes (a prefix cache must tell them
    apart)."""
    most = max(1, min(3, room // limits.block))
    blocks = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=most), label="blocks")
    prompt = tuple(t for b in blocks for t in b)[:room]
    tail = draw(prompts(limits, max_len=limits.block), label="tail") if len(prompt) < room else ()
    return (prompt + tail)[:room]


def near_miss_sources(prompts: Sequence[tuple[int, ...]], block: int) -> list[tuple[int, ...]]:
    """Prompts with a full KV block that a prefix cache looks up (a block before the last
    token, whose logits are always computed)."""
    return [p for p in prompts if (len(p) - 1) // block >= 1]


@st.composite
def near_miss_prompts(draw: st.DrawFn, limits: EngineLimits,
                      sources: Sequence[tuple[int, ...]], room: int) -> tuple[int, ...]:
    """An earlier prompt (cached or still running) with one token of one of its full blocks
    changed: the block's last token (equal up to it), or any of them. A prefix-cache key that
    ignores part of a block hands this prompt the other one's KV."""
    source = draw(st.sampled_from(list(sources)), label="near_miss_of")
    full = (len(source) - 1) // limits.block
    j = draw(st.integers(0, full - 1), label="near_miss_block")
    if draw(st.booleans(), label="near_miss_at_last"):
        pos = (j + 1) * limits.block - 1
    else:
        pos = draw(st.integers(j * limits.block, (j + 1) * limits.block - 1),
                   label="near_miss_pos")
    shift = draw(st.integers(1, limits.vocab_size - 1), label="near_miss_token")
    prompt = list(source)
    prompt[pos] = (prompt[pos] + shift) % limits.vocab_size
    return tuple(prompt[:max(room, pos + 1)])


def is_near_miss(prompt: Sequence[int], of: Sequence[int], block: int) -> bool:
    """Whether `prompt` equals `of` but for one token of a block full in both (everything
    before that block equal, and the rest of the block too)."""
    d = next((i for i, (a, b) in enumerate(zip(prompt, of, strict=False)) if a != b), None)
    if d is None:
        return False
    end = (d // block + 1) * block
    return min(len(prompt), len(of)) >= end and tuple(prompt[d + 1:end]) == tuple(of[d + 1:end])


@st.composite
def crossing(draw: st.DrawFn, limits: EngineLimits,
             params: SamplingParams) -> tuple[tuple[int, ...], SamplingParams]:
    """A prompt and budget that pass one of the engine's declared position thresholds (a
    sliding window, a RoPE scaling threshold): the prompt ends just before it and the output
    crosses it, or the prompt itself ends just past it."""
    name, at = draw(st.sampled_from(list(limits.reachable_thresholds)), label="threshold")
    before = draw(st.booleans(), label="cross_while_decoding")
    if before:
        d = draw(st.integers(0, min(8, at - 1)), label="tokens_short_of_threshold")
        length = at - d
        budget = d + 1 + draw(st.integers(0, 3), label="tokens_past_threshold")
    else:
        length = at + 1 + draw(st.integers(0, 8), label="prompt_past_threshold")
        budget = params.max_tokens
    length = min(length, limits.max_model_len - 1)
    budget = max(1, min(budget, limits.max_model_len - length))
    seed = draw(st.integers(0, 2**16), label="crossing_prompt_seed")
    params = dataclasses.replace(params, max_tokens=budget,
                                 min_tokens=min(params.min_tokens, budget))
    return pseudo_tokens(seed, length, limits.vocab_size), params


@st.composite
def sampling_params(
    draw: st.DrawFn, limits: EngineLimits, prompt_len: int = 1, *, long: bool = False
) -> SamplingParams:
    """A budget from 1 (or, `long`, one that crosses KV blocks); greedy mostly, else seeded or
    unseeded sampling where the engine has not declared that it cannot reproduce seeds."""
    drawing = default_drawing(limits)
    room = max(1, limits.max_model_len - prompt_len)
    cap = limits.long_budget if long else limits.max_tokens
    max_tokens = draw(st.integers(1, max(1, min(cap, room))), label="max_tokens")
    temperature, seed = 0.0, None
    kinds = ["greedy", "greedy", "seeded", "unseeded"]
    if drawing.greedy_filters:
        kinds += ["greedy_filter", "greedy_filter"]
    kind = draw(st.sampled_from(kinds), label="sampling")
    if kind == "greedy_filter":
        # Unseeded, at a temperature, under a filter that leaves one token: the greedy token
        # whether or not the engine reproduces seeds (the greedy_filters check).
        name = draw(st.sampled_from(drawing.greedy_filters), label="greedy_filter")
        return SamplingParams(max_tokens=max_tokens, logprobs=limits.logprobs,
                              prompt_logprobs=drawing.prompt_logprobs,
                              temperature=draw(st.sampled_from([1.0, 0.7, 1.5]),
                                               label="temperature"),
                              **{name: GREEDY_FILTERS[name]})  # type: ignore[arg-type]
    if limits.sampling and kind != "greedy":
        temperature = draw(st.sampled_from([1.0, 0.7]), label="temperature")
        if kind == "seeded":
            seed = draw(st.integers(0, 2**16), label="seed")
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed,
                            logprobs=limits.logprobs, prompt_logprobs=drawing.prompt_logprobs)
    return draw(processing(limits, params), label="processing")


# Values per logits-processing field, the default first (so shrinking turns a field off):
# ones that bite on the tiny presets' flat distributions (top_k 1 and top_p 0.1 are greedy in
# all but name; min_p 0.3 cuts most of the vocabulary), negatives where the field allows them.
PROCESSING: dict[str, tuple[object, ...]] = {
    "repetition_penalty": (1.0, 1.3, 2.0, 0.7),
    "frequency_penalty": (0.0, 0.5, 1.5, -0.5),
    "presence_penalty": (0.0, 0.5, 2.0, -1.0),
    "top_k": (0, 1, 3, 40),
    "top_p": (1.0, 0.9, 0.5, 0.1),
    "min_p": (0.0, 0.05, 0.3),
}
# Filters change nothing a greedy row chooses: drawn only for sampled rows.
FILTERS = frozenset({"top_k", "top_p", "min_p"})


def _penalized(params: SamplingParams) -> bool:
    return bool(params.repetition_penalty != 1.0 or params.frequency_penalty
                or params.presence_penalty)


@st.composite
def processing(draw: st.DrawFn, limits: EngineLimits, params: SamplingParams) -> SamplingParams:
    """`params` with the logits processing every engine compared declares: one request in
    three asks for some, each field independently, neighbours with and without alike;
    min_tokens anywhere up to the budget (with stop ids drawn later, early ones among them).
    Nothing is drawn for an engine that declares none of them."""
    fields = [f for f in (*PROCESSING, "min_tokens") if f in limits.sampling_fields
              and (f not in FILTERS or params.temperature > 0)]
    if not fields or draw(st.integers(0, 2), label="processed") != 0:
        return params
    change: dict[str, object] = {}
    for name in fields:
        if name == "min_tokens":
            change[name] = draw(st.integers(0, params.max_tokens), label="min_tokens")
        else:
            change[name] = draw(st.sampled_from(PROCESSING[name]), label=name)
    return dataclasses.replace(params, **change)  # type: ignore[arg-type]


@st.composite
def stop_ids(draw: st.DrawFn, limits: EngineLimits, own: Sequence[int],
             prompt: Sequence[int]) -> tuple[int, ...]:
    """Stop ids that fire at the first token, the last budgeted one (STOP must win over
    LENGTH there) or anywhere in `own` (the request's output served alone); several at once;
    or only ids from the prompt, which must not stop anything the prompt holds."""
    where = draw(st.sampled_from(["none", "first", "last", "any", "prompt"]), label="stop_at")
    # Only real ids: an engine that emits ids past its vocabulary is the token range check's
    # to report, and must not turn a good request into a bad one here.
    own = [t for t in own if isinstance(t, int) and 0 <= t < limits.vocab_size]
    if where == "none" or not own:
        return ()
    if where == "prompt":
        return tuple(sorted(set(prompt) - set(own))[:2])
    if where == "first":
        fire = own[0]
    elif where == "last" and own.index(own[-1]) == len(own) - 1:
        fire = own[-1]
    else:
        fire = draw(st.sampled_from(sorted(set(own))), label="stop_from_own_output")
    extra = draw(st.lists(st.integers(0, limits.vocab_size - 1), max_size=2), label="more_stops")
    return tuple(draw(st.permutations(list(dict.fromkeys([*extra, fire])))))


@st.composite
def request_mixes(
    draw: st.DrawFn,
    limits: EngineLimits,
    *,
    alone: AloneFn | None = None,
    min_size: int = 1,
    max_size: int | None = None,
    earlier: Sequence[tuple[int, ...]] = (),
) -> list[Request]:
    """A list of requests with display ids r0, r1, ...: usually up to one more than the
    engine runs at once, sometimes a burst of more than twice that (limits.burst). Near
    misses are drawn of the mix's own prompts and of `earlier` ones (the state machine's
    cached or running prompts); prompts and budgets that cross the engine's declared
    position thresholds, where it declares any."""
    drawing = default_drawing(limits)
    small = max(min_size, min(limits.slots + 1, 10))
    n_max = max_size if max_size is not None else small
    if max_size is None and draw(st.integers(0, 5), label="burst") == 0:
        n_max = max(small, limits.burst)
    n = draw(st.integers(min_size, max(min_size, n_max)), label="n_requests")
    pool = [pseudo_tokens(draw(st.integers(0, 2**16), label="block_seed"), limits.block,
                          limits.vocab_size) for _ in range(draw(st.integers(1, 3)))]
    out: list[Request] = []
    longs = 0
    kinds = ["short", "short", "shared", "duplicate", "long", "near_miss"]
    if limits.reachable_thresholds:
        kinds += ["cross", "cross"]
    for i in range(n):
        kind = draw(st.sampled_from(kinds), label=f"r{i}.kind")
        long_budget = draw(st.integers(0, 4), label=f"r{i}.long_budget") == 0
        params = draw(sampling_params(drawing, 1, long=long_budget), label=f"r{i}.params")
        room = limits.max_model_len - params.max_tokens
        sources = near_miss_sources([*earlier, *(r.prompt_token_ids for r in out)],
                                    limits.block)
        if kind == "cross":
            prompt, params = draw(crossing(limits, params), label=f"r{i}.crossing")
            room = limits.max_model_len - params.max_tokens
        elif kind == "near_miss" and sources:
            prompt = draw(near_miss_prompts(limits, sources, room), label=f"r{i}.near_miss")
            left = limits.max_model_len - len(prompt)
            if params.max_tokens > left:
                params = dataclasses.replace(params, max_tokens=left,
                                             min_tokens=min(params.min_tokens, left))
            # `room` stays the prompt's room: a penalized prompt is extended up to it below.
            room = limits.max_model_len - params.max_tokens
        elif kind == "duplicate" and (out or earlier):
            # Of `earlier` too: the state machine's finished prompts, sent again, hit every
            # block they cached (engines.testing.seed_workloads).
            prompt = draw(st.sampled_from([*(r.prompt_token_ids for r in out), *earlier]),
                          label="same_prompt")
            prompt = prompt[:room]
        elif kind == "long" and longs < 2:
            longs += 1
            prompt = draw(long_prompts(limits, room), label=f"r{i}.long_prompt")
        elif kind == "shared" and room >= limits.block:
            prompt = draw(shared_prefix_prompts(limits, pool, room), label=f"r{i}.shared")
        else:
            prompt = draw(prompts(limits, max_len=room), label=f"r{i}.prompt")
        # A crossing request is about positions: no prompt extension or stop id that would
        # move its prompt past the threshold or end its output before it.
        positional = kind == "cross"
        if alone is not None and not positional and _penalized(params) and len(prompt) < room:
            # Penalties bite on tokens the request would generate: extend the prompt by its
            # own greedy continuation (random weights decode in cycles, so the tokens come
            # round again and the penalties change what is chosen).
            more = alone(prompt, SamplingParams(max_tokens=min(8, room - len(prompt))))
            prompt = (*prompt, *more)[:room]
        if not positional:  # the features' per-request params (constraints), where drawn
            for feature in FEATURES:
                if feature.params is not None and drawing.draws(feature):
                    params = draw(feature.params(drawing, prompt, params, alone),
                                  label=f"r{i}.{feature.name}")
        if alone is not None and not positional and not (params.temperature > 0
                                                          and params.seed is None):
            own = alone(prompt, params)
            stops = draw(stop_ids(limits, own, prompt), label=f"r{i}.stop_token_ids")
            if params.min_tokens and own and draw(st.booleans(), label=f"r{i}.early_stop"):
                # A stop id min_tokens must hold back: one the request would generate early.
                early = [t for t in own[:params.min_tokens] if 0 <= t < limits.vocab_size]
                stops = tuple(dict.fromkeys([*early[:1], *stops]))
            params = satisfiable(dataclasses.replace(params, stop_token_ids=stops))
            for feature in FEATURES:  # the features' stops (stop strings), where drawn
                if feature.stops is not None and drawing.draws(feature):
                    params = draw(feature.stops(drawing, own, prompt, params),
                                  label=f"r{i}.{feature.name}")
        out.append(Request(prompt, params, request_id=f"r{i}"))
    for feature in FEATURES:  # the features' say over the whole mix (tenants), where drawn
        if feature.mix is not None and drawing.draws(feature):
            out = draw(feature.mix(drawing, out, max_size), label=feature.name)
    return out


@st.composite
def arrival_schedules(draw: st.DrawFn, n: int, *, idle_gap: int = 8) -> tuple[int, ...]:
    """n nondecreasing arrival steps: gaps of 0 (a burst), 1..3 (staggered) or
    idle_gap..2*idle_gap (long enough that earlier requests drain and the engine idles)."""
    gap = st.integers(0, 0) | st.integers(1, 3) | st.integers(idle_gap, 2 * idle_gap)
    gaps = draw(st.lists(gap, min_size=n, max_size=n), label="arrival_gaps")
    steps, t = [], 0
    for g in gaps:
        t += g
        steps.append(t)
    return tuple(steps)


@st.composite
def aborts_for(
    draw: st.DrawFn, requests: Sequence[Request], arrivals: Sequence[int], *, max_aborts: int = 2
) -> tuple[Abort, ...]:
    """Aborts 0..4 steps after a request's arrival: while waiting, running or already done."""
    picks = draw(st.lists(st.tuples(st.integers(0, len(requests) - 1), st.integers(0, 4)),
                          max_size=max_aborts), label="aborts")
    return tuple(sorted({Abort(arrivals[i] + d, requests[i].request_id) for i, d in picks},
                        key=lambda a: (a.step, str(a.request_id))))


@st.composite
def workloads(
    draw: st.DrawFn,
    limits: EngineLimits,
    *,
    alone: AloneFn | None = None,
    min_requests: int = 1,
    max_requests: int | None = None,
    aborts: bool = True,
) -> Workload:
    """A whole workload: a request mix, the requests the features drawn add to it (a group of
    seeds, n > 1 families, beams), its arrival schedule, aborts (for Abortable engines, when
    `aborts`) and the Drawing's bad requests (`bad`: fewest and most)."""
    drawing = default_drawing(limits)
    reqs = draw(request_mixes(drawing, alone=alone, min_size=min_requests,
                              max_size=max_requests))
    late: list[tuple[str, int]] = []
    for feature in FEATURES:
        if feature.extra is not None and drawing.draws(feature):
            extra = draw(feature.extra(drawing, len(reqs)), label=feature.name)
            # The features it composes with, on its requests (engines.testing.composition).
            both = draw(composed(drawing, feature, extra, alone), label=f"{feature.name}+")
            reqs += both.requests
            late += both.aborts
    idle = drawing.max_tokens + 2
    arrivals = draw(arrival_schedules(len(reqs), idle_gap=idle))
    plan = draw(aborts_for(reqs, arrivals)) if aborts and drawing.abortable else ()
    if aborts and late:
        plan = tuple(sorted({*plan, *late_aborts(reqs, arrivals, late)},
                            key=lambda a: (a.step, str(a.request_id))))
    low, high = drawing.bad
    bad = draw(bad_requests_for(drawing, reqs, arrivals, min_bad=low, max_bad=high))
    return Workload(tuple(reqs), arrivals, plan, bad)
