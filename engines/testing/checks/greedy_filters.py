"""greedy_filters: a sampled request whose filter leaves one token (top_k 1, min_p 1, top_p
1e-6; engines.testing.processing.GREEDY_FILTERS) gives the greedy tokens, seed or none, at
any temperature. Deterministic without a seed, so it judges the sampling path of engines that
cannot reproduce seeds (declared `seeds` broken), which no other check does.

Ties: where two tokens are (near) equally likely a filter keeps both (top_k 1 and min_p 1
keep exact ties) and rounding can move the argmax, so a divergence is forgiven where the two
most likely tokens at that context are within the judge's tolerance (1e-3 in logprob unless
set), from the reference engine's top logprobs where one is given, else the engine's own;
where neither gives logprobs the divergence is not judged (counted, and the summary says).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from engines.protocol import SamplingParams
from engines.testing.checks.base import Check
from engines.testing.checks.needs import GREEDY_FILTER
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.greedy_filters import FEATURE as GREEDY_FILTERS_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.oracle import TOP_K
from engines.testing.processing import greedy_filter
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "check_greedy_filters"]

_JUDGED = "greedy-filter requests judged"
_TIE = "filters: diverged at a near-tie of the two most likely tokens"
_UNKNOWN = "filters: diverged where no engine gave top logprobs"


def _greedy(params: SamplingParams, name: str) -> SamplingParams:
    return dataclasses.replace(params, temperature=0.0, seed=None,
                               **{name: getattr(SamplingParams(), name)})


def _margin(top: Mapping[int, float] | None) -> float | None:
    if not top or len(top) < 2:
        return None
    first, second = sorted(top.values(), reverse=True)[:2]
    return first - second


def check_greedy_filters(check: Check, trace: Trace, judge: Judge) -> tuple[int, int, int]:
    """(judged, forgiven at a near-tie, not judged for want of logprobs)."""
    __tracebackhide__ = True
    judged = ties = unknown = 0
    for r in trace.workload.requests:
        name = greedy_filter(r.params)
        if name is None:
            continue
        rid = r.request_id
        got = list(trace.tokens(rid))
        expected = list(judge.oracle(r.prompt_token_ids, _greedy(r.params, name)).tokens)
        if rid in trace.aborted_at or rid not in trace.finished_at:
            expected = expected[: len(got)]
        at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                  None)
        if at is None:
            if len(got) != len(expected):
                raise check.fail(f"{describe(r, trace)} with {name}={getattr(r.params, name)} "
                                 f"gave {got}, greedy alone {expected}: the filter leaves one "
                                 "token, so the same tokens were expected.")
            judged += 1
            continue
        source = judge.reference or judge.oracle
        context = (*r.prompt_token_ids, *expected[:at])
        margin = _margin(source.top_at(context))
        who = "reference engine" if judge.reference is not None else "engine"
        if margin is None:
            unknown += 1
            continue
        if margin <= judge.tolerance:
            ties += 1
            continue
        raise check.fail(
            f"{describe(r, trace)} with {name}={getattr(r.params, name)} (no seed) gave {got}; "
            f"served alone greedily it gives {expected}. They part at generated position {at} "
            f"({got[at]} against {expected[at]}), where the {who}'s two most likely tokens "
            f"are {margin:.3g} apart in logprob (top {TOP_K}): the filter leaves only the "
            "most likely token, so the greedy token was expected.")
    return judged, ties, unknown


def _add(coverage: Coverage, judged: tuple[int, int, int], name: str) -> None:
    for key, n in zip((_JUDGED, _TIE, _UNKNOWN), judged, strict=True):
        coverage.counts[key] += n


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    out = []
    if data.get(_TIE):
        out.append(f"{name}: {data[_TIE]} request(s) parted from the greedy tokens where the "
                   "two most likely tokens were within the tolerance (a tie a filter keeps "
                   "both of): forgiven, and not compared after it.")
    if data.get(_UNKNOWN):
        out.append(f"{name}: {data[_UNKNOWN]} request(s) parted from the greedy tokens where "
                   "neither the reference engine nor the engine returned top logprobs, so a "
                   "tie could not be told from a bug: not judged. Return top_logprobs (or "
                   "pass --reference-engine) to have them judged.")
    return out


TALLY = Tally(_add, _notes)


CHECK = Check("greedy_filters", check_greedy_filters, needs=(GREEDY_FILTER,),
              draws=(GREEDY_FILTERS_FEATURE.use(),), tally=TALLY)
