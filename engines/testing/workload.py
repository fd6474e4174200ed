"""A workload: requests with arrival steps, aborts and bad requests; and the source lines a
report's script renders a request and a factory with (engines.testing.rerun_script).

Display ids ("r0", "bad1") are what a reader sees; the driver gives every run its own
unique runtime ids, so one engine can serve many workloads in a row.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.factories import is_url
from engines.protocol import Request, SamplingParams, StepOutput

__all__ = [
    "Abort",
    "AdapterSwap",
    "BadRequest",
    "Workload",
    "factory_source",
    "render_outputs",
    "render_request",
]



def _children(r: Request) -> int:
    """How many children the request has (n > 1), each served in full, perhaps in turn."""
    n = r.params.n
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1

@dataclass(frozen=True, slots=True)
class Abort:
    step: int  # abort_request is called just before this step() call
    request_id: Hashable  # display id of one of the workload's requests


@dataclass(frozen=True, slots=True)
class BadRequest:
    step: int  # add_request is called just before this step() call
    kind: str  # what is wrong with it, in words
    request: Request  # for kind "duplicate id": a copy of an in-flight request's id
    duplicate_of: Hashable | None = None  # display id whose runtime id it reuses


@dataclass(frozen=True, slots=True)
class AdapterSwap:
    """An adapter re-added under its own name with other weights (LoRAManagement): just
    before this step() call, remove_lora(name), then add_lora(name, the directory the
    adapter `like` is served from now). After the drain the recorder puts `name`'s own
    directory back, so a reused engine serves what it declared before."""

    step: int
    name: str  # an adapter the engine serves
    like: str  # another adapter it serves, from another directory: its weights are taken


@dataclass(frozen=True, slots=True)
class Workload:
    requests: tuple[Request, ...]  # good requests, display ids r0, r1, ...
    arrivals: tuple[int, ...]  # arrival step of each request, same order
    aborts: tuple[Abort, ...] = ()
    bad: tuple[BadRequest, ...] = ()
    label: str = field(default="", compare=False)  # e.g. the seed workload's name
    swaps: tuple[AdapterSwap, ...] = ()  # adapters re-added with other weights, by step

    def __post_init__(self) -> None:
        assert len(self.requests) == len(self.arrivals), "one arrival step per request"

    def with_ids(self, ids: Mapping[Hashable, Hashable]) -> Workload:
        """The same workload with its requests' display ids renamed by `ids`."""
        return Workload(
            tuple(dataclasses.replace(r, request_id=ids[r.request_id]) for r in self.requests),
            self.arrivals,
            tuple(dataclasses.replace(a, request_id=ids[a.request_id]) for a in self.aborts),
            tuple(dataclasses.replace(b, duplicate_of=ids[b.duplicate_of])
                  if b.duplicate_of is not None else b for b in self.bad),
            self.label,
            self.swaps,
        )

    @property
    def last_event_step(self) -> int:
        steps = [*self.arrivals, *(a.step for a in self.aborts), *(b.step for b in self.bad),
                 *(s.step for s in self.swaps)]
        return max(steps, default=0)

    def step_bound(self) -> int:
        """Steps within which every request must finish: generous for any sane scheduler (one
        request at a time, its prompt prefilled 4 tokens a step, everything recomputed once
        after a preemption), so only a stuck engine exceeds it."""
        work = sum((2 * (r.params.max_tokens + 2) + -(-len(r.prompt_token_ids) // 4))
                   * _children(r) for r in self.requests)
        return self.last_event_step + work + 8

    def __repr__(self) -> str:
        reqs = ", ".join(
            f"{r.request_id}@{s}:{len(r.prompt_token_ids)}+{r.params.max_tokens}"
            for r, s in zip(self.requests, self.arrivals, strict=True)
        )
        extra = "".join(f", abort {a.request_id}@{a.step}" for a in self.aborts)
        extra += "".join(f", bad {b.kind}@{b.step}" for b in self.bad)
        extra += "".join(f", {s.name} re-added as {s.like}@{s.step}" for s in self.swaps)
        return f"Workload({reqs}{extra})"


def _params_src(p: SamplingParams) -> str:
    defaults = SamplingParams()
    parts = [
        f"{name}={getattr(p, name)!r}"
        for name in SamplingParams.__dataclass_fields__  # every field, in declared order
        if getattr(p, name) != getattr(defaults, name)
    ]
    return f"SamplingParams({', '.join(parts)})"


def render_request(r: Request) -> str:
    tenant = (f", lora={r.lora!r}" if r.lora is not None else "") + (
        f", cache_salt={r.cache_salt!r}" if r.cache_salt is not None else "")
    return (f"Request({r.prompt_token_ids!r}, {_params_src(r.params)}, "
            f"request_id={r.request_id!r}{tenant})")


def render_outputs(outputs: Sequence[StepOutput]) -> str:
    """One step's outputs in a line: each request's id (with its child's index), the tokens
    it got, and how it finished; the fields a StepOutput leaves at their defaults unsaid."""
    parts = []
    for out in outputs:
        who = f"{out.request_id}" + (f"[{out.index}]" if out.index else "")
        said = f"{who} {list(out.token_ids)}"
        if out.finish_reason is not None:
            said += f" {out.finish_reason.value}"
        if out.text:
            said += f" {out.text!r}"
        parts.append(said)
    return "; ".join(parts) or "(no output)"


def factory_source(factory: Callable[..., Any], spec: str | None) -> str:
    """Source lines binding `make_engine` for a runnable script."""
    if spec and is_url(spec):
        # A server by URL: the same loader the suite used (engines.factories).
        return f"from engines.factories import load_factory\nmake_engine = load_factory({spec!r})"
    if spec:
        module, _, attr = spec.partition(":")
        head, _, rest = attr.partition(".")
        if not rest:
            return f"from {module} import {head} as make_engine"
        return f"from {module} import {head}\nmake_engine = {attr}"
    if isinstance(factory, functools.partial):
        inner = factory_source(factory.func, None)
        if inner.startswith("from "):
            args = [repr(a) for a in factory.args]
            args += [f"{k}={v!r}" for k, v in factory.keywords.items()]
            return (f"{inner.replace(' as make_engine', '')}\nfrom functools import partial\n"
                    f"make_engine = partial({factory.func.__name__}, {', '.join(args)})")
    where = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if where and where != "__main__" and qualname and "<" not in qualname:
        return f"from {where} import {qualname.split('.')[0]} as make_engine"
    return "make_engine = ...  # your engine factory (what the engine_factory fixture returns)"
