"""Greedy shrinking for hand-written (seed) workloads, which Hypothesis cannot shrink:
drop requests, aborts and bad requests, cut budgets and prompts, pull arrivals earlier,
keeping each change that still fails; then renumber the ids r0, r1, ..."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from engines.protocol import Request
from engines.testing.workload import Workload

__all__ = ["shrink_workload"]


def _without_request(w: Workload, i: int) -> Workload:
    rid = w.requests[i].request_id
    return Workload(
        w.requests[:i] + w.requests[i + 1:],
        w.arrivals[:i] + w.arrivals[i + 1:],
        tuple(a for a in w.aborts if a.request_id != rid),
        tuple(b for b in w.bad if b.duplicate_of != rid),
        w.label,
    )


def _with_request(w: Workload, i: int, r: Request, arrival: int | None = None) -> Workload:
    arrivals = list(w.arrivals)
    if arrival is not None:
        arrivals[i] = arrival
    return dataclasses.replace(w, requests=w.requests[:i] + (r,) + w.requests[i + 1:],
                               arrivals=tuple(arrivals))


def _candidates(w: Workload) -> Iterator[Workload]:
    for i in range(len(w.requests)):
        if len(w.requests) > 1:
            yield _without_request(w, i)
    for j in range(len(w.aborts)):
        yield dataclasses.replace(w, aborts=w.aborts[:j] + w.aborts[j + 1:])
    for j in range(len(w.bad)):
        yield dataclasses.replace(w, bad=w.bad[:j] + w.bad[j + 1:])
    for i, r in enumerate(w.requests):
        p = r.params
        if p.max_tokens > 1:
            yield _with_request(w, i, dataclasses.replace(
                r, params=dataclasses.replace(p, max_tokens=p.max_tokens - 1)))
        if len(r.prompt_token_ids) > 1:
            half = r.prompt_token_ids[: len(r.prompt_token_ids) // 2]
            yield _with_request(w, i, dataclasses.replace(r, prompt_token_ids=half))
        earlier = w.arrivals[i - 1] if i else 0
        if w.arrivals[i] > earlier:
            yield _with_request(w, i, r, arrival=earlier)


def _renumber(w: Workload) -> Workload:
    return w.with_ids({r.request_id: f"r{i}" for i, r in enumerate(w.requests)})


def shrink_workload(
    w: Workload, fails: Callable[[Workload], bool], *, budget: int = 150
) -> Workload:
    """The smallest workload reachable from w by single greedy steps that still fails."""
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for cand in _candidates(w):
            tries += 1
            if fails(cand):
                w, improved = cand, True
                break
            if tries >= budget:
                break
    return _renumber(w)
