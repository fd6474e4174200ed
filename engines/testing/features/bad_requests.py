"""Bad requests, each refused at add_request with InvalidRequest naming the field and value.

Every kind sits just past a boundary: the first token id past the vocabulary, -1, a budget
one past the context, so an off-by-one in an engine's validation is what fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, short_and_long
from engines.testing.limits import EngineLimits
from engines.testing.workload import BadRequest, Workload

__all__ = ["BAD_KINDS", "FEATURE", "PROCESSING_KINDS", "bad_kinds", "bad_request",
           "bad_requests_for", "bad_workload"]

BAD_KINDS = (
    "empty prompt",
    "out-of-vocabulary token",
    "negative token",
    "non-integer token",
    "max_tokens 0",
    "prompt + max_tokens beyond max_model_len",
    "stop id vocab_size",
    "stop id -1",
    "duplicate id",
)
# A logits-processing field just past its boundary (engines.protocol.SamplingParams), drawn
# only for an engine that declares the field in supported_sampling: kind -> (field, value).
PROCESSING_KINDS: dict[str, tuple[str, object]] = {
    "top_k -2": ("top_k", -2),
    "top_p 0": ("top_p", 0.0),
    "top_p above 1": ("top_p", 1.0 + 1e-6),
    "min_p negative": ("min_p", -1e-6),
    "min_p above 1": ("min_p", 1.0 + 1e-6),
    "repetition_penalty 0": ("repetition_penalty", 0.0),
    "presence_penalty above 2": ("presence_penalty", 2.0 + 1e-6),
    "frequency_penalty below -2": ("frequency_penalty", -2.0 - 1e-6),
    "frequency_penalty NaN": ("frequency_penalty", float("nan")),
    "min_tokens above max_tokens": ("min_tokens", 2),
    # Wave 4's output surface (vLLM refuses both too).
    "n 0": ("n", 0),
    "empty stop string": ("stop", ("",)),
}


def bad_kinds(limits: EngineLimits) -> tuple[str, ...]:
    """The kinds to draw for this engine: BAD_KINDS, and a processing field's only where the
    engine declares it (an engine that does not may refuse it for that reason alone)."""
    return (*BAD_KINDS, *(k for k, (name, _) in PROCESSING_KINDS.items()
                          if name in limits.sampling_fields))


def bad_request(limits: EngineLimits, kind: str, prompt: tuple[int, ...], rid: str) -> Request:
    """A request of the given bad kind around `prompt` (not for "duplicate id")."""
    one = SamplingParams(max_tokens=1)
    if kind == "empty prompt":
        return Request((), one, request_id=rid)
    if kind == "out-of-vocabulary token":
        return Request((*prompt, limits.vocab_size), one, request_id=rid)
    if kind == "negative token":
        return Request((-1, *prompt), one, request_id=rid)
    if kind == "non-integer token":
        return Request((*prompt, 1.5), one, request_id=rid)  # type: ignore[arg-type]
    if kind == "max_tokens 0":
        return Request(prompt, SamplingParams(max_tokens=0), request_id=rid)
    if kind == "stop id vocab_size":
        return Request(prompt, SamplingParams(max_tokens=1, stop_token_ids=(limits.vocab_size,)),
                       request_id=rid)
    if kind in PROCESSING_KINDS:
        name, value = PROCESSING_KINDS[kind]
        change: dict[str, object] = {name: value}
        return Request(prompt, dataclasses.replace(one, **change),  # type: ignore[arg-type]
                       request_id=rid)
    if kind == "stop id -1":
        return Request(prompt, SamplingParams(max_tokens=1, stop_token_ids=(-1,)),
                       request_id=rid)
    assert kind == "prompt + max_tokens beyond max_model_len", kind
    one_past = limits.refuse_past - len(prompt) + 1
    return Request(prompt, SamplingParams(max_tokens=one_past), request_id=rid)


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
    kinds = draw(st.lists(st.sampled_from(bad_kinds(limits)), min_size=min_bad,
                          max_size=max_bad), label="bad_kinds")
    last = max(arrivals, default=0) + 2
    out = []
    for j, kind in enumerate(kinds):
        rid = f"bad{j}"
        prompt = tuple(draw(st.lists(st.integers(0, limits.vocab_size - 1), min_size=1,
                                     max_size=4), label=f"{rid}.prompt"))
        if kind == "duplicate id" and requests:
            i = draw(st.integers(0, len(requests) - 1), label=f"{rid}.duplicates")
            req = Request((*prompt, 0), SamplingParams(max_tokens=1), request_id=rid)
            out.append(BadRequest(arrivals[i], kind, req, duplicate_of=requests[i].request_id))
        elif kind != "duplicate id":
            step = draw(st.integers(0, last), label=f"{rid}.step")
            out.append(BadRequest(step, kind, bad_request(limits, kind, prompt, rid)))
    return tuple(out)


def bad_workload(limits: EngineLimits, req: Make) -> Workload:
    """Every bad kind beside four good requests (a long prompt among short ones), a duplicate
    id of a request surely in flight last."""
    kinds = [k for k in bad_kinds(limits) if k != "duplicate id"]
    bads = [BadRequest(i % 3, k, bad_request(limits, k, (1, 2), f"bad{i}"))
            for i, k in enumerate(kinds)]
    dup = BadRequest(0, "duplicate id", Request((5, 5), SamplingParams(max_tokens=1),
                                                request_id=f"bad{len(kinds)}"),
                     duplicate_of="r0")
    return Workload(tuple(short_and_long(limits, req)), (0, 1, 1, 2), bad=(*bads, dup),
                    label="bad requests")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return [bad_workload(drawing, req)] if drawing.bad_seed_workloads else []


# Every check's workloads hold 0..1 bad requests (Drawing.bad's default); the check that uses
# this feature (bad_input) gets 1..2 in each, and the seed workload of every bad kind.
FEATURE = Feature("bad_requests", needs="nothing", declared=lambda limits: True,
                  configure=lambda limits, setting: {"bad": (1, 2), "bad_seed_workloads": True},
                  seeds=_seeds)
