"""A greedy choice under logits processing (penalties, logit bias, min_tokens, allowed ids, bad
words), judged at reduced precision (tie-aware parity): teacher-forced along the engine's own
tokens, against the reference engine's processed distribution at the engine's context.

Why not the raw near-tie rule: a penalty or a bias moves the two most likely tokens, so a raw
near-tie says nothing of the processed choice (a tie it forgave could be a bug, a choice it
did not could be a tie). And why teacher-forced: after a forgiven tie the engine's context is
not the reference's any more, so its later tokens are judged at its own context, not dropped.

At each position q from `start` on, the reference serves prompt + the engine's first q tokens
alone for one token, asked for every candidate (its whole vocabulary). Its raw logprobs are
processed here as SamplingParams says, each step at the engine's context: allowed ids and
bad words (banned next ids from the engine's tokens so far) at -inf, the bias added, the stop
ids at -inf while fewer than min_tokens are out, the frequency and presence penalties over the
engine's tokens so far subtracted. These steps move a logit by a constant or ban it, so raw
logprobs (logits less one constant) give the processed ones exactly. The engine's token must
then be allowed (a forbidden token fails at any precision) and within the tolerance of the
best processed value (a larger gap fails; a smaller one, where it is not the best, is
forgiven and counted).

repetition_penalty divides a positive logit and multiplies a negative one, so it needs the
logits' sign, which raw logprobs do not carry. The call therefore carries the request's
repetition penalty, bias, allowed ids and min_tokens' hold (the penalty reaches the prompt and
the output alike, so the engine's tokens may sit in the prompt): a reference that returns
processed logprobs (logprobs_of "processed", e.g. engines.sequential:processed_bf16) hands
back that distribution, and only the output-only steps (frequency and presence penalties, bad
words) are done here, exactly as above. With a raw reference the reference's greedy token is
the processed argmax where nothing else is output-only: the engine's token must be that one;
a differing token, or a position with an output-only step, is not judged (counted): its gap
is unknown without the logits. Guided requests are not judged here either (their mask is the
grammar's; the constraints check judges what it forbids, exactly).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engines.protocol import SamplingParams
from engines.testing.coverage import Coverage
from engines.testing.oracle import AloneOracle
from engines.testing.processing import not_identity

__all__ = ["FIELDS", "FILTERS", "Forced", "add_forced", "banned_next", "filters_hold",
           "fields_of", "forced_notes", "judge_forced", "judged_forced", "processed_logits"]

# What a greedy choice's processing is named by in the counts: each field it sets.
FIELDS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens",
          "logit_bias", "allowed_token_ids", "bad_words", "guided", "top_k", "top_p", "min_p")
FILTERS = ("top_k", "top_p", "min_p")


@dataclass(slots=True)
class Forced:
    """Positions judged teacher-forced, forgiven (within tolerance, not the best) and not
    judged (the gap unknown), each counted once per processing field the request sets; and
    the requests whose raw greedy divergence was forgiven at a near-tie (their comparison
    ends there), so that a tie-aware pass says how much it forgave."""

    judged: Counter[str] = field(default_factory=Counter)
    forgiven: Counter[str] = field(default_factory=Counter)
    unjudged: Counter[str] = field(default_factory=Counter)
    ties: int = 0
    # Divergences from the reference accepted by top-k membership (a quantized engine against
    # a reference that is not: engines.testing.precision), unprocessed ones and processed
    # positions alike.
    in_top: int = 0

    def count(self, params: SamplingParams, into: Counter[str]) -> None:
        for name in fields_of(params):
            into[name] += 1


def fields_of(params: SamplingParams) -> list[str]:
    """The processing fields a request sets (FIELDS), at their non-default values."""
    default = SamplingParams()
    return [n for n in FIELDS if getattr(params, n) != getattr(default, n)
            and (n != "min_tokens" or params.stop_token_ids)
            and (n not in FILTERS or params.temperature > 0)]


def banned_next(words: Sequence[Sequence[int]], before: Sequence[int]) -> set[int]:
    """The ids whose emission next would complete a bad word, after `before`."""
    n = len(before)
    return {w[-1] for w in words if w and len(w) - 1 <= n
            and tuple(before[n - len(w) + 1:]) == tuple(w[:-1])}


def processed_logits(given: Mapping[int, float], params: SamplingParams,
                     output: Sequence[int], kind: str = "raw") -> dict[int, float] | None:
    """The request's processed logits, less one constant, after `output` (its tokens so far),
    from the whole distribution `given` (logprobs, every id) of `kind`: "raw", or "processed"
    by the reference at the engine's context (_call: every step but the output-only ones
    done); banned ids are left out. None where the steps need the logits themselves
    (repetition_penalty on raw ones) or a grammar (guided)."""
    p = params
    if p.guided is not None or (kind == "raw" and p.repetition_penalty != 1.0):
        return None
    banned = banned_next(p.bad_words, output)
    if kind == "raw" and len(output) < p.min_tokens:
        banned |= set(p.stop_token_ids)
    allowed = (set(p.allowed_token_ids) if kind == "raw" and p.allowed_token_ids is not None
               else None)
    bias = dict(p.logit_bias) if kind == "raw" else {}
    counts = Counter(output)
    out = {}
    for t, v in given.items():
        if t in banned or (allowed is not None and t not in allowed) or v == -math.inf:
            continue
        c = counts.get(t, 0)
        out[t] = (v + bias.get(t, 0.0) - p.frequency_penalty * c
                  - (p.presence_penalty if c else 0.0))
    return out


def _call(params: SamplingParams, out: Sequence[int], vocab: int) -> SamplingParams:
    """What the reference is asked at the engine's context (module docstring): one greedy
    token, every candidate, and the steps that do not depend on which tokens are output."""
    p = params
    held = len(out) < p.min_tokens and bool(p.stop_token_ids)
    return SamplingParams(max_tokens=1, logprobs=vocab, repetition_penalty=p.repetition_penalty,
                          logit_bias=p.logit_bias, allowed_token_ids=p.allowed_token_ids,
                          min_tokens=1 if held else 0,
                          stop_token_ids=p.stop_token_ids if held else ())


def _output_only(params: SamplingParams) -> bool:
    return bool(params.frequency_penalty or params.presence_penalty or params.bad_words)


def judge_forced(reference: AloneOracle, prompt: Sequence[int], params: SamplingParams,
                 observed: Sequence[int], start: int, *, tolerance: float, vocab: int,
                 counts: Forced, kind: str = "raw", top_k: int = 0) -> str | None:
    """None if every token of `observed` from `start` on is the reference's processed choice
    at the engine's context, or within `tolerance` of it (forgiven); else where and how one is
    not (a forbidden token, or a gap past the tolerance). Counts into `counts`. `top_k` > 0:
    a token past the tolerance is accepted among the k most likely of the processed
    distribution (a quantized engine against a reference that is not), counted in_top; what
    the processing forbids still fails."""
    for q in range(start, len(observed)):
        o, before = observed[q], list(observed[:q])
        served = reference((*prompt, *before), _call(params, before, vocab))
        raw = served.top_logprobs[0] if served.top_logprobs else None
        z = (processed_logits(raw, params, before, kind)
             if raw is not None and len(raw) >= vocab else None)
        if not z:  # unknown, or the constraints leave no token (the constraints check's)
            if (z is None and params.guided is None and not _output_only(params)
                    and served.tokens and served.tokens[0] == o):
                counts.count(params, counts.judged)
            else:
                counts.count(params, counts.unjudged)
            continue
        if o not in z:
            return (f"at generated position {q} the engine chose {o}, which the request's "
                    f"processing forbids there ({_why(params, before, o)})")
        best = max(z, key=lambda t: z[t])
        gap = z[best] - z[o]
        ahead = sum(v > z[o] for v in z.values()) if top_k else 0
        if gap > tolerance and top_k and ahead < top_k:
            counts.count(params, counts.judged)
            counts.in_top += 1
            continue
        if gap > tolerance:
            if top_k:
                return (f"at generated position {q} the engine chose {o}, with {ahead} "
                        f"tokens more likely in the reference's processed distribution at "
                        f"the engine's own context: outside its {top_k} most likely")
            return (f"at generated position {q} the engine chose {o}, {gap:.3g} below the "
                    f"reference's processed choice {best} at the engine's own context "
                    f"(tolerance {tolerance:g})")
        counts.count(params, counts.judged)
        if gap > 0:
            counts.count(params, counts.forgiven)
    return None


def filters_hold(reference: AloneOracle, prompt: Sequence[int], params: SamplingParams,
                 observed: Sequence[int], *, tolerance: float, vocab: int, counts: Forced,
                 kind: str = "raw") -> str | None:
    """None if every sampled token of `observed` is one the request's filters (top_k, top_p,
    min_p) keep at the engine's context, or could keep within `tolerance`; else where one is
    forbidden. Judged on the reference's processed distribution there (as judge_forced gets
    it), each filter alone over the whole distribution: a token the chain of filters keeps is
    kept by each alone (min_p keeps the most likely, so top_k ranks the same; top_p over
    fewer tokens keeps fewer), so a token one alone drops is a bug at any precision. Counted
    per field: judged, or not judged where the distribution is unknown (module docstring)."""
    t = params.temperature
    for q, o in enumerate(observed):
        before = list(observed[:q])
        served = reference((*prompt, *before), _call(params, before, vocab))
        raw = served.top_logprobs[0] if served.top_logprobs else None
        z = (processed_logits(raw, params, before, kind)
             if raw is not None and len(raw) >= vocab else None)
        if not z:  # unknown, or the constraints leave no token (the constraints check's)
            counts.count(params, counts.unjudged)
            continue
        if o not in z:
            return (f"at generated position {q} the engine drew {o}, which the request's "
                    f"processing forbids there ({_why(params, before, o)})")
        ahead = [v for v in z.values() if v > z[o] + tolerance]  # surely more likely than o
        if 0 < params.top_k <= len(ahead):
            return (f"at generated position {q} the engine drew {o}, with {len(ahead)} "
                    f"tokens more likely by over {tolerance:g} at the engine's context: "
                    f"outside top_k={params.top_k}")
        top = max(z.values())
        if params.min_p > 0 and z[o] < top + t * math.log(params.min_p) - tolerance:
            return (f"at generated position {q} the engine drew {o}, its probability below "
                    f"min_p={params.min_p:g} times the most likely one's (temperature {t:g}) "
                    "at the engine's context, past the tolerance")
        if params.top_p < 1.0:
            norm = sum(math.exp((v - top) / t) for v in z.values())
            mass = sum(math.exp((v - top) / t) for v in ahead) / norm
            if mass >= params.top_p:
                return (f"at generated position {q} the engine drew {o}, behind tokens of "
                        f"{mass:.3g} probability (temperature {t:g}) at the engine's context: "
                        f"outside top_p={params.top_p:g}")
        counts.count(params, counts.judged)
    return None


def _why(params: SamplingParams, before: Sequence[int], token: int) -> str:
    if params.allowed_token_ids is not None and token not in params.allowed_token_ids:
        return "not among allowed_token_ids"
    if token in banned_next(params.bad_words, before):
        return "it completes a bad word"
    return f"a stop id before min_tokens={params.min_tokens}"


def judged_forced(params: SamplingParams, tie_aware: bool) -> bool:
    """Whether a request's greedy tokens are judged teacher-forced (this module): greedy,
    processed, under tie-aware parity."""
    return tie_aware and params.temperature == 0 and not_identity(params) is not None



_KEYS = ("judged", "forgiven", "unjudged")


def add_forced(coverage: Coverage, forced: Forced, check: str) -> None:
    """Put one workload's teacher-forced counts into the summary, by field."""
    for key, got in zip(_KEYS, (forced.judged, forced.forgiven, forced.unjudged), strict=True):
        for name, n in got.items():
            coverage.counts[f"processed: {check} {key} {name}"] += n
    if forced.ties:
        coverage.counts[f"ties: {check}"] += forced.ties
    if forced.in_top:
        coverage.counts[f"in top-k: {check}"] += forced.in_top


def forced_notes(data: Mapping[str, int], check: str) -> list[str]:
    """The summary's sentence on what `check` judged teacher-forced, by field."""
    def by_field(key: str) -> str:
        found = [(n, data.get(f"processed: {check} {key} {n}", 0)) for n in FIELDS]
        listed = ", ".join(f"{name} {n}" for name, n in found if n)
        return f"{sum(n for _, n in found)}" + (f" ({listed})" if listed else "")

    out = [f"{check}: {data[f'ties: {check}']} greedy divergence(s) forgiven at a raw near-tie "
           "(within the tolerance, by the reference's margins where one is given; the "
           "request's comparison ends there)"] if data.get(f"ties: {check}") else []
    if data.get(f"in top-k: {check}"):
        out.append(f"{check}: {data[f'in top-k: {check}']} divergence(s) from the reference "
                   "accepted by top-k membership, not by a near-tie (the engine computes or "
                   "caches in a quantized format the reference does not: each diverging token "
                   "among the reference's most likely at the same context, and the "
                   "reference's among the engine's own where it reports them, as vLLM's "
                   "check_logprobs_close; an unprocessed request's comparison ends there)")
    if not any(k.startswith(f"processed: {check} ") for k in data):
        return out
    out += [f"{check}: choices under logits processing, tie-aware: {by_field('judged')} "
           "position(s) judged (a greedy token equal to the run compared's, or teacher-forced "
           "against the reference's processed distribution at the engine's context; a drawn "
           "token kept by its filters there), "
           f"{by_field('forgiven')} forgiven at a processed near-tie, counted once per field "
           "the request sets"]
    if any(data.get(f"processed: {check} unjudged {n}") for n in FIELDS):
        out.append(f"{check}: {by_field('unjudged')} processed position(s) not judged: the "
                   "gap needs the logits (repetition_penalty with an output-only step, or a "
                   "choice other than the reference's), a grammar (guided), or a reference "
                   "engine's whole distribution")
    return out
