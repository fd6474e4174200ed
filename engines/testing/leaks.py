"""Leaks across workloads: a workload that fails only on an engine that has already served
others. Hypothesis cannot shrink the engine's history, so this finds a short one by hand: the
single most recent earlier workload if it suffices, else the history with every workload it
can drop dropped (delta debugging: halves, then quarters, ... then single workloads); then
(for engines cheap to build) shrinks each workload in it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from engines.testing import progress_lines as progress
from engines.testing.shrink import shrink_workload
from engines.testing.shrink_budget import out_of_time
from engines.testing.workload import Workload

T = TypeVar("T")

__all__ = ["minimal_leak", "shortest_suffix"]

FailsAfter = Callable[[Sequence[Workload], Workload], bool]


def _shortest_history(history: list[Workload], w: Workload, fails_after: FailsAfter,
                      budget: int) -> list[Workload]:
    """Delta debugging over the history: the most recent workload alone if it suffices (most
    leaks need one), else drop halves of what is kept, then quarters, ... then single
    workloads, keeping each drop after which w still fails; `budget` tries at most, and none
    once the shrink budget is spent."""
    if len(history) > 1 and budget > 0:
        budget -= 1
        if fails_after(history[-1:], w):
            return history[-1:]
    kept = list(history)
    size = max(1, len(kept) // 2)
    while True:
        start = 0
        while start < len(kept) and len(kept) > 1:
            if budget <= 0 or out_of_time():
                return kept
            trial = kept[:start] + kept[start + size:]
            if not trial:  # w alone passes (that made it a leak): keep something
                start += size
                continue
            budget -= 1
            if fails_after(trial, w):
                kept = trial  # the next chunk now starts where this one did
            else:
                start += size
        if size == 1:
            return kept
        size = max(1, size // 2)


def minimal_leak(history: Sequence[Workload], w: Workload, fails_after: FailsAfter, *,
                 shrink: bool, budget: int = 40) -> tuple[list[Workload], Workload]:
    """(earlier workloads, failing workload): served in order on one fresh engine, the last
    fails, and (after shrinking) it still passes alone. Returned unshrunk when the failure
    does not replay (a nondeterministic engine)."""
    progress.doing("replaying a leak across requests, shrinking the history it needs")
    history = list(history)
    if not fails_after(history, w):
        return history, w
    prefix = _shortest_history(history, w, fails_after, budget)
    if not shrink:
        return prefix, w
    shrunk = list(prefix)
    for i in range(len(shrunk)):
        def still_fails(c: Workload, i: int = i) -> bool:
            return fails_after([*shrunk[:i], c, *shrunk[i + 1:]], w)

        shrunk[i] = shrink_workload(shrunk[i], still_fails, budget=budget,
                                    out_of_time=out_of_time)
    last = shrink_workload(w, lambda c: fails_after(shrunk, c) and not fails_after([], c),
                           budget=budget, out_of_time=out_of_time)
    # Shrinking renumbers request ids; a leak keyed on ids may not survive that: check.
    if fails_after(shrunk, last) and not fails_after([], last):
        return shrunk, last
    return prefix, w


def shortest_suffix(history: Sequence[T], fails: Callable[[Sequence[T]], bool], *,
                    drop_budget: int = 8) -> list[T]:
    """The shortest tail of `history` after which the failure still happens (bisected: a
    leak that builds up fails after every longer tail too), then with each item it can drop
    dropped while a few tries are left. The whole history if even that does not fail."""
    history = list(history)
    if not fails(history):
        return history
    lo, hi = 0, len(history)  # fails(history[-hi:]) holds; find the least such hi
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if mid and fails(history[-mid:]):
            hi = mid
        else:
            lo = mid
    kept = history[-hi:] if hi else []
    for item in list(kept):
        if drop_budget <= 0 or len(kept) <= 1:
            break
        drop_budget -= 1
        trial = [h for h in kept if h is not item]
        if fails(trial):
            kept = trial
    return kept
