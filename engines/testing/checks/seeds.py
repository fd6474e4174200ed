"""seeds: seeded sampling is reproducible under one seed, and sensitive to the seed.

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
it judgeable): its tally (TALLY, below) reports those in the coverage summary, rather than
deciding them a second time, with a sentence per reason saying what would change it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Literal

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.coverage import GREEDY_ONLY, Coverage, Tally
from engines.testing.features.seed_groups import FEATURE as SEED_GROUPS_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.oracle import TOP_K
from engines.testing.recorder import Trace

__all__ = ["CHECK", "FALSE_ALARM", "MOST_SEEDS_ASKED", "SOURCES", "TALLY", "SeedGroup",
           "check_seeds", "identical_bound", "seed_groups", "seeds_needed"]

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
    """Finished unconstrained requests of one prompt and budget at temperature 1, by
    distinct seed."""
    by_key: dict[tuple[object, ...], dict[Hashable, Request]] = defaultdict(dict)
    for r in trace.workload.requests:
        p = r.params
        # Unconstrained only: a mask can leave one token (the bound is of the raw logits).
        if (p.temperature == 1.0 and p.seed is not None and not p.stop_token_ids
                and p.allowed_token_ids is None and not p.logit_bias and not p.bad_words
                and p.guided is None and trace.finish_reason(r.request_id) is not None
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


def check_seeds(check: Check, trace: Trace, judge: Judge) -> list[SeedGroup]:
    """A seeded request gives the same tokens served alone twice, and in this workload;
    requests of one prompt under distinct seeds are not all identical (judged where the
    chance that a correct engine makes them so is below FALSE_ALARM). Returns every seed
    group's fate, in the order of seed_groups(trace)."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        p = r.params
        if p.temperature == 0 or p.seed is None:
            continue
        path = trace.lora_paths.get(r.request_id)
        first = judge.oracle(r.prompt_token_ids, p, lora_path=path).tokens
        again = judge.oracle.serve(r.prompt_token_ids, p, lora_path=path).tokens
        if again != first:
            raise check.fail(f"{describe(r, trace)} served alone twice under seed {p.seed} "
                             f"gave {list(first)}, then {list(again)}. Expected the same tokens.")
        if not judge.comparable(p):
            continue  # tie-aware: batched vs alone is not comparable for sampled tokens
        got = trace.tokens(r.request_id)
        if r.request_id in trace.aborted_at or r.request_id not in trace.finished_at:
            first = first[: len(got)]
        if tuple(got) != tuple(first):
            raise check.fail(f"{describe(r, trace)} gave {got} in this workload but "
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
            raise check.fail(f"{len(group)} requests of one prompt {group[0].prompt_token_ids}"
                             f" at temperature 1 under seeds {seeds} all generated "
                             f"{list(outputs.pop())}. A correct engine does that with probability "
                             f"below {fate.bound:.2g}: the seed does not reach the sampler.")
    return [fates[i] if i in fates else _fate(g, judge) for i, g in enumerate(groups)]


# The summary's keys (`topic: detail`, the topic being the check's name): groups not judged
# by reason and whose logprobs it was about, and maxima of the figures that would change it.
_JUDGED = "seed groups judged"
_UNJUDGED = "seed groups not judged (why: below)"
_REASONS = {"no logprobs": "no top_logprobs from the %s",
            "too few seeds": "too few seeds for the %s's first-token distribution",
            "certain": "a first token all but certain under the %s"}
_MOST_SEEDS = "distinct seeds in a group not judged"
_NEEDED = "distinct seeds a group needs"
_TOP_PERCENT = "top first-token candidate, percent"
_BOUND = f"{FALSE_ALARM:g}".replace("e-0", "e-")  # as the docstring above writes it: 1e-6


def _add(coverage: Coverage, groups: list[SeedGroup], name: str) -> None:
    """The fates `check_seeds` gave its seed groups: judged, or why not (the figures that
    would change it kept as maxima)."""
    for group in groups:
        if group.fate == "judged":
            coverage.counts[_JUDGED] += 1
            continue
        coverage.counts[_UNJUDGED] += 1
        coverage.counts[f"{name}: {_REASONS[group.fate] % group.source}"] += 1
        if group.fate == "too few seeds":
            for key, value in ((_MOST_SEEDS, group.size), (_NEEDED, group.needed),
                               (_TOP_PERCENT, group.top_percent)):
                coverage.most[f"{name}: {key}"] = max(coverage.most[f"{name}: {key}"],
                                                      value or 0)


Why = Callable[[Mapping[str, int], str, str], str]


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    """Per reason seed groups went unjudged: what it was, and what would change it; and that
    no other check drew a sampled request where the engine declares this one broken."""
    out = []
    if data.get(f"max {GREEDY_ONLY}"):
        out.append(f"sampling: no check but `{name}` drew a sampled request (temperature > 0): "
                   f"the engine declares `{name}` broken (expected_failed_checks), so every "
                   "other check judged greedy requests only (the checks of unseeded sampling "
                   "aside: filters that leave one token, and the distribution of unseeded "
                   "draws where a reference engine is given)")
    whys: dict[str, Why] = {"no logprobs": _no_logprobs, "too few seeds": _too_few,
                            "certain": _certain}
    for fate, template in _REASONS.items():
        for source in SOURCES:
            n = data.get(f"{name}: {template % source}", 0)
            if n:
                out.append(f"{name}: {n} seed group{'s' * (n != 1)} not judged: "
                           + whys[fate](data, source, name))
    return out


def _no_logprobs(data: Mapping[str, int], source: str, name: str) -> str:
    fix = ("return top_logprobs (one {token id: logprob} mapping per generated token, its "
           "top params.logprobs candidates) when params.logprobs > 0"
           + (", or pass --reference-engine with an engine that does" if source == "engine"
              else ""))
    return (f"the {source} returned no top_logprobs for the group's prompt served alone "
            f"(greedy, max_tokens=1, logprobs={TOP_K}), so the chance that a correct engine "
            f"samples all-identical outputs could not be bounded (the check judges a group "
            f"only below {_BOUND}). To have such groups judged, {fix}.")


def _too_few(data: Mapping[str, int], source: str, name: str) -> str:
    def most(key: str) -> int:
        return data.get(f"max {name}: {key}", 0)

    return (f"too few seeds for the {source}'s first-token distribution: its top_logprobs "
            f"put up to {most(_TOP_PERCENT)}% on one candidate, so with the "
            f"{most(_MOST_SEEDS)} or fewer distinct seeds these groups had at "
            f"temperature 1 a correct engine samples all-identical outputs with a chance of "
            f"{_BOUND} or more. Groups of {most(_NEEDED)} or more "
            f"distinct seeds of one of these prompts would be judged; if the top_logprobs are "
            f"not the distribution the {source} samples from at temperature 1, they should be.")


def _certain(data: Mapping[str, int], source: str, name: str) -> str:
    return (f"the {source}'s top_logprobs make one first token all but certain, so not even "
            f"{MOST_SEEDS_ASKED:,} distinct seeds would bring the chance of all-identical "
            f"samples below {_BOUND}. A prompt whose first token is less certain would "
            f"be judged; if the top_logprobs are not the distribution the {source} samples "
            f"from at temperature 1, they should be.")


TALLY = Tally(_add, _notes)


CHECK = Check("seeds", check_seeds, draws=(SEED_GROUPS_FEATURE.use(),), sampling=True, tally=TALLY)
