"""Greedy shrinking for hand-written (seed) workloads, which Hypothesis cannot shrink:
drop requests, aborts and bad requests, cut budgets and prompts, pull arrivals earlier,
keeping each change that still fails; then renumber the ids r0, r1, ..."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from engines.protocol import Request
from engines.testing.workload import Workload

__all__ = ["shrink_workload", "without_requests"]


def without_requests(w: Workload, drop: set[int]) -> Workload:
    gone = {w.requests[i].request_id for i in drop}
    keep = [i for i in range(len(w.requests)) if i not in drop]
    # replace, not a new Workload: what else it carries (its label, adapter swaps) stays.
    return dataclasses.replace(
        w, requests=tuple(w.requests[i] for i in keep),
        arrivals=tuple(w.arrivals[i] for i in keep),
        aborts=tuple(a for a in w.aborts if a.request_id not in gone),
        bad=tuple(b for b in w.bad if b.duplicate_of not in gone))


def _with_request(w: Workload, i: int, r: Request, arrival: int | None = None) -> Workload:
    arrivals = list(w.arrivals)
    if arrival is not None:
        arrivals[i] = arrival
    return dataclasses.replace(w, requests=w.requests[:i] + (r,) + w.requests[i + 1:],
                               arrivals=tuple(arrivals))


def _candidates(w: Workload) -> Iterator[Workload]:
    n = len(w.requests)
    # Halves, then quarters, before single requests: a large seed workload shrinks in a
    # handful of tries instead of one try per request.
    size = n // 2
    while size > 1:
        for start in range(0, n, size):
            yield without_requests(w, set(range(start, min(n, start + size))))
        size //= 2
    for i in range(n):
        if n > 1:
            yield without_requests(w, {i})
    for j in range(len(w.aborts)):
        yield dataclasses.replace(w, aborts=w.aborts[:j] + w.aborts[j + 1:])
    for j in range(len(w.bad)):
        yield dataclasses.replace(w, bad=w.bad[:j] + w.bad[j + 1:])
    for i, r in enumerate(w.requests):
        p = r.params
        # Smallest first, and a quarter off between the half and one less: a budget that
        # must stay long shrinks in a few tries, not one token at a time.
        b = p.max_tokens
        for fewer in sorted({1, b // 2, b - b // 4, b - 1} - {0}):
            if fewer < b:
                # min_tokens may not pass max_tokens (bad input, not the failure shrunk).
                yield _with_request(w, i, dataclasses.replace(r, params=dataclasses.replace(
                    p, max_tokens=fewer, min_tokens=min(p.min_tokens, fewer))))
        if len(r.prompt_token_ids) > 1:
            half = r.prompt_token_ids[: len(r.prompt_token_ids) // 2]
            yield _with_request(w, i, dataclasses.replace(r, prompt_token_ids=half))
        earlier = w.arrivals[i - 1] if i else 0
        if w.arrivals[i] > earlier:
            yield _with_request(w, i, r, arrival=earlier)


def _renumber(w: Workload) -> Workload:
    return w.with_ids({r.request_id: f"r{i}" for i, r in enumerate(w.requests)})


def shrink_workload(
    w: Workload, fails: Callable[[Workload], bool], *, budget: int = 150,
    out_of_time: Callable[[], bool] = lambda: False,
) -> Workload:
    """The smallest workload reachable from w by single greedy steps that still fails.

    After a step that still fails, the next round of candidates starts where that step was
    found and wraps around: the candidates before it were just tried (on a workload one step
    larger) and are tried again last, not first. It stops when a whole round, every candidate
    once, finds nothing, or the budget of tries is spent, or out_of_time() says so (the
    suite's shrink budget in seconds, engines.testing.shrink_budget)."""
    tries, start = 0, 0
    while tries < budget:
        cands = list(_candidates(w))
        start = min(start, len(cands))
        for i in [*range(start, len(cands)), *range(start)]:
            if tries >= budget or out_of_time():
                return _renumber(w)
            tries += 1
            if fails(cands[i]):
                w, start = cands[i], i
                break
        else:
            break  # a whole round without a smaller failing workload
    return _renumber(w)
