"""Whether draws come from a reference distribution: a total-variation test with a stated,
proven false-alarm bound, for checks of sampling that no seed makes reproducible (unseeded
draws; sampled speculative decoding, whose tokens must follow the target model's distribution).

The test. A reference distribution q over token ids (e.g. a reference engine's first-token
probabilities at temperature T) is cut into at most `n_bins` bins, from q alone and before any
draw: the most likely tokens first, a bin closed once it holds 1/n_bins of q's mass, the last
bin everything else (including every token q does not list). n draws fill the bins with an
empirical distribution p^; the test fails when

    TV(p^, q) = 1/2 * sum over bins |p^_b - q_b|  >  threshold.

False alarm. A correct engine draws from some p with binned TV(p, q) <= allowance (the
allowance absorbs floating-point differences between engines: reduced-precision logits move
probabilities by far less). TV(p^, q) > threshold then needs TV(p^, p) > threshold -
allowance = m. TV(p^, p) is the largest p^(S) - p(S) over the 2^B - 2 proper non-empty
unions S of bins, and each p^(S) is a mean of n independent indicators, so by Hoeffding and a
union bound (the Bretagnolle-Huber-Carol inequality):

    P(false alarm) <= (2^B - 2) * exp(-2 n m^2)                        (false_alarm_bound)

Power. An engine whose binned TV from q is d > threshold passes with probability at most
(2^B - 2) * exp(-2 n (d - threshold)^2) (miss_bound): an engine that ignores the temperature
(all draws one token) or samples another request's row is far past it.

The bound holds for any q, n and binning fixed before the draws; it is loose (Hoeffding and a
union over subsets), so the measured false-alarm rate of a correct engine is far below it
(docs/architecture.md states both). Pure Python: no torch, no numpy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ALLOWANCE", "BINS", "THRESHOLD", "Binning", "Verdict", "binning",
           "false_alarm_bound", "miss_bound", "samples_needed", "tempered", "tv_test"]

BINS = 6  # bins of the reference's mass: (2^6 - 2) subsets in the union bound
THRESHOLD = 0.25  # binned TV past which the draws are called another distribution
ALLOWANCE = 0.03  # binned TV a correct engine may have from the reference (fp differences)
# Probability mass a reference's listed candidates may leave out and still be taken as the
# whole distribution (needed to re-temper it: the unlisted tokens' logits are unknown).
COVERED = 1e-6


def false_alarm_bound(n: int, n_bins: int = BINS, threshold: float = THRESHOLD,
                      allowance: float = ALLOWANCE) -> float:
    """Upper bound on the chance that n draws of a correct engine (binned TV from the
    reference at most `allowance`) fail the test."""
    margin = threshold - allowance
    if margin <= 0 or n <= 0:
        return 1.0
    return min(1.0, (2**n_bins - 2) * math.exp(-2.0 * n * margin * margin))


def miss_bound(n: int, tv: float, n_bins: int = BINS, threshold: float = THRESHOLD) -> float:
    """Upper bound on the chance that n draws from a distribution whose binned TV from the
    reference is `tv` pass the test."""
    margin = tv - threshold
    if margin <= 0 or n <= 0:
        return 1.0
    return min(1.0, (2**n_bins - 2) * math.exp(-2.0 * n * margin * margin))


def samples_needed(alpha: float, n_bins: int = BINS, threshold: float = THRESHOLD,
                   allowance: float = ALLOWANCE) -> int:
    """The fewest draws whose false-alarm bound is at most alpha."""
    margin = threshold - allowance
    if margin <= 0:
        raise ValueError(f"threshold {threshold} must exceed the allowance {allowance}")
    return max(1, math.ceil(math.log((2**n_bins - 2) / alpha) / (2.0 * margin * margin)))


def tempered(logprobs: Mapping[int, float], temperature: float) -> dict[int, float] | None:
    """Probabilities at `temperature` from logprobs at temperature 1 (raw top candidates):
    softmax(logprob / T) over them. At T = 1 a partial list is fine (what it leaves out stays
    out, as one unlisted mass); at any other T the list must be the whole distribution
    (within COVERED), else None: the unlisted tokens' share cannot be known."""
    if temperature <= 0:
        raise ValueError(f"temperature {temperature}: sampling needs one above 0")
    covered = math.fsum(math.exp(v) for v in logprobs.values())
    if temperature == 1.0:
        return {t: math.exp(v) for t, v in logprobs.items()}
    if covered < 1.0 - COVERED or not logprobs:
        return None
    top = max(logprobs.values())
    weights = {t: math.exp((v - top) / temperature) for t, v in logprobs.items()}
    total = math.fsum(weights.values())
    return {t: w / total for t, w in weights.items()}


@dataclass(frozen=True, slots=True)
class Binning:
    """Bins of token ids with the reference's mass in each; the last bin, `rest`, holds
    every token no other bin lists."""

    bins: tuple[frozenset[int], ...]  # all but the last
    mass: tuple[float, ...]  # one per bin, the rest's last

    def index(self, token: int) -> int:
        for i, b in enumerate(self.bins):
            if token in b:
                return i
        return len(self.bins)

    def counts(self, draws: Iterable[int]) -> list[int]:
        out = [0] * len(self.mass)
        for token, k in Counter(draws).items():
            out[self.index(token)] += k
        return out

    def describe(self, i: int, most: int = 4) -> str:
        if i == len(self.bins):
            return "every other token"
        ids = sorted(self.bins[i])
        shown = ", ".join(str(t) for t in ids[:most])
        return f"tokens {{{shown}{', ...' if len(ids) > most else ''}}}"


def binning(probs: Mapping[int, float], n_bins: int = BINS) -> Binning:
    """Bins of about 1/n_bins of the reference's mass each, the most likely tokens first (a
    token heavier than that alone in its bin); the last bin the rest, unlisted tokens too."""
    target = 1.0 / n_bins
    bins: list[frozenset[int]] = []
    mass: list[float] = []
    current: list[int] = []
    held = 0.0
    for token, p in sorted(probs.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(bins) == n_bins - 1:
            break
        current.append(token)
        held += p
        if held >= target:
            bins.append(frozenset(current))
            mass.append(held)
            current, held = [], 0.0
    if current and len(bins) < n_bins - 1:
        bins.append(frozenset(current))
        mass.append(held)
    mass.append(max(0.0, 1.0 - math.fsum(mass)))
    return Binning(tuple(bins), tuple(mass))


@dataclass(frozen=True, slots=True)
class Verdict:
    """One test: the draws' binned TV from the reference, against the threshold."""

    tv: float
    n: int
    counts: tuple[int, ...]
    binning: Binning
    threshold: float = THRESHOLD
    allowance: float = ALLOWANCE

    @property
    def differs(self) -> bool:
        return self.tv > self.threshold

    @property
    def false_alarm(self) -> float:
        return false_alarm_bound(self.n, len(self.binning.mass), self.threshold, self.allowance)

    def describe(self) -> str:
        """The bins' observed and expected shares, worst first, and the verdict's figures."""
        rows = sorted(range(len(self.counts)), key=lambda i: -abs(
            self.counts[i] / self.n - self.binning.mass[i]))
        parts = [f"{self.binning.describe(i)}: {self.counts[i]}/{self.n} drawn "
                 f"({100 * self.counts[i] / self.n:.0f}%), expected "
                 f"{100 * self.binning.mass[i]:.0f}%" for i in rows[:3]]
        return (f"total variation {self.tv:.3f} from the reference's distribution over "
                f"{len(self.counts)} bins (threshold {self.threshold}; a correct engine within "
                f"{self.allowance} of it exceeds that with probability below "
                f"{self.false_alarm:.1g}): " + "; ".join(parts))


def tv_test(draws: Iterable[int], reference: Mapping[int, float], *, n_bins: int = BINS,
            threshold: float = THRESHOLD, allowance: float = ALLOWANCE) -> Verdict:
    """The draws (token ids) against the reference's probabilities (token id -> p, summing
    to at most 1: what it leaves out is one unlisted mass)."""
    drawn = list(draws)
    if not drawn:
        raise ValueError("no draws to test")
    bins = binning(reference, n_bins)
    counts = bins.counts(drawn)
    n = len(drawn)
    tv = 0.5 * math.fsum(abs(c / n - q) for c, q in zip(counts, bins.mass, strict=True))
    return Verdict(tv, n, tuple(counts), bins, threshold, allowance)
