"""sequence_distribution: the first tokens of unseeded sampled requests follow the reference
engine's distribution, position by position. Where tokens cannot be compared one for one
(sampling without a seed; a speculating engine's sampled tokens, which the min(1, p/q) rule
draws by other randomness than plain decoding), this is what can go wrong and be seen: a
speculative sampler whose residual is not normalised, whose acceptance uses the wrong
ratio, or which keeps a draft that should have been resampled, emits tokens that plain
decoding would not draw that often, from the second token on.

The test (a randomised probability integral transform). For a drawn sequence t_1..t_L of
prompt P, the reference gives the distribution p_j of token j given P, t_1..t_{j-1} (one
reference call a sequence, its prompt logprobs over the whole vocabulary; one call a prefix
where it has none; what a list leaves out is one pooled outcome). In a fixed order of p_j's
tokens, token t_j maps to u_j = F_j(before t_j) + V * p_j(t_j), V uniform from a fixed-seeded
generator of the suite's own. If the engine draws each token from p_j, every u_j is uniform
on [0, 1) and independent of the ones before it (Rosenblatt), so the values of a run (tokens
2..L of each request: n = 160 * 23 = 3,680 on the seed workload), cut into BINS equal bins,
are tested against the uniform by engines.testing.distribution's total-variation test, once
with the tokens ordered most likely first and once by token id (ORDERS).

False alarm: an engine whose every conditional is within ALLOWANCE (0.03) of the
reference's fails with probability below 2 * (2^B - 2) * exp(-2 n (THRESHOLD -
ALLOWANCE)^2) = 2.2e-4 a run, by Azuma-Hoeffding over each union of bins (each u_j's law
given the past is within ALLOWANCE of uniform, whatever the past); the measured rate is far
lower (docs/architecture.md; scripts/sequence_false_alarms.py).

Power: a sampler whose values have binned TV d from the uniform passes with probability
below (2^B - 2) * exp(-2 n (d - THRESHOLD)^2) (engines.testing.distribution.miss_bound).
Sized for the acceptance rule off by the draft's probability (a draft accepted with
probability p(d), not min(1, p(d) / q(d)): planted AcceptsWithProbabilityP), whose values on
the seed workload with tiny-draft's drafts have binned TV 0.12 to 0.13 in the likelihood
order (3 seeded runs; 0.09 to 0.12 at the former 8 tokens a request and threshold 0.10,
where it was caught in one run of two): at d = 0.12 it passes with probability below 1.4e-7.
The residual left unnormalised (ResidualNotNormalised) is further past it.

Judged once a run on its seed workload (engines.testing.features.sequence_draws): no search (each
example would add its own chance), no shrinking. Needs a reference with top logprobs.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from engines.protocol import SamplingParams
from engines.testing.checks.base import Check
from engines.testing.checks.needs import REFERENCE, TEMPERATURE
from engines.testing.coverage import Coverage, Tally
from engines.testing.distribution import tv_test
from engines.testing.features.sequence_draws import FEATURE as SEQUENCE_DRAWS_FEATURE
from engines.testing.features.sequence_draws import SEQUENCE_DRAWS
from engines.testing.judging.base import Judge
from engines.testing.recorder import Trace

__all__ = ["CHECK", "BINS", "FIRST_JUDGED", "MIN_DRAWS", "ORDERS", "PIT_SEED", "THRESHOLD", "TALLY",
           "check_sequence_distribution", "pit_bins"]

BINS = 4  # equal bins of [0, 1): 2^4 - 2 unions in the bound
MIN_DRAWS = 500  # tokens a group needs judged (the seed workload has 3,680)
# Binned TV from the uniform past which the tokens are another distribution: 0.04 past the
# allowance (the false-alarm bound), 0.05 under the planted acceptance bug's (the power).
THRESHOLD = 0.07
PIT_SEED = 32  # the randomisation V's generator: fixed, so a verdict is a function of tokens
MOST_CANDIDATES = 1 << 17  # candidates asked of the reference: its whole vocabulary, up to this
# The CDF's token orders, one test each: most likely first (a sampler that over-draws likely
# or unlikely tokens moves values to one end), and by token id (one that falls to the last
# token, or to low ids, does).
ORDERS = ("likelihood", "token id")
# Judged from a request's second token on: the first is sampling_distribution's, drawn as
# without speculation by any engine (drafts follow a first token), so it would only dilute.
FIRST_JUDGED = 1

_JUDGED = "sampled sequence groups judged"
_NONE = "sequences: groups not judged, no top logprobs from the reference"
_TV = "sequences: largest binned TV of a judged group, per mille"

Key = tuple[tuple[int, ...], SamplingParams]
Conditionals = list[Mapping[int, float]]  # token j's distribution given the tokens before it
Lookup = Callable[[tuple[int, ...], Sequence[int]], Conditionals | None]


def _groups(trace: Trace) -> dict[Key, list[list[int]]]:
    """Tokens of unseeded temperature-1 requests asking nothing else, by prompt and params."""
    out: dict[Key, list[list[int]]] = defaultdict(list)
    for r in trace.workload.requests:
        p, rid = r.params, r.request_id
        plain = SamplingParams(max_tokens=p.max_tokens, temperature=1.0)
        if p != plain or p.max_tokens < 2 or rid in trace.aborted_at:
            continue
        tokens = trace.tokens(rid)
        if tokens:
            out[(r.prompt_token_ids, p)].append(tokens)
    return out


def pit_bins(sequences: Sequence[Sequence[int]], conditionals: Sequence[Conditionals],
             order: str, n_bins: int = BINS) -> list[int]:
    """The bin (0..n_bins-1) of every judged token's randomised PIT value under the
    reference's conditional at its prefix (per sequence, per token: token -> probability,
    summing to at most 1, the rest one pooled outcome ordered last), the CDF in `order`."""
    rng = random.Random(f"{PIT_SEED} {order}")
    out: list[int] = []
    for seq, conds in zip(sequences, conditionals, strict=True):
        for token, probs in list(zip(seq, conds, strict=True))[FIRST_JUDGED:]:
            before = 0.0
            mass = max(0.0, 1.0 - math.fsum(probs.values()))  # unlisted: pooled, last
            key = ((lambda kv: (-kv[1], kv[0])) if order == ORDERS[0]
                   else (lambda kv: kv[0]))
            for t, p in sorted(probs.items(), key=key):
                if t == token:
                    mass = p
                    break
                before += p
            u = before + rng.random() * mass
            out.append(min(n_bins - 1, int(u * n_bins)))
    return out


def _probs(top: Mapping[int, float] | None) -> Mapping[int, float] | None:
    return None if not top else {t: math.exp(v) for t, v in top.items()}


def _lookup(judge: Judge) -> Lookup:
    """A sequence's conditionals from the reference: one call with prompt logprobs over the
    prompt and the sequence but its last token (the last one's from the call's own top
    logprobs); one call per prefix where the reference gives no prompt logprobs."""
    reference = judge.reference
    assert reference is not None
    ask = min(judge.vocab_size or 20, MOST_CANDIDATES)
    per_prefix: dict[tuple[int, ...], Mapping[int, float] | None] = {}

    def one(context: tuple[int, ...]) -> Mapping[int, float] | None:
        if context not in per_prefix:
            alone = reference(context, SamplingParams(max_tokens=1, logprobs=ask))
            per_prefix[context] = _probs(alone.top_logprobs[0] if alone.top_logprobs else None)
        return per_prefix[context]

    def lookup(prompt: tuple[int, ...], seq: Sequence[int]) -> Conditionals | None:
        context = (*prompt, *seq[:-1])
        try:
            alone = reference(context, SamplingParams(max_tokens=1, logprobs=ask,
                                                      prompt_logprobs=ask))
            entries = alone.prompt_logprobs
        except Exception:  # a reference refusing prompt logprobs: one call per prefix
            entries = None
        if entries is not None and alone.top_logprobs:
            found = [_probs(e) for e in entries[len(prompt):]]
            found.append(_probs(alone.top_logprobs[0]))
        else:
            found = [one((*prompt, *seq[:j])) if j >= FIRST_JUDGED else {}
                     for j in range(len(seq))]
        if any(f is None for f in found):
            return None
        return [f for f in found if f is not None]

    return lookup


def check_sequence_distribution(check: Check, trace: Trace,
                                judge: Judge) -> tuple[int, int, int]:
    """(groups judged, not judged for no logprobs, the largest binned TV in per mille)."""
    __tracebackhide__ = True
    judged = none = worst = 0
    if judge.reference is None:
        return judged, none, worst
    lookup = _lookup(judge)
    for (prompt, params), sequences in sorted(_groups(trace).items(), key=lambda kv: kv[0][0]):
        if sum(len(s) for s in sequences) < MIN_DRAWS:
            continue
        found = [lookup(prompt, seq) for seq in sequences]
        conditionals = [c for c in found if c is not None]
        if len(conditionals) < len(found):
            none += 1
            continue
        verdicts = [(order, tv_test(pit_bins(sequences, conditionals, order),
                                    dict.fromkeys(range(BINS), 1.0 / BINS), n_bins=BINS,
                                    threshold=THRESHOLD)) for order in ORDERS]
        judged += 1
        worst = max(worst, *(round(1000 * v.tv) for _, v in verdicts))
        for order, verdict in verdicts:
            if not verdict.differs:
                continue
            shares = ", ".join(f"{100 * c / verdict.n:.0f}%" for c in verdict.counts)
            raise check.fail(
                f"{len(sequences)} unseeded requests of prompt {list(prompt)} at temperature "
                f"{params.temperature}, {params.max_tokens} tokens each, served together, drew "
                f"tokens that do not follow the reference engine's distribution given the "
                f"tokens before them: their {verdict.n} probability-integral-transform values "
                f"(the CDF by {order}) fall in {BINS} equal bins as {shares}, expected "
                f"{100 / BINS:.0f}% each; total variation {verdict.tv:.3f} (threshold "
                f"{THRESHOLD}; a correct engine exceeds it in either order with probability "
                f"below {len(ORDERS) * verdict.false_alarm:.1g}). A speculative sampler's "
                "residual not normalised, a wrong acceptance ratio, or a rejected draft kept, "
                "do this.")
    return judged, none, worst


def _add(coverage: Coverage, judged: tuple[int, int, int], name: str) -> None:
    coverage.counts[_JUDGED] += judged[0]
    coverage.counts[_NONE] += judged[1]
    coverage.most[_TV] = max(coverage.most[_TV], judged[2])


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    if not data.get(_NONE):
        return []
    return [f"{name}: {data[_NONE]} group(s) not judged: the reference engine returned no "
            "top logprobs, so its distribution is unknown."]


TALLY = Tally(_add, _notes)


CHECK = Check("sequence_distribution", check_sequence_distribution,
              needs=(REFERENCE, TEMPERATURE),
              draws=(SEQUENCE_DRAWS_FEATURE.use(SEQUENCE_DRAWS),),
              search=False, tally=TALLY)
