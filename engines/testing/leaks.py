"""Leaks across workloads: a workload that fails only on an engine that has already served
others. Hypothesis cannot shrink the engine's history, so this finds a short one by hand: the
single most recent earlier workload if it suffices, else the history with every workload it
can drop dropped; then (for engines cheap to build) shrinks each workload in it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.testing.shrink import shrink_workload
from engines.testing.workload import Workload

__all__ = ["minimal_leak"]

FailsAfter = Callable[[Sequence[Workload], Workload], bool]


def _shortest_history(history: list[Workload], w: Workload, fails_after: FailsAfter,
                      budget: int) -> list[Workload]:
    for earlier in reversed(history[-budget:]):
        if fails_after([earlier], w):
            return [earlier]
    kept = list(history)
    for item in list(kept):
        if len(kept) > 1 and budget > 0:
            budget -= 1
            trial = [h for h in kept if h is not item]
            if fails_after(trial, w):
                kept = trial
    return kept


def minimal_leak(history: Sequence[Workload], w: Workload, fails_after: FailsAfter, *,
                 shrink: bool, budget: int = 40) -> tuple[list[Workload], Workload]:
    """(earlier workloads, failing workload): served in order on one fresh engine, the last
    fails, and (after shrinking) it still passes alone. Returned unshrunk when the failure
    does not replay (a nondeterministic engine)."""
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

        shrunk[i] = shrink_workload(shrunk[i], still_fails, budget=budget)
    last = shrink_workload(w, lambda c: fails_after(shrunk, c) and not fails_after([], c),
                           budget=budget)
    # Shrinking renumbers request ids; a leak keyed on ids may not survive that: check.
    if fails_after(shrunk, last) and not fails_after([], last):
        return shrunk, last
    return prefix, w
