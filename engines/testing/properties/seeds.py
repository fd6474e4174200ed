"""Seeded sampling: reproducible under one seed, sensitive to the seed.

Sensitivity is a statistical check, and its false-alarm probability is bounded, not guessed.
K requests of one prompt at temperature 1 under K distinct seeds produce the same first token
with probability sum_i p_i^K, where p is the first-token distribution; a correct engine draws
K independent samples, so all K sequences are identical with at most that probability. From
the top candidates' logprobs (p_1 >= ... >= p_m, the rest r = 1 - sum p_i, each at most p_m):

    P(all K identical) <= sum_i p_i^K + p_m^(K-1) * r

A group is judged only when this bound is below 1e-6 (FALSE_ALARM); the bound comes from the
reference engine where one is given, else from the engine's own logprobs. On the tiny preset,
first-token probabilities are at most about 0.03, so 4 seeds suffice.

The check returns each seed group's fate (judged, or why not, with the figures that would make
it judgeable): the coverage summary reports those, rather than deciding them a second time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Literal

from engines.protocol import Request
from engines.testing.properties.base import Judge, describe, fail
from engines.testing.recorder import Trace

__all__ = ["FALSE_ALARM", "MOST_SEEDS_ASKED", "SOURCES", "SeedGroup", "check_seeds",
           "identical_bound", "seed_groups", "seeds_needed"]

FALSE_ALARM = 1e-6
MOST_SEEDS_ASKED = 10_000  # past this many seeds a group is called unjudgeable outright
SOURCES = ("engine", "reference engine")  # whose top_logprobs bound the chance
Source = Literal["engine", "reference engine"]
Fate = Literal["judged", "no logprobs", "too few seeds", "certain"]


def identical_bound(top: Mapping[int, float], k: int) -> float:
    """Upper bound on the chance that k independent samples at temperature 1 agree."""
    probs = sorted((math.exp(v) for v in top.values()), reverse=True)
    if not probs:
        return 1.0
    rest = max(0.0, 1.0 - sum(probs))
    return float(sum(p**k for p in probs) + probs[-1] ** (k - 1) * rest)


def seeds_needed(top: Mapping[int, float], most: int = MOST_SEEDS_ASKED) -> int | None:
    """The fewest distinct seeds whose group `check_seeds` would judge under these top
    candidates (bound below FALSE_ALARM), or None if not even `most` would do: what the
    summary tells a user whose groups were too small."""
    if not top or max(top.values()) >= 0.0:  # one certain token (or not logprobs at all)
        return None
    if identical_bound(top, most) >= FALSE_ALARM:
        return None
    low, high = 1, most  # the bound falls as k grows: bisect for the first k below it
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if identical_bound(top, mid) < FALSE_ALARM else (mid, high)
    return high


def seed_groups(trace: Trace) -> list[list[Request]]:
    """Finished requests of one prompt and budget at temperature 1, by distinct seed."""
    by_key: dict[tuple[object, ...], dict[Hashable, Request]] = defaultdict(dict)
    for r in trace.workload.requests:
        p = r.params
        if (p.temperature == 1.0 and p.seed is not None and not p.stop_token_ids
                and trace.finish_reason(r.request_id) is not None
                and r.request_id not in trace.aborted_at):
            by_key[(r.prompt_token_ids, p.max_tokens)].setdefault(p.seed, r)
    return [list(g.values()) for g in by_key.values() if len(g) >= 2]


@dataclass(frozen=True, slots=True)
class SeedGroup:
    """One seed group and its fate: judged (the chance that a correct engine makes the group
    all-identical is below FALSE_ALARM), or why not, with what would make it judgeable."""

    size: int  # distinct seeds
    fate: Fate
    source: Source  # whose top_logprobs bound the chance
    bound: float = 1.0  # that chance, where the source gave logprobs
    needed: int | None = None  # too few seeds: the distinct seeds that would be judged
    top_percent: int | None = None  # too few seeds: the top first-token candidate's share


def _fate(group: list[Request], judge: Judge) -> SeedGroup:
    source = judge.reference or judge.oracle
    name: Source = "reference engine" if judge.reference is not None else "engine"
    top = source.top_at(group[0].prompt_token_ids)
    if not top:
        return SeedGroup(len(group), "no logprobs", name)
    bound = identical_bound(top, len(group))
    if bound < FALSE_ALARM:
        return SeedGroup(len(group), "judged", name, bound)
    need = seeds_needed(top)
    if need is None:
        return SeedGroup(len(group), "certain", name, bound)
    return SeedGroup(len(group), "too few seeds", name, bound, need,
                     math.ceil(100 * math.exp(max(top.values()))))


def check_seeds(trace: Trace, judge: Judge) -> list[SeedGroup]:
    """A seeded request gives the same tokens served alone twice, and in this workload;
    requests of one prompt under distinct seeds are not all identical (judged where the
    chance that a correct engine makes them so is below FALSE_ALARM). Returns every seed
    group's fate, in the order of seed_groups(trace)."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        p = r.params
        if p.temperature == 0 or p.seed is None:
            continue
        first = judge.oracle(r.prompt_token_ids, p).tokens
        again = judge.oracle.serve(r.prompt_token_ids, p).tokens
        if again != first:
            raise fail("seeds", f"{describe(r, trace)} served alone twice under seed {p.seed} "
                       f"gave {list(first)}, then {list(again)}. Expected the same tokens.")
        if not judge.comparable(p):
            continue  # tie-aware: batched vs alone is not comparable for sampled tokens
        got = trace.tokens(r.request_id)
        if r.request_id in trace.aborted_at or r.request_id not in trace.finished_at:
            first = first[: len(got)]
        if tuple(got) != tuple(first):
            raise fail("seeds", f"{describe(r, trace)} gave {got} in this workload but "
                       f"{list(first)} alone under the same seed. Expected the same tokens.")
    groups = seed_groups(trace)
    fates: dict[int, SeedGroup] = {}
    for i, group in enumerate(groups):  # the all-identical groups first: they can fail
        outputs = {tuple(trace.tokens(r.request_id)) for r in group}
        if len(outputs) > 1:
            continue
        fates[i] = fate = _fate(group, judge)
        if fate.fate == "judged":
            seeds = [r.params.seed for r in group]
            raise fail("seeds", f"{len(group)} requests of one prompt {group[0].prompt_token_ids}"
                       f" at temperature 1 under seeds {seeds} all generated "
                       f"{list(outputs.pop())}. A correct engine does that with probability "
                       f"below {fate.bound:.2g}: the seed does not reach the sampler.")
    return [fates[i] if i in fates else _fate(g, judge) for i, g in enumerate(groups)]
