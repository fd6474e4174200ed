"""beam_search: a request with beam_width > 1 gets its n best beams as children 0..n-1, each
finishing once (STOP exactly when it ends with a stop id, LENGTH at max_tokens, no stop id
before its end, none among its first min_tokens tokens); batched it returns the beams it
returns served alone; and the reference engine's beams (engines.core.beams states the rule:
transformers' generate with early_stopping="never"). Catches beam state mixed between
requests batched together (tensorrtllm_backend #682), beam index arithmetic (vLLM #31081),
scores ranked without the length normalisation, a search ignoring min_tokens.

Ties. Served alone and batched on one engine under exact parity, the beams must be equal.
Against the reference (or batched vs alone under tie-aware parity), fp32 noise may reorder
beams whose scores (nearly) tie, or part a search at its pruning boundary. Beams that differ
are then scored, the same way for both lists, from the reference engine's own raw logprobs
(each beam token's logprob, served alone with every candidate asked for: logprobs =
vocabulary size, teacher-forced along the beam): cumulative logprob / generated length **
length_penalty. Under exact parity they are accepted if, rank by rank, the two lists' scores
agree within the judge's tolerance (fp32 noise: a near-tie, or a different search of equal
worth). Under tie-aware parity each logprob summed may be off by the tolerance, so a beam's
score by the tolerance times its length over length ** length_penalty (`bound`); and two
reduced-precision searches may part at a first-token near-tie and end on different beams,
so the engine's beams are accepted if, rank by rank, each scores within its own bound plus
that of the best beam of its rank among both lists (the engine's or the other run's), by
the reference's scores: as good as the best the reference knows of. Else the check fails (a
reference returning processed logprobs gives raw ones for these unprocessed calls). Without
a vocabulary size, beams that differ fail under exact parity and are left unjudged (counted)
under tie-aware parity.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from engines.protocol import FinishReason, Request, SamplingParams, StepOutput
from engines.testing.checks.base import Check
from engines.testing.checks.needs import BEAMS
from engines.testing.checks.reference_parity import CHECK as REFERENCE_PARITY
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.beams import FEATURE as BEAMS_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.oracle import Alone, AloneOracle
from engines.testing.processing import comparable_kinds
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "check_beam_search", "is_beam_search"]


def is_beam_search(params: SamplingParams) -> bool:
    return isinstance(params.beam_width, int) and params.beam_width > 1


def _count(params: SamplingParams) -> int:
    return params.n if isinstance(params.n, int) and params.n > 1 else 1


def _about(r: Request) -> str:
    p = r.params
    return (f"beam_width={p.beam_width}, n={p.n}, length_penalty={p.length_penalty}, "
            f"max_tokens={p.max_tokens}, {len(p.stop_token_ids)} stop id(s)"
            + (f", min_tokens={p.min_tokens}" if p.min_tokens else ""))


def _streams(trace: Trace, rid: Hashable) -> dict[int, list[StepOutput]]:
    out: dict[int, list[StepOutput]] = {}
    for _, o in trace.outputs.get(rid, []):
        out.setdefault(o.index, []).append(o)
    return out


def _shape(check: Check, trace: Trace, r: Request,
           streams: dict[int, list[StepOutput]]) -> list[tuple[int, ...]]:
    """Each child's tokens, after checking that each finished once within its budget, with
    a reason its tokens agree with."""
    __tracebackhide__ = True
    p, n = r.params, _count(r.params)
    where = f"{describe(r, trace)} ({_about(r)})"
    stray = sorted(i for i in streams if not 0 <= i < n)
    if stray:
        raise check.fail(f"{where} got outputs for children {stray}; expected beams "
                         f"0..{n - 1}.")
    beams = []
    stops = set(p.stop_token_ids)
    for i in range(n):
        outs = streams.get(i, [])
        ends = [k for k, o in enumerate(outs) if o.finished]
        if ends != [len(outs) - 1]:
            raise check.fail(f"{where}: beam {i} finished {len(ends)} time(s), "
                             f"{'not last' if ends else 'never'}; each of the n best beams "
                             "finishes exactly once.")
        toks = tuple(t for o in outs for t in o.token_ids)
        reason = outs[-1].finish_reason
        early = [k for k, t in enumerate(toks[:-1]) if t in stops]
        # min_tokens: no stop id among the first min_tokens tokens (its score is -inf then).
        held = bool(toks) and toks[-1] in stops and len(toks) <= p.min_tokens
        wrong = (not toks or len(toks) > p.max_tokens or bool(early) or held
                 or (reason == FinishReason.STOP) != (toks[-1] in stops)
                 or (reason == FinishReason.LENGTH and len(toks) != p.max_tokens)
                 or reason not in (FinishReason.STOP, FinishReason.LENGTH))
        if wrong:
            raise check.fail(f"{where}: beam {i} is {list(toks)}, finishing {reason}; a beam "
                             "ends at its first stop id (STOP) or at max_tokens (LENGTH)"
                             + (f", and holds no stop id among its first {p.min_tokens} "
                                "tokens (min_tokens)" if p.min_tokens else "") + ".")
        beams.append(toks)
    return beams


def _alone_beams(alone: Alone, n: int) -> list[tuple[int, ...]]:
    if n > 1 and alone.children is not None:
        return list(alone.children)
    return [alone.tokens]


def _row(reference: AloneOracle, prompt: Sequence[int], generated: Sequence[int],
         vocab: int) -> Mapping[int, float]:
    """The reference's raw logprobs of every token after prompt + generated (empty where it
    gives none)."""
    alone = reference((*prompt, *generated), SamplingParams(max_tokens=1, logprobs=vocab))
    return alone.top_logprobs[0] if alone.top_logprobs else {}


def _sums(reference: AloneOracle, prompt: Sequence[int], beam: Sequence[int],
          vocab: int) -> list[float] | None:
    """The beam's cumulative logprobs after each of its tokens, from the reference's raw
    logprobs teacher-forced along it (None where one is missing)."""
    total, sums = 0.0, []
    for j, token in enumerate(beam):
        top = _row(reference, prompt, beam[:j], vocab)
        if token not in top:
            return None
        total += top[token]
        sums.append(total)
    return sums


def _score(reference: AloneOracle, prompt: Sequence[int], beam: Sequence[int],
           params: SamplingParams, vocab: int) -> float | None:
    """The beam's score from the reference's raw logprobs (None where one is missing)."""
    sums = _sums(reference, prompt, beam, vocab)
    return None if sums is None else sums[-1] / (len(beam) ** params.length_penalty)


def _near_tie(judge: Judge, r: Request, got: list[tuple[int, ...]],
              want: list[tuple[int, ...]]) -> str | None:
    """Why two beam lists are forgiven as a near-tie (None: they are not, or cannot be
    scored)."""
    reference = judge.reference
    # The scores are asked with no processing (_score), where processed logprobs are raw.
    if reference is None or not judge.vocab_size or not comparable_kinds(
            "raw", judge.reference_logprobs_of, SamplingParams()):
        return None
    scores = []
    for beams in (got, want):
        row = [_score(reference, r.prompt_token_ids, b, r.params, judge.vocab_size)
               for b in beams]
        if any(s is None for s in row):
            return None
        scores.append([float(s) for s in row if s is not None])
    if judge.parity == "tie-aware":
        def sums(beam: tuple[int, ...]) -> list[float] | None:
            return _sums(reference, r.prompt_token_ids, beam, judge.vocab_size)

        def after(generated: tuple[int, ...]) -> Mapping[int, float]:
            return _row(reference, r.prompt_token_ids, generated, judge.vocab_size)

        return _worthy(judge.tolerance, r.params, got, scores[0], want, scores[1], sums,
                       after)
    gaps = [abs(a - b) for a, b in zip(*scores, strict=True)]
    if max(gaps) > judge.tolerance:
        return None
    return f"scores agree rank by rank within {max(gaps):.2g}"


def bound(tolerance: float, beam: Sequence[int], params: SamplingParams) -> float:
    """How far reduced precision may move a beam's score: each of its logprobs by up to the
    tolerance, summed over its tokens and divided as the score is (length ** length_penalty)."""
    return tolerance * len(beam) / len(beam) ** params.length_penalty


def _pruned(tolerance: float, params: SamplingParams, beam: tuple[int, ...],
            got: list[tuple[int, ...]], sums: Callable[[tuple[int, ...]], list[float] | None],
            row: Callable[[tuple[int, ...]], Mapping[int, float]]) -> bool:
    """Whether the engine's search may have dropped `beam` (the other run's) at a near-tie.
    Where the beam leaves the engine's beams (after the longest prefix it shares with one of
    them, j tokens), its first j + 1 tokens were a candidate of the engine's search at step
    j + 1. A search keeps candidates by cumulative logprob, so the searches parted at a
    near-tie there, and the beam is not held against the engine, where the dropped one's (by
    the reference) is within what two sums may move (the tolerance per token summed, twice)
    of one the engine kept, or of the last place the engine had to give (`_boundary`).
    Further apart, a drop is no rounding's."""
    j = max(next((k for k, (a, b) in enumerate(zip(beam, mine, strict=False)) if a != b),
                 min(len(beam), len(mine))) for mine in got)
    if j >= len(beam):
        return False  # the beam is a prefix of one of the engine's: it is not parted
    theirs = sums(beam)
    if theirs is None:
        return True  # cannot be scored: not held against the engine
    slack = 2 * tolerance * (j + 1)
    kept = [s[j] for b in got if len(b) > j and (s := sums(b)) is not None]
    if any(abs(theirs[j] - k) <= slack for k in kept):
        return True
    last = _boundary(params, beam[:j + 1], got, sums, row)
    return last is not None and theirs[j] <= last + slack


def _boundary(params: SamplingParams, candidate: tuple[int, ...], got: list[tuple[int, ...]],
              sums: Callable[[tuple[int, ...]], list[float] | None],
              row: Callable[[tuple[int, ...]], Mapping[int, float]]) -> float | None:
    """The cumulative logprob (by the reference) of the last candidate the engine's search
    could keep instead of `candidate` at its step k, among the candidates known to be there:
    the extensions of every prefix the engine's returned beams show running at step k - 1
    (at step 1 the prompt alone, so all of them). A candidate that ends its hypothesis must
    rank among the first beam_width of all; one that goes on, among the first beam_width that
    go on (engines.core.beams). The engine's full candidate set holds at least these, so its
    last kept place is at least this good: a `candidate` within rounding of it, or below it,
    may have been dropped without a bug. Running beams that were dropped later (a first-token
    near-tie of two beams the engine returned neither of) are seen this way, where the beams
    returned show only those that survived. None: fewer candidates known than places."""
    k = len(candidate)
    running = {b[:k - 1] for b in got if len(b) > k - 1}
    if candidate[:-1] not in running:
        return None  # the candidate's own prefix is not known to have been running
    stops, width = set(params.stop_token_ids), params.beam_width
    ends = candidate[-1] in stops or k >= params.max_tokens
    others: list[float] = []
    for prefix in running:
        found = sums(prefix) if prefix else [0.0]
        if found is None:
            continue  # fewer known: the place found can only be worse, the rule stricter
        others += [found[-1] + lp for token, lp in row(prefix).items()
                   if (*prefix, token) != candidate
                   and (ends or not (token in stops or k >= params.max_tokens))
                   and not (token in stops and k <= params.min_tokens)]  # -inf: min_tokens
    if len(others) < width:
        return None
    return sorted(others, reverse=True)[width - 1]


def _worthy(tolerance: float, params: SamplingParams, got: list[tuple[int, ...]],
            got_scores: list[float], want: list[tuple[int, ...]], want_scores: list[float],
            sums: Callable[[tuple[int, ...]], list[float] | None],
            row: Callable[[tuple[int, ...]], Mapping[int, float]]) -> str | None:
    """Tie-aware: whether the engine's beams are as good as the best the reference knows of
    (module docstring), by the reference's scores. Rank by rank, the engine's i-th best beam
    must score within the two beams' bounds of the i-th best of both lists together, and its
    list must be distinct and best first within the bounds of neighbours. Two searches at
    reduced precision may part at a near-tie and end on other beams, better or worse, so the
    lists are not compared as lists: an engine whose beams score better than the other run's
    is never faulted for it, and the other run's beams that the engine's search may have
    dropped at a near-tie (_pruned) are not held against it."""
    if len(set(got)) < len(got):
        return None  # a search returns distinct hypotheses
    for i in range(len(got) - 1):  # best first, within what precision may reorder
        if got_scores[i + 1] - got_scores[i] > (bound(tolerance, got[i], params)
                                                + bound(tolerance, got[i + 1], params)):
            return None
    held = [(b, s) for b, s in zip(want, want_scores, strict=True)
            if b in got or not _pruned(tolerance, params, b, got, sums, row)]
    pool = dict(held) | dict(zip(got, got_scores, strict=True))
    best = sorted(pool, key=lambda b: -pool[b])
    mine = sorted(zip(got, got_scores, strict=True), key=lambda bs: -bs[1])
    worst = 0.0
    for i, (beam, score) in enumerate(mine):
        top = best[min(i, len(best) - 1)]
        allowed = bound(tolerance, beam, params) + bound(tolerance, top, params)
        if pool[top] - score > allowed:
            return None
        worst = max(worst, (pool[top] - score) / allowed if allowed else 0.0)
    return (f"each beam within {worst:.0%} of its allowance of the best score at its rank "
            "(the tolerance per token, scaled as the score is)")


def _compare(check: Check, judge: Judge, trace: Trace, r: Request, got: list[tuple[int, ...]],
             want: list[tuple[int, ...]], what: str, strict: bool) -> int:
    """Fail unless the beams agree (or tie); 1 if forgiven as a tie or left unjudged."""
    __tracebackhide__ = True
    if got == want:
        return 0
    if _near_tie(judge, r, got, want) is not None:
        return 1
    if not strict and (judge.reference is None or not judge.vocab_size):
        return 1
    raise check.fail(f"{describe(r, trace)} ({_about(r)}) returned the beams "
                     f"{[list(b) for b in got]} in this workload but {[list(b) for b in want]} "
                     f"{what}, best first; scored from the reference's logprobs (cumulative "
                     "logprob / length ** length_penalty) "
                     + (f"{_scored(judge, r, got, want)}: a beam of this run's falls below the "
                        "best of its rank by more than the tolerance "
                        f"{judge.tolerance} per token allows (scaled as the score is), or "
                        "could not be scored." if judge.parity == "tie-aware" else
                        "they differ by more than the tolerance "
                        f"{judge.tolerance}, or could not be scored."))


def _scored(judge: Judge, r: Request, got: list[tuple[int, ...]],
            want: list[tuple[int, ...]]) -> str:
    """The two lists' scores from the reference, for a failure message."""
    reference = judge.reference
    if reference is None or not judge.vocab_size:
        return "(no reference to score them)"
    rows = [[_score(reference, r.prompt_token_ids, b, r.params, judge.vocab_size)
             for b in beams] for beams in (got, want)]
    shown = [", ".join("unscored" if v is None else f"{v:.4g}" for v in row) for row in rows]
    return f"[{shown[0]}] against [{shown[1]}]"


def _add(coverage: Coverage, judged: tuple[int, int, int, int], check: str) -> None:
    for key, n in zip(("beam searches judged", "beam searches against the reference",
                       "beam lists forgiven as near-ties or left unjudged",
                       "beam searches not compared with the reference (the engine declares "
                       "its tokens differ from the reference's)"), judged, strict=True):
        coverage.counts[key] += n


TALLY = Tally(_add)


def check_beam_search(check: Check, trace: Trace, judge: Judge
                      ) -> tuple[int, int, int, int]:
    """Every beam request: its children's shape; its beams as served alone (exactly, under
    exact parity); as the reference engine's (near-ties forgiven, above)."""
    __tracebackhide__ = True
    judged = referenced = forgiven = unreferenced = 0
    for r in trace.workload.requests:
        p = r.params
        if not is_beam_search(p):
            continue
        judged += 1
        streams = _streams(trace, r.request_id)
        if r.request_id in trace.aborted_at or trace.stalled:  # cut short: children only
            stray = sorted(i for i in streams if not 0 <= i < _count(p))
            if stray:
                raise check.fail(f"{describe(r, trace)} ({_about(r)}) got outputs for "
                                 f"children {stray}.")
            continue
        beams = _shape(check, trace, r, streams)
        n = _count(p)
        alone = _alone_beams(judge.oracle(r.prompt_token_ids, p), n)
        exact = judge.parity == "exact"
        forgiven += _compare(check, judge, trace, r, beams, alone, "served alone", exact)
        if judge.reference is None:
            continue
        # An engine that declares reference_parity broken (its tokens are not the model's:
        # a converter's lost RoPE scaling) has beams no reference can vouch for: judged
        # against itself alone, the declared check's strict xfail stands for the rest.
        if any(c.name in judge.declared for c in check.rejudges):
            unreferenced += 1
            continue
        referenced += 1
        want = _alone_beams(judge.reference(r.prompt_token_ids, p), n)
        forgiven += _compare(check, judge.versus_reference(), trace, r, beams, want,
                             "on the reference engine", True)
    return judged, referenced, forgiven, unreferenced


CHECK = Check("beam_search", check_beam_search, needs=(BEAMS,), draws=(BEAMS_FEATURE.use(),),
              tally=TALLY, rejudges=(REFERENCE_PARITY,))
