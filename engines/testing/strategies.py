"""Hypothesis strategies for batching workloads: request mixes and arrival schedules.

Public API, for use in your own tests:

- `EngineLimits`: what the strategies need to know about an engine (vocabulary, context,
  slots, optional features); `EngineLimits.of(engine)` reads them through the protocol.
- `prompts`, `sampling_params`, `request_mixes`: requests whose prompt lengths run from 1 up
  to what `max_model_len` allows, skewed so one long prompt sits among short ones, with
  duplicate prompts, budgets from 1, stop ids that really fire (drawn from the request's own
  output served alone, given an `alone` callable) and seeded sampling where supported.
- `arrival_schedules`: a burst at step 0, staggered arrivals, arrivals after the engine has
  drained and idled; `aborts_for` and `bad_requests_for` add aborts at chosen steps and bad
  requests interleaved with the good ones.
- `workloads`: all of it as one `engines.testing.workload.Workload`; `seed_workloads` lists
  the hand-picked hardest cases the suite always runs first.

Everything shrinks toward fewer, shorter, greedy requests arriving together at step 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from engines.protocol import Abortable, Engine, Request, SamplingParams, SlotIntrospection
from engines.testing.workload import Abort, BadRequest, Workload

__all__ = [
    "AloneFn",
    "EngineLimits",
    "arrival_schedules",
    "aborts_for",
    "bad_requests_for",
    "prompts",
    "request_mixes",
    "sampling_params",
    "seed_workloads",
    "workloads",
]

# Serves (prompt, params) alone and returns the generated token ids (AloneOracle.tokens).
AloneFn = Callable[[Sequence[int], SamplingParams], Sequence[int]]

BAD_KINDS = (
    "empty prompt",
    "out-of-vocabulary token",
    "negative token",
    "non-integer token",
    "max_tokens 0",
    "prompt + max_tokens beyond max_model_len",
    "duplicate id",
)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    vocab_size: int
    max_model_len: int
    max_batch_size: int | None = None  # None: no SlotIntrospection
    abortable: bool = False
    seeded_sampling: bool = False  # temperature > 0 with a seed is reproducible alone
    logprobs: int = 0  # top candidates every request asks for (tie-aware parity)
    max_tokens: int = 6  # largest budget drawn: small budgets keep examples cheap
    short_prompt: int = 8  # the common prompt length cap; one prompt may be far longer

    @classmethod
    def of(cls, engine: Engine, **overrides: object) -> EngineLimits:
        slots = isinstance(engine, SlotIntrospection)
        fields: dict[str, object] = {
            "vocab_size": int(engine.vocab_size),
            "max_model_len": int(engine.max_model_len),
            "max_batch_size": int(engine.max_batch_size) if slots else None,  # type: ignore[attr-defined]
            "abortable": isinstance(engine, Abortable),
        }
        fields.update(overrides)
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def slots(self) -> int:
        """Slots to plan around: max_batch_size, or 4 for an engine that does not say."""
        return self.max_batch_size or 4


def prompts(
    limits: EngineLimits, *, max_len: int | None = None
) -> st.SearchStrategy[tuple[int, ...]]:
    """Token-id prompts of length 1..max_len (default: the short cap)."""
    cap = max(1, min(max_len or limits.short_prompt, limits.max_model_len - 1))
    tok = st.integers(0, limits.vocab_size - 1)
    return st.lists(tok, min_size=1, max_size=cap).map(tuple)


@st.composite
def sampling_params(
    draw: st.DrawFn,
    limits: EngineLimits,
    prompt_len: int = 1,
    *,
    alone_tokens: Sequence[int] | None = None,
) -> SamplingParams:
    """Budgets from 1; greedy or (where the engine supports it) seeded sampling; stop ids
    drawn from `alone_tokens` (the request's own alone output) so that they really fire."""
    room = max(1, min(limits.max_tokens, limits.max_model_len - prompt_len))
    max_tokens = draw(st.integers(1, room), label="max_tokens")
    temperature, seed = 0.0, None
    if limits.seeded_sampling and draw(st.booleans(), label="sampled"):
        temperature = draw(st.sampled_from([1.0, 0.7]), label="temperature")
        seed = draw(st.integers(0, 2**16), label="seed")
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed,
                          logprobs=limits.logprobs)


@st.composite
def _stops(draw: st.DrawFn, limits: EngineLimits, own: Sequence[int]) -> tuple[int, ...]:
    if not own or not draw(st.booleans(), label="has_stop"):
        return ()
    fire = draw(st.sampled_from(sorted(set(own))), label="stop_from_own_output")
    extra = draw(st.lists(st.integers(0, limits.vocab_size - 1), max_size=2), label="more_stops")
    stops = list(dict.fromkeys([*extra, fire]))
    return tuple(draw(st.permutations(stops)))


@st.composite
def request_mixes(
    draw: st.DrawFn,
    limits: EngineLimits,
    *,
    alone: AloneFn | None = None,
    min_size: int = 1,
    max_size: int | None = None,
) -> list[Request]:
    """A list of requests with display ids r0, r1, ...

    Up to max_size (default: one more than the slots, at most 10) requests; at most one
    prompt long (up to the context minus its budget), the rest short; some prompts repeat an
    earlier one exactly. With `alone`, some requests stop on a token of their own output.
    """
    n_max = max_size if max_size is not None else min(limits.slots + 1, 10)
    n = draw(st.integers(min_size, max(min_size, n_max)), label="n_requests")
    long_at = draw(st.none() | st.integers(0, n - 1), label="long_prompt_at")
    out: list[Request] = []
    for i in range(n):
        if out and draw(st.integers(0, 4), label="duplicate") == 0:
            prompt = draw(st.sampled_from([r.prompt_token_ids for r in out]), label="same_prompt")
        elif i == long_at:
            room = limits.max_model_len - 1
            prompt = draw(prompts(limits, max_len=room), label="long_prompt")
        else:
            prompt = draw(prompts(limits), label="prompt")
        params = draw(sampling_params(limits, len(prompt)), label=f"r{i}.params")
        if alone is not None:
            own = alone(prompt, params)
            stops = draw(_stops(limits, own), label=f"r{i}.stop_token_ids")
            params = SamplingParams(params.max_tokens, stops, params.temperature, params.seed,
                                    params.logprobs)
        out.append(Request(prompt, params, request_id=f"r{i}"))
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


def _bad_request(limits: EngineLimits, kind: str, prompt: tuple[int, ...], rid: str) -> Request:
    if kind == "empty prompt":
        return Request((), SamplingParams(max_tokens=1), request_id=rid)
    if kind == "out-of-vocabulary token":
        return Request((*prompt, limits.vocab_size), SamplingParams(max_tokens=1), request_id=rid)
    if kind == "negative token":
        return Request((-1, *prompt), SamplingParams(max_tokens=1), request_id=rid)
    if kind == "non-integer token":
        return Request((*prompt, 1.5), SamplingParams(max_tokens=1), request_id=rid)  # type: ignore[arg-type]
    if kind == "max_tokens 0":
        return Request(prompt, SamplingParams(max_tokens=0), request_id=rid)
    too_many = limits.max_model_len - len(prompt) + 1
    return Request(prompt, SamplingParams(max_tokens=too_many), request_id=rid)


@st.composite
def bad_requests_for(
    draw: st.DrawFn,
    limits: EngineLimits,
    requests: Sequence[Request],
    arrivals: Sequence[int],
    *,
    min_bad: int = 0,
    max_bad: int = 2,
) -> tuple[BadRequest, ...]:
    """Bad requests interleaved with the good ones. A "duplicate id" one reuses the id of a
    request added in the same step (so it is surely in flight) with a different prompt."""
    kinds = draw(st.lists(st.sampled_from(BAD_KINDS), min_size=min_bad, max_size=max_bad),
                 label="bad_kinds")
    last = max(arrivals, default=0) + 2
    out = []
    for j, kind in enumerate(kinds):
        rid = f"bad{j}"
        prompt = draw(prompts(limits, max_len=4), label=f"{rid}.prompt")
        if kind == "duplicate id" and requests:
            i = draw(st.integers(0, len(requests) - 1), label=f"{rid}.duplicates")
            req = Request((*prompt, 0), SamplingParams(max_tokens=1), request_id=rid)
            out.append(BadRequest(arrivals[i], kind, req, duplicate_of=requests[i].request_id))
        elif kind != "duplicate id":
            step = draw(st.integers(0, last), label=f"{rid}.step")
            out.append(BadRequest(step, kind, _bad_request(limits, kind, prompt, rid)))
    return tuple(out)


@st.composite
def workloads(
    draw: st.DrawFn,
    limits: EngineLimits,
    *,
    alone: AloneFn | None = None,
    min_requests: int = 1,
    max_requests: int | None = None,
    aborts: bool = True,
    min_bad: int = 0,
    max_bad: int = 1,
) -> Workload:
    """A whole workload: a request mix, its arrival schedule, aborts (for Abortable engines,
    when `aborts`) and min_bad..max_bad bad requests."""
    reqs = draw(request_mixes(limits, alone=alone, min_size=min_requests, max_size=max_requests))
    idle = limits.max_tokens + 2
    arrivals = draw(arrival_schedules(len(reqs), idle_gap=idle))
    plan = draw(aborts_for(reqs, arrivals)) if aborts and limits.abortable else ()
    bad = draw(bad_requests_for(limits, reqs, arrivals, min_bad=min_bad, max_bad=max_bad))
    return Workload(tuple(reqs), arrivals, plan, bad)


def seed_workloads(
    limits: EngineLimits, *, bad: bool = False, alone: AloneFn | None = None
) -> list[Workload]:
    """The hand-picked hard cases, run before any random search (deterministic, so declared
    expected failures fail every time): more requests than slots with uneven budgets, one long
    prompt among short ones in staggered arrivals, slot reuse after the engine idled."""
    b = limits.slots
    budget = max(1, min(limits.max_tokens, 4))
    room = limits.max_model_len - budget

    def req(i: int, prompt: Sequence[int], max_tokens: int) -> Request:
        return Request(tuple(prompt), SamplingParams(max_tokens=max(1, min(max_tokens, budget)),
                                                      logprobs=limits.logprobs),
                       request_id=f"r{i}")

    v = limits.vocab_size
    burst = [req(i, [(7 * i + j) % v for j in range(1 + i % 3)], 1 + (i % 2) * 3)
             for i in range(b + 1)]
    long_len = max(1, min(room, 48))
    mixed = [req(0, [1, 2, 3], 4), req(1, [(5 * j + 3) % v for j in range(long_len)], 3),
             req(2, [4], 2), req(3, [1, 2, 3], 4)]
    reuse = [req(0, [9, 8], 1), req(1, [3, 1, 4], 3), req(2, [9, 8], 1), req(3, [2, 7, 1], 2)]
    out = [
        Workload(tuple(burst), tuple(0 for _ in burst), label="more requests than slots"),
        Workload(tuple(mixed), (0, 1, 1, 2), label="long prompt among short ones"),
        Workload(tuple(reuse), (0, 0, 1, 1 + budget + 4), label="slot reuse after idle"),
    ]
    if limits.abortable:
        # A running request, a waiting one, and one that already finished (a no-op).
        aborts = (Abort(0, f"r{b}"), Abort(1, "r1"), Abort(2, "r0"))
        out.append(Workload(tuple(burst), tuple(0 for _ in burst), aborts, label="aborts"))
    if alone is not None:
        # Stops that fire: on the first token (listed after a stop that never fires), and on
        # a later one; beside a request without stops.
        p0, p1 = (1, 2, 3), (4, 5)
        first = alone(p0, SamplingParams(max_tokens=budget, logprobs=limits.logprobs))
        later = alone(p1, SamplingParams(max_tokens=budget, logprobs=limits.logprobs))
        never = next(t for t in range(v) if t not in first)
        stops = [Request(p0, SamplingParams(max_tokens=budget, stop_token_ids=(never, first[0]),
                                            logprobs=limits.logprobs), request_id="r0"),
                 Request(p1, SamplingParams(max_tokens=budget, stop_token_ids=(later[-1],),
                                            logprobs=limits.logprobs), request_id="r1"),
                 req(2, [6, 7], budget)]
        out.append(Workload(tuple(stops), (0, 0, 1), label="stop tokens"))
    if limits.seeded_sampling:
        sampled = [Request((3, 1), SamplingParams(max_tokens=budget, temperature=1.0, seed=s,
                                                  logprobs=limits.logprobs), request_id=f"r{i}")
                   for i, s in enumerate((11, 22))]
        out.append(Workload((*sampled, req(2, [2], budget)), (0, 0, 1), label="seeded sampling"))
    if bad:
        kinds = [k for k in BAD_KINDS if k != "duplicate id"]
        bads = [BadRequest(i % 3, k, _bad_request(limits, k, (1, 2), f"bad{i}"))
                for i, k in enumerate(kinds)]
        dup = BadRequest(0, "duplicate id", Request((5, 5), SamplingParams(max_tokens=1),
                                                    request_id="bad9"), duplicate_of="r0")
        out.append(Workload(tuple(mixed), (0, 1, 1, 2), bad=(*bads, dup), label="bad requests"))
    return out
