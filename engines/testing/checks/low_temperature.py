"""low_temperature: a request sampled at a temperature of 1e-2 down to 1e-4 (seed or none) gives
its greedy tokens, except where a token within a few temperatures of the most likely one in
logprob could have been drawn. The samplers' break point that no other check reaches: logits /
temperature overflowing, a small temperature served at another (engines.testing.features
.low_temperature says where such bugs were found).

The rule, and its false-alarm bound: at temperature T a token whose logprob is g below the
most likely one is drawn with probability at most exp(-g / T). A divergence from the greedy
tokens fails only where the token drawn is more than tolerance + T * ln(V * k / ALPHA) below
the most likely one (V the vocabulary, k the tokens compared, the judge's tolerance covering
what separates the engine's logits from the ones measured), so a correct engine fails one
request in 1 / ALPHA at most. Only the first divergence is judged: after it the request's
context is not the greedy run's.

The gap is measured by the reference engine (its top logprobs at the greedy run's context), so
the check needs one: an engine's own logprobs may be processed, or not of the distribution it
samples (examples/toy_engine.py's are made up), and a bound read from them would be no bound.
Where the reference gives no logprobs, or the engine declares reference_parity broken (its
model is not the reference's: a converter that drops a field), the divergence is not judged
(counted, and the summary says).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from engines.protocol import Request, SamplingParams
from engines.testing.checks.base import Check, Need
from engines.testing.checks.needs import REFERENCE, TEMPERATURE
from engines.testing.checks.reference_parity import CHECK as REFERENCE_PARITY
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.low_temperature import FEATURE as LOW_TEMPERATURE_FEATURE
from engines.testing.features.low_temperature import TEMPERATURES
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["ALPHA", "CHECK", "SERVED_LOW", "TALLY", "check_low_temperature", "drawable_gap"]

ALPHA = 1e-9  # a correct engine's chance, per request, of a draw this check fails
_JUDGED = "low-temperature requests judged"
_NEAR = "low temperature: diverged to a token a draw could plausibly give"
_UNKNOWN = "low temperature: diverged where the reference gave no top logprobs"
_OTHER_MODEL = "low temperature: diverged on an engine whose model is not the reference's"


def drawable_gap(temperature: float, vocab: int, tokens: int, tolerance: float) -> float:
    """The largest logprob gap below the most likely token a correct engine may draw at
    `temperature`, over `tokens` draws from `vocab` ids (module docstring)."""
    return tolerance + temperature * math.log(max(vocab, 2) * max(tokens, 1) / ALPHA)


def _low(params: SamplingParams) -> bool:
    return 0.0 < params.temperature <= max(TEMPERATURES)


def _greedy(params: SamplingParams) -> SamplingParams:
    return dataclasses.replace(params, temperature=0.0, seed=None)


def _judge_one(check: Check, trace: Trace, judge: Judge, r: Request) -> str:
    """'judged', 'near', 'unknown' or 'other model' for one low-temperature request; raises
    on a bug."""
    got = trace.tokens(r.request_id)
    expected = list(judge.oracle(r.prompt_token_ids, _greedy(r.params)).tokens)
    if r.request_id in trace.aborted_at or r.request_id not in trace.finished_at:
        expected = expected[: len(got)]
    at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
    p = r.params
    seed = f"seed {p.seed}" if p.seed is not None else "no seed"
    how = f"at temperature {p.temperature:g} ({seed})"
    if at is None:
        if len(got) != len(expected):
            raise check.fail(f"{describe(r, trace)} {how} gave {got}, greedy alone {expected}: "
                             "the same tokens were expected, to the same length.")
        return "judged"
    assert judge.reference is not None  # the check's REFERENCE need
    if REFERENCE_PARITY.name in judge.declared:
        # The engine says its tokens are not the reference's (a converter that drops a
        # RoPE field): the reference's distribution is not the one it draws from.
        return "other model"
    top = judge.reference.top_at((*r.prompt_token_ids, *expected[:at]))
    if not top:
        return "unknown"
    best = max(top.values())
    # A token outside the top candidates is at least as far below as the last of them.
    gap = best - top.get(got[at], min(top.values()))
    allowed = drawable_gap(p.temperature, judge.vocab_size or trace.vocab_size, len(expected),
                           judge.tolerance)
    if gap <= allowed:
        return "near"
    raise check.fail(
        f"{describe(r, trace)} {how} gave {got}; greedy alone it gives {expected}. They part "
        f"at generated position {at} ({got[at]} against {expected[at]}), where the reference "
        f"engine's logprobs put {got[at]} {gap:.3g} below the most likely token: a draw that "
        f"far below has probability at most exp(-{gap:.3g} / {p.temperature:g}), so the greedy "
        f"token was expected (tokens within {allowed:.3g} are forgiven). A temperature floor, "
        "a small temperature served at another, or logits / temperature overflowing gives "
        "this.")


def check_low_temperature(check: Check, trace: Trace, judge: Judge
                          ) -> tuple[int, int, int, int]:
    """(judged, forgiven as a plausible draw, not judged for want of logprobs, not judged as
    the reference is not the engine's model)."""
    __tracebackhide__ = True
    counts = {"judged": 0, "near": 0, "unknown": 0, "other model": 0}
    for r in trace.workload.requests:
        if _low(r.params):
            counts[_judge_one(check, trace, judge, r)] += 1
    return counts["judged"], counts["near"], counts["unknown"], counts["other model"]


def _add(coverage: Coverage, judged: tuple[int, int, int, int], name: str) -> None:
    for key, n in zip((_JUDGED, _NEAR, _UNKNOWN, _OTHER_MODEL), judged, strict=True):
        coverage.counts[key] += n


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    out = []
    if data.get(_NEAR):
        out.append(f"{name}: {data[_NEAR]} request(s) parted from their greedy tokens to a "
                   "token close enough to the most likely one that a draw at their temperature "
                   "could give it: forgiven, and not compared after it.")
    if data.get(_UNKNOWN):
        out.append(f"{name}: {data[_UNKNOWN]} request(s) parted from their greedy tokens "
                   "where the reference engine returned no top logprobs, so a plausible draw "
                   "could not be told from a bug: not judged.")
    if data.get(_OTHER_MODEL):
        out.append(f"{name}: {data[_OTHER_MODEL]} request(s) parted from their greedy tokens "
                   f"on an engine that declares {REFERENCE_PARITY.name} broken (its tokens "
                   "are not the reference's model's), so the reference's logprobs cannot "
                   "bound its draws: not judged.")
    return out


TALLY = Tally(_add, _notes)


# An engine whose declared floor (Capabilities.min_temperature) is above every temperature
# drawn serves them all at its floor: nothing low is left to judge.
SERVED_LOW = Need("a temperature of 1e-2 or less served as asked",
                  lambda g: g.limits.min_temperature <= max(TEMPERATURES),
                  "{check} needs an engine that samples at 1e-2 or less: every engine compared "
                  "must declare a min_temperature of at most 0.01")

CHECK = Check("low_temperature", check_low_temperature, needs=(TEMPERATURE, REFERENCE,
                                                               SERVED_LOW),
              draws=(LOW_TEMPERATURE_FEATURE.use(),), tally=TALLY)
