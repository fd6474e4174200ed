"""logprobs: what an engine returns as logprobs is what the request would get alone, and what
the reference engine gives, within a stated tolerance; the sampled token's own logprob is its
entry among the top ones. RL and evaluation users consume these values, and a neighbour's
logprobs in a row's place (vLLM #51789 returned -inf for one) leave the tokens intact.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from engines.protocol import Request
from engines.testing.coverage import Coverage
from engines.testing.properties.base import Judge, describe, fail, step_of_token, tops
from engines.testing.recorder import Trace

# Batched against alone on the same engine: fp32 engines agree to within rounding of
# differently shaped batches (measured on ours: at most 4.8e-6), so 1e-4 is 20x that. Under
# tie-aware parity the engine's own tie tolerance, as its tokens are judged. Against the
# reference, another implementation of the same model: REFERENCE_TOL.
BATCH_TOL = 1e-4
REFERENCE_TOL = 1e-3


def _sampled(trace: Trace, rid: Hashable) -> list[float] | None:
    out: list[float] = []
    for _, o in trace.outputs.get(rid, []):
        if o.token_ids and o.logprobs is None:
            return None  # this engine returns no sampled-token logprobs
        out += list(o.logprobs or ())
    return out


def _apart(got: Mapping[int, float], expected: Mapping[int, float], tol: float) -> str | None:
    """Where two top-N mappings differ by more than `tol`: a shared id's value, or an id only
    one has that is not tied (within tol) with the other's least likely entry."""
    for token in sorted(set(got) & set(expected)):
        if abs(got[token] - expected[token]) > tol:
            return f"token {token}: {got[token]:.6g} against {expected[token]:.6g}"
    for mine, other, who in ((got, expected, "returned"), (expected, got, "expected")):
        floor = min(other.values(), default=float("-inf"))
        for token in sorted(set(mine) - set(other)):
            if mine[token] > floor + tol:
                return (f"token {token} ({mine[token]:.6g}) {who} only, above the other's "
                        f"least likely entry {floor:.6g}")
    return None


def _compare(trace: Trace, r: Request, got: Sequence[Mapping[int, float]],
             expected: Sequence[Mapping[int, float]], tokens: Sequence[int],
             same: Sequence[int], tol: float, what: str) -> None:
    __tracebackhide__ = True
    rid = r.request_id
    for i in range(min(len(got), len(expected))):
        if i >= len(same) or tokens[i] != same[i]:
            return  # the tokens parted: parity's to judge, and nothing after compares
        where = _apart(got[i], expected[i], tol)
        if where is not None:
            raise fail("logprobs", f"{describe(r, trace)} returned top logprobs for its token "
                       f"{i} (step {step_of_token(trace, rid, i)}) that are not {what}'s: "
                       f"{where} (tolerance {tol:g}).")


def tally(coverage: Coverage, judged: tuple[int, int]) -> None:
    """The check's line in the summary: requests judged, and those that asked for logprobs
    and got none (an engine may return none: then there was nothing to judge, and it says)."""
    coverage.counts["with logprobs judged"] += judged[0]
    coverage.counts["asked for logprobs and got none"] += judged[1]


def check_logprobs(trace: Trace, judge: Judge) -> tuple[int, int]:
    """For every request that asks for logprobs and whose tokens are reproducible: one top-N
    mapping per token, the sampled token's logprob equal to its own entry there, and the
    mappings equal to the request's served alone (within BATCH_TOL, or the tie tolerance)
    and to the reference engine's (within REFERENCE_TOL) for as long as the tokens agree."""
    __tracebackhide__ = True
    tol = BATCH_TOL if judge.parity == "exact" else max(BATCH_TOL, judge.tolerance)
    judged = none = 0
    for r in trace.workload.requests:
        p, rid = r.params, r.request_id
        if not p.logprobs or (p.temperature > 0 and p.seed is None):
            continue
        tokens = trace.tokens(rid)
        got = tops(trace, rid)
        if got is None:
            none += 1
            continue
        judged += 1
        if len(got) != len(tokens):
            raise fail("logprobs", f"{describe(r, trace)} asked for {p.logprobs} logprobs and "
                       f"got {len(got)} top-logprob mappings for {len(tokens)} tokens.")
        sampled = _sampled(trace, rid)
        for i, (token, top) in enumerate(zip(tokens, got, strict=True)):
            if sampled is not None and token in top and abs(top[token] - sampled[i]) > 1e-6:
                raise fail("logprobs", f"{describe(r, trace)} returned logprob {sampled[i]:.6g}"
                           f" for its token {i} ({token}), whose own top-logprob entry is "
                           f"{top[token]:.6g}. Expected the same value.")
        alone = judge.oracle(r.prompt_token_ids, p)
        _compare(trace, r, got, alone.top_logprobs or (), tokens, alone.tokens, tol,
                 "the same request's served alone")
        if judge.reference is not None:
            ref = judge.reference(r.prompt_token_ids, p)
            if ref.top_logprobs:
                _compare(trace, r, got, ref.top_logprobs, tokens, ref.tokens,
                         max(tol, REFERENCE_TOL), "the reference engine's")
    return judged, none
