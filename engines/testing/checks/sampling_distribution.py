"""sampling_distribution: unseeded draws follow the reference engine's distribution. Groups of
one-token unseeded requests of one prompt at one temperature (the seed workload of
engines.testing.features.unseeded_draws: two prompts, temperatures 1 and 0.5, interleaved in
one burst) are tested against the reference's first-token probabilities at that prompt,
re-tempered from its raw top logprobs, by engines.testing.distribution's total-variation test:
the draws fail where their binned TV from the reference exceeds 0.25, which a correct engine
(within 0.03 of the reference) does with probability below 1.2e-5 per group, by proof; the
measured rate is in docs/architecture.md.

What it catches that no other check can where seeds are not reproducible (and seeded checks
miss where only unseeded requests go wrong): a temperature ignored (greedy draws) or applied
twice, draws from another row's distribution. A reference is required (the distribution is
its), and a group is judged only where the reference lists the whole distribution (at
temperature 1: any top candidates, the rest pooled); the summary says which were not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from engines.protocol import SamplingParams
from engines.testing.checks.base import Check
from engines.testing.checks.needs import REFERENCE, TEMPERATURE
from engines.testing.coverage import Coverage, Tally
from engines.testing.distribution import tempered, tv_test
from engines.testing.features.unseeded_draws import DRAWS
from engines.testing.features.unseeded_draws import FEATURE as UNSEEDED_DRAWS_FEATURE
from engines.testing.judging.base import Judge
from engines.testing.recorder import Trace

__all__ = ["CHECK", "MIN_GROUP", "TALLY", "check_sampling_distribution"]

MIN_GROUP = 100  # draws a group needs to be judged (the seed workload has 160)
# Candidates asked of the reference: its whole vocabulary up to this (a temperature other
# than 1 needs all of them); past it, temperature 1 only, the rest of the mass pooled.
MOST_CANDIDATES = 1 << 17

_JUDGED = "unseeded draw groups judged"
_PARTIAL = "draws: groups not judged, the reference listing part of its distribution"
_NONE = "draws: groups not judged, no top logprobs from the reference"
_TV = "draws: largest binned TV of a judged group, per mille"


def _groups(trace: Trace) -> dict[tuple[tuple[int, ...], float], list[int]]:
    """First tokens of finished one-token unseeded requests, by (prompt, temperature)."""
    out: dict[tuple[tuple[int, ...], float], list[int]] = defaultdict(list)
    for r in trace.workload.requests:
        p, rid = r.params, r.request_id
        plain = SamplingParams(max_tokens=1, temperature=p.temperature, logprobs=p.logprobs,
                               prompt_logprobs=p.prompt_logprobs)
        if p.temperature <= 0 or p != plain or rid in trace.aborted_at:
            continue
        tokens = trace.tokens(rid)
        if tokens:
            out[(r.prompt_token_ids, p.temperature)].append(tokens[0])
    return out


def check_sampling_distribution(check: Check, trace: Trace,
                                judge: Judge) -> tuple[int, int, int, int]:
    """(groups judged, not judged for a partial list, not judged for no logprobs, the largest
    binned TV judged in per mille)."""
    __tracebackhide__ = True
    reference = judge.reference
    judged = partial = none = worst = 0
    if reference is None:
        return judged, partial, none, worst
    ask = min(judge.vocab_size or 20, MOST_CANDIDATES)
    for (prompt, temperature), draws in sorted(_groups(trace).items()):
        if len(draws) < MIN_GROUP:
            continue
        alone = reference(prompt, SamplingParams(max_tokens=1, logprobs=ask))
        if not alone.top_logprobs:
            none += 1
            continue
        probs = tempered(alone.top_logprobs[0], temperature)
        if probs is None:
            partial += 1
            continue
        verdict = tv_test(draws, probs)
        judged += 1
        worst = max(worst, round(1000 * verdict.tv))
        if verdict.differs:
            raise check.fail(
                f"{len(draws)} unseeded one-token requests of prompt {list(prompt)} at "
                f"temperature {temperature}, served together, drew first tokens that do not "
                f"follow the reference engine's distribution at that prompt: "
                f"{verdict.describe()}. A temperature ignored or applied twice, or draws from "
                "another request's row, do this.")
    return judged, partial, none, worst


def _add(coverage: Coverage, judged: tuple[int, int, int, int], name: str) -> None:
    for key, n in zip((_JUDGED, _PARTIAL, _NONE), judged[:3], strict=True):
        coverage.counts[key] += n
    coverage.most[_TV] = max(coverage.most[_TV], judged[3])


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    out = []
    if data.get(_PARTIAL):
        out.append(f"{name}: {data[_PARTIAL]} group(s) at a temperature other than 1 not "
                   "judged: the reference engine listed only part of its first-token "
                   "distribution (top logprobs short of its vocabulary), and the unlisted "
                   "tokens' share cannot be re-tempered.")
    if data.get(_NONE):
        out.append(f"{name}: {data[_NONE]} group(s) not judged: the reference engine returned "
                   "no top logprobs, so its distribution is unknown.")
    return out


TALLY = Tally(_add, _notes)


CHECK = Check("sampling_distribution", check_sampling_distribution,
              needs=(REFERENCE, TEMPERATURE), draws=(UNSEEDED_DRAWS_FEATURE.use(DRAWS),),
              search=False,
              tally=TALLY)
