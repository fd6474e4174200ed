"""logprobs: what an engine returns as logprobs is what the request would get alone, and what
the reference engine gives, within a stated tolerance; the sampled token's own logprob is its
entry among the top ones. RL and evaluation users consume these values, and a neighbour's
logprobs in a row's place (vLLM #51789 returned -inf for one) leave the tokens intact.

What the values are of is each engine's declaration (`logprobs_of`, "raw" or "processed"):
against the reference engine, values of different kinds are compared only where the
request's processing is the identity (engines.testing.processing); the others are counted,
and the summary says why they were not compared. Against the request served alone, the same
engine's values are always of the same kind.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.checks.needs import TOP_LOGPROBS
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.top_logprobs import FEATURE as TOP_LOGPROBS_FEATURE
from engines.testing.judging.base import Judge, describe, step_of_token, tops
from engines.testing.oracle import served_by
from engines.testing.precision import VALUE_TERMS, depth_factor
from engines.testing.processing import comparable_kinds
from engines.testing.recorder import Trace

# Batched against alone on the same engine: fp32 engines agree to within rounding of
# differently shaped batches (measured on ours: at most 4.8e-6), so 1e-4 is 20x that. Against
# the reference, another implementation of the same model: REFERENCE_TOL (vLLM's CPU engine
# and ours agree within it). Under tie-aware parity (reduced precision) both comparisons take
# the parity tolerance, which is derived from the dtypes (a logprob gap the engines' rounding
# can make, engines.testing.precision): a reference of the engine's own precision rounds as
# it does (against fp32's the tiny preset in bf16 is 0.14 off on some top-5 entries by the
# sixth token, so the reference must be of the same precision, as for tokens).
BATCH_TOL = 1e-4
REFERENCE_TOL = 1e-3


def tolerances(judge: Judge) -> tuple[tuple[float, float], tuple[float, float]]:
    """(absolute, relative) tolerances for logprob values, batched against alone and against
    the reference, each at its comparison's parity. Tie-aware, one run's value errs by up to
    VALUE_TERMS times the parity tolerance (a logit less the normaliser, each moved by up to
    it) plus the relative part per unit of the value (engines.testing.precision.relative_for):
    batched against alone, the engine's two runs differ by that (the same format, rounded
    the same ways but for reduction order); against the reference, by the sum of the
    engine's and the reference's own parts (engines.testing.precision.value_part). Exact:
    BATCH_TOL and REFERENCE_TOL, nothing relative."""
    batch = ((BATCH_TOL, 0.0) if judge.parity == "exact"
             else (VALUE_TERMS * judge.tolerance, judge.relative))
    versus = judge.versus_reference()
    if versus.parity == "exact":
        return batch, (REFERENCE_TOL, 0.0)
    if versus.reference_value:
        return batch, (versus.reference_value, versus.reference_relative)
    # Not told each side's part: both sides at the precision the tolerance is of.
    return batch, (2 * VALUE_TERMS * versus.tolerance, 2 * versus.relative)


def at_depth(tol: float, judge: Judge, position: int) -> float:
    """A value's absolute tolerance at `position` of its context: under tie-aware parity grown
    with the context's length (engines.testing.precision.depth_factor), else as it is."""
    return tol * depth_factor(position) if judge.parity == "tie-aware" else tol


def _close(a: float, b: float, tol: float, rel: float) -> bool:
    """Within tol + rel x the larger magnitude; equal values are (-inf and -inf: a token the
    processing bans, on both sides)."""
    if a == b:
        return True
    if math.isinf(a) or math.isinf(b):  # one banned, one not: no relative part excuses that
        return False
    return abs(a - b) <= tol + rel * max(abs(a), abs(b))


def _sampled(trace: Trace, rid: Hashable) -> list[float] | None:
    out: list[float] = []
    for _, o in trace.outputs.get(rid, []):
        if o.token_ids and o.logprobs is None:
            return None  # this engine returns no sampled-token logprobs
        out += list(o.logprobs or ())
    return out


def _apart(got: Mapping[int, float], expected: Mapping[int, float], tol: float,
           n: int, rel: float = 0.0) -> str | None:
    """Where two top-n mappings differ by more than `tol` (plus `rel` times the larger
    magnitude): a shared id's value, or an id only one has that is not tied (within that)
    with the other's n-th most likely entry. Each may hold one entry more, the chosen token's
    where it is not in the top n: that one is no boundary of the top n."""
    for token in sorted(set(got) & set(expected)):
        if not _close(got[token], expected[token], tol, rel):
            return f"token {token}: {got[token]:.6g} against {expected[token]:.6g}"
    for mine, other, who in ((got, expected, "returned"), (expected, got, "expected")):
        floor = min(sorted(other.values(), reverse=True)[:n], default=float("-inf"))
        for token in sorted(set(mine) - set(other)):
            if mine[token] > floor and not _close(mine[token], floor, tol, rel):
                return (f"token {token} ({mine[token]:.6g}) {who} only, above the other's "
                        f"top-{n} boundary {floor:.6g}")
    return None


def _compare(check: Check, trace: Trace, r: Request, got: Sequence[Mapping[int, float]],
             expected: Sequence[Mapping[int, float]], tokens: Sequence[int],
             same: Sequence[int], tol: float, rel: float, what: str, judge: Judge) -> None:
    __tracebackhide__ = True
    rid, n = r.request_id, r.params.logprobs
    for i in range(min(len(got), len(expected))):
        if i >= len(same) or tokens[i] != same[i]:
            return  # the tokens parted: parity's to judge, and nothing after compares
        here = at_depth(tol, judge, len(r.prompt_token_ids) + i)
        where = _apart(got[i], expected[i], here, n, rel)
        if where is not None:
            raise check.fail(f"{describe(r, trace)} returned top logprobs for its token "
                             f"{i} (step {step_of_token(trace, rid, i)}) that differ from "
                             f"{what}: {where} ({said(here, rel)}).")


def said(tol: float, rel: float) -> str:
    """The values' tolerance in a message."""
    return f"tolerance {tol:g}" + (f" + {rel:g} x |value|" if rel else "")


# Requests whose values were not compared with the reference's: the two engines' logprobs are
# of different kinds (logprobs_of) and the request's processing is not the identity.
_KINDS = "logprobs: not compared with the reference's, of another kind"


def _add(coverage: Coverage, judged: tuple[int, ...], check: str) -> None:
    """The check's line in the summary: requests whose values were judged (within the
    parity tolerance under tie-aware parity), and those that asked for logprobs and got none
    (an engine may return none: then there was nothing to judge, and it says); and the
    requests whose values were not compared with the reference's (its logprobs are of another
    kind)."""
    for key, n in zip(("with logprobs judged", "with logprobs judged within the tie-aware "
                       "tolerance", "asked for logprobs and got none", _KINDS),
                      judged, strict=False):
        coverage.counts[key] += n


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    n = data.get(_KINDS, 0)
    if not n:
        return []
    return [f"{name}: {n} request{'s' * (n != 1)} with logprobs not compared with the reference "
            "engine's: one engine's top logprobs are raw and the other's processed "
            "(logprobs_of), and the request's processing (a temperature other than 0 or 1, a "
            "penalty, a filter or a constraint) makes them different distributions; they were "
            "compared with the request served alone on the engine itself. A reference "
            "declaring the engine's kind would compare them."]


TALLY = Tally(_add, _notes)


def check_logprobs(check: Check, trace: Trace, judge: Judge) -> tuple[int, int, int, int]:
    """For every request that asks for logprobs and whose tokens are reproducible: one top-N
    mapping per token and the sampled token's logprob equal to its own entry there; the
    mappings equal to the request's served alone (within BATCH_TOL) and to the reference
    engine's (within REFERENCE_TOL) for as long as the tokens agree, where both engines'
    logprobs are of one kind for the request (raw, processed, or processing the identity).
    Under tie-aware parity within the values' tolerances (`tolerances`; a seeded request's
    tokens may part at a sampling boundary there: its values are compared up to it, at one
    context)."""
    __tracebackhide__ = True
    exact = judge.parity == "exact"
    (batch_tol, rel), (reference_tol, reference_rel) = tolerances(judge)
    judged = tied = none = kinds = 0
    for r in trace.workload.requests:
        p, rid = r.params, r.request_id
        if not p.logprobs or (p.temperature > 0 and p.seed is None):
            continue
        tokens = trace.tokens(rid)
        got = tops(trace, rid)
        if got is None:
            none += 1
            continue
        if len(got) != len(tokens):
            raise check.fail(f"{describe(r, trace)} asked for {p.logprobs} logprobs and "
                             f"got {len(got)} top-logprob mappings for {len(tokens)} tokens.")
        sampled = _sampled(trace, rid)
        for i, (token, top) in enumerate(zip(tokens, got, strict=True)):
            if sampled is not None and token in top and abs(top[token] - sampled[i]) > 1e-6:
                raise check.fail(f"{describe(r, trace)} returned logprob {sampled[i]:.6g}"
                                 f" for its token {i} ({token}), whose own top-logprob entry is "
                                 f"{top[token]:.6g}. Expected the same value.")
        judged, tied = (judged + 1, tied) if exact else (judged, tied + 1)
        path = trace.lora_paths.get(r.request_id)
        alone = judge.oracle(r.prompt_token_ids, p, lora_path=path)
        _compare(check, trace, r, got, alone.top_logprobs or (), tokens, alone.tokens, batch_tol,
                 rel, "the same request's, served alone", judge)
        if judge.reference is not None:
            if not comparable_kinds(judge.logprobs_of, judge.reference_logprobs_of, p):
                kinds += 1
                continue
            ref = served_by(judge.reference, r.prompt_token_ids, p, path)
            if ref is not None and ref.top_logprobs:
                _compare(check, trace, r, got, ref.top_logprobs, tokens, ref.tokens, reference_tol,
                         reference_rel, "the reference engine's", judge.versus_reference())
    return judged, tied, none, kinds


# Top logprobs the check asks of every request: enough for a neighbour's to differ.
LOGPROBS = 5
CHECK = Check("logprobs", check_logprobs, needs=(TOP_LOGPROBS,),
              draws=(TOP_LOGPROBS_FEATURE.use(LOGPROBS),), tally=TALLY)
