"""children: a request with n > 1 gets n children, each its own stream (StepOutput.index
0..n-1) with one finishing output and its own budget; each child equals the same child of
the request served alone (greedy, or seeded under exact parity: the per-child seeds an
engine derives are reproducible); greedy children agree; sampled children are not all
identical, unless that is plausible by chance (below). Under tie-aware parity (reduced
precision) a greedy child is compared with its alone run and with child 0 by the judge's tie
rule: a divergence forgiven only at a near-tie of the reference engine's distribution (a
processed one where the request asks for processing: engines.testing.judging.processed).
Catches children overwriting each
other (vLLM PR #16863), the parent's seed copied to every child (vLLM PR #10980, llama.cpp
PR #18700: identical samples), a child lost or finished twice.

Identical sampled children: if the children were independent draws, the chance that n - 1 of
them repeat child 0's tokens is the product over its tokens of p(token) ** (n - 1), p from
the sampled tokens' logprobs (temperature 1, no processing: the draws ask for none). Only a
chance below 1e-6 fails the check; without logprobs the children are not judged for it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

from engines.protocol import FinishReason, Request, StepOutput
from engines.testing.checks.base import Check
from engines.testing.checks.needs import CHILDREN
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.children import FEATURE as CHILDREN_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["CHECK", "FALSE_ALARM", "TALLY", "check_children"]

FALSE_ALARM = 1e-6  # the most likely identical independent children may be, and still fail


def _streams(trace: Trace, rid: Hashable) -> dict[int, list[tuple[int, StepOutput]]]:
    out: dict[int, list[tuple[int, StepOutput]]] = {}
    for step, o in trace.outputs.get(rid, []):
        out.setdefault(o.index, []).append((step, o))
    return out


def _about(r: Request) -> str:
    return f"n={r.params.n}"


def _shape(check: Check, trace: Trace, r: Request,
           streams: dict[int, list[tuple[int, StepOutput]]]) -> None:
    __tracebackhide__ = True
    n, p = r.params.n, r.params
    stray = sorted(i for i in streams if not 0 <= i < n)
    if stray:
        raise check.fail(f"{describe(r, trace)} ({_about(r)}) got outputs for children "
                         f"{stray}; expected indexes 0..{n - 1}.")
    cut_short = r.request_id in trace.aborted_at or trace.stalled
    for i in range(n):
        outs = streams.get(i, [])
        finals = [k for k, (_, o) in enumerate(outs) if o.finished]
        if not finals:
            if cut_short:
                continue
            ended = sorted(j for j, s in streams.items() if any(o.finished for _, o in s))
            raise check.fail(f"{describe(r, trace)} ({_about(r)}): child {i} never got a "
                             f"finishing output (children with one: {ended}).")
        if finals[0] != len(outs) - 1:
            step, o = outs[finals[0] + 1]
            raise check.fail(f"{describe(r, trace)} ({_about(r)}): child {i} finished, then got "
                             f"another output in step {step}: {o}.")
        toks = [t for _, o in outs for t in o.token_ids]
        reason = outs[-1][1].finish_reason
        if len(toks) > p.max_tokens or (reason == FinishReason.LENGTH
                                        and len(toks) != p.max_tokens):
            raise check.fail(f"{describe(r, trace)} ({_about(r)}): child {i} got {len(toks)} "
                             f"tokens {toks}, finishing {reason}; each child has the budget "
                             f"max_tokens={p.max_tokens} of its own.")


def _tokens(streams: dict[int, list[tuple[int, StepOutput]]], i: int) -> list[int]:
    return [t for _, o in streams.get(i, []) for t in o.token_ids]


def _chance_identical(streams: dict[int, list[tuple[int, StepOutput]]], n: int) -> float | None:
    """log of the chance that independent children all repeat child 0's tokens (None: no
    logprobs to tell)."""
    logprobs = [lp for _, o in streams.get(0, []) for lp in (o.logprobs or ())]
    if len(logprobs) != len(_tokens(streams, 0)) or not logprobs:
        return None
    return (n - 1) * sum(logprobs)


def _add(coverage: Coverage, judged: tuple[int, int, int, int, int], check: str) -> None:
    for key, n in zip(("with n > 1 judged", "with sampled children judged distinct",
                       "with sampled children not judged distinct (no logprobs)",
                       "with greedy children judged by the tie rule",
                       _UNCOMPARED), judged, strict=True):
        coverage.counts[key] += n


_UNCOMPARED = "children: greedy families not compared, tie-aware without a reference"


def _notes(data: Mapping[str, int], check: str) -> list[str]:
    n = data.get(_UNCOMPARED, 0)
    return [f"{check}: {n} greedy or seeded famil{'ies' if n != 1 else 'y'} not compared with "
            "its alone run or among its children: tie-aware parity forgives near-ties from the "
            "reference engine's distribution, and none was given (--reference-engine)"] if n \
        else []


TALLY = Tally(_add, _notes)


def check_children(check: Check, trace: Trace, judge: Judge
                   ) -> tuple[int, int, int, int, int]:
    """Every request with n > 1: its children's shapes; each child as served alone (greedy,
    or seeded under exact parity) and greedy children equal, by the tie rule under tie-aware
    parity; sampled ones not all identical unless plausible by chance."""
    __tracebackhide__ = True
    judged = distinct = unknown = ties = unjudged = 0
    for r in trace.workload.requests:
        p, rid = r.params, r.request_id
        if not isinstance(p.n, int) or p.n < 2:
            continue
        judged += 1
        streams = _streams(trace, rid)
        _shape(check, trace, r, streams)
        done = rid not in trace.aborted_at and not trace.stalled
        kids = [_tokens(streams, i) for i in range(p.n)]
        exact = judge.parity == "exact"
        # Tie-aware: a near-tie may part a child from its alone run or from its siblings, so
        # they are compared by the tie rule (margins from the reference), or not at all
        # without a reference (counted).
        tied = not exact and judge.reference is not None
        if not exact and not tied and judge.comparable(p):
            unjudged += 1
        if (exact or tied) and judge.comparable(p):
            alone = judge.oracle(r.prompt_token_ids, p)
            for i, got in enumerate(kids):
                if alone.children is None or i >= len(alone.children):
                    break
                want = list(alone.children[i])
                how = _differ(judge, r, got, want, done)
                if how is not None:
                    raise check.fail(
                        f"{describe(r, trace)} ({_about(r)}): child {i} got {got} in this "
                        f"workload but {want} served alone (the same request, the same "
                        f"derived seeds: children must be reproducible): {how}.")
            ties += tied
        if p.temperature == 0:
            apart = [k for k in kids[1:] if (exact or tied) and done
                     and _differ(judge, r, k, kids[0], True) is not None]
            if apart:
                raise check.fail(f"{describe(r, trace)} ({_about(r)}) is greedy, but its "
                                 f"children differ: {kids}.")
            continue
        if not done or any(not k for k in kids):
            continue
        chance = _chance_identical(streams, p.n)
        if chance is None:
            unknown += 1
            continue
        distinct += 1
        if all(k == kids[0] for k in kids) and chance < math.log(FALSE_ALARM):
            raise check.fail(
                f"{describe(r, trace)} ({_about(r)}): all {p.n} sampled children generated "
                f"the same tokens {kids[0]}; independent draws agree so with probability "
                f"{math.exp(chance):.2g} (from the tokens' logprobs). Do the children share "
                "one seed or one generator?")
    return judged, distinct, unknown, ties, unjudged


def _differ(judge: Judge, r: Request, got: list[int], want: list[int], done: bool) -> str | None:
    """How a child's tokens differ from `want` (None: they agree): exactly under exact
    parity, by the tie rule under tie-aware (the judge's, processed choices included);
    a child cut short owes a prefix."""
    expected = want if done else want[:len(got)]
    if judge.parity == "exact":
        return None if got == expected else "they differ"
    return judge.diverges(r.prompt_token_ids, got, expected, observed_top=None,
                          expected_top=None, params=r.params)


CHECK = Check("children", check_children, needs=(CHILDREN,), draws=(CHILDREN_FEATURE.use(),),
              tally=TALLY)
