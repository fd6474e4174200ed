"""Sampling without seeds: the greedy_filters and sampling_distribution checks, and the
distribution test they share (engines.testing.distribution): its bound, its measured
false-alarm rate on exact draws, its bite on the planted sampler bugs, and no false alarm on
our engines."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest

from engines.factories import load_factory
from engines.protocol import SamplingParams
from engines.sequential import SequentialEngine
from engines.testing import distribution as D
from engines.testing.checks import check_named
from engines.testing.checks.sampling_distribution import check_sampling_distribution
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.features.unseeded_draws import DRAWS, distribution_workload
from engines.testing.processing import GREEDY_FILTERS, greedy_filter
from engines.testing.recorder import run_workload
from engines.testing.search import drawing_of, search
from engines.testing.seed_workloads import seed_workloads
from engines.testing.workload import Workload
from tests.planted.harness import hunt, pinned
from tests.planted.unseeded_bugs import (
    DoubleTemperatureUnseeded,
    GreedyWhenUnseeded,
    WrongRowUnseeded,
)

DISTRIBUTION_BUGS = [GreedyWhenUnseeded, DoubleTemperatureUnseeded, WrongRowUnseeded]
OURS = ["engines.sequential:SequentialEngine", "engines.slot.continuous:ContinuousBatchEngine",
        "engines.paged:PagedEngine"]


def _flat(n: int, seed: int) -> dict[int, float]:
    rng = random.Random(seed)
    weights = [math.exp(rng.gauss(0.0, 1.5)) for _ in range(n)]
    total = sum(weights)
    return {t: w / total for t, w in enumerate(weights)}


def test_bound_and_sample_size_agree() -> None:
    alpha = D.false_alarm_bound(DRAWS)
    assert alpha < 2e-5  # two groups a run: below 4e-5 a run, by proof
    assert D.false_alarm_bound(D.samples_needed(1e-6)) <= 1e-6
    assert D.false_alarm_bound(D.samples_needed(1e-6) - 1) > 1e-6
    assert D.miss_bound(DRAWS, 0.6) < 1e-8 and D.miss_bound(DRAWS, 0.2) == 1.0


def test_binning_covers_the_distribution() -> None:
    q = _flat(300, 1)
    bins = D.binning(q)
    assert len(bins.mass) == D.BINS and math.isclose(sum(bins.mass), 1.0)
    assert all(m >= 1 / D.BINS - 1e-12 for m in bins.mass[:-1])
    # A partial list: the unlisted mass joins the last bin, unlisted ids counted there.
    top = dict(sorted(q.items(), key=lambda kv: -kv[1])[:40])
    partial = D.binning(top)
    assert math.isclose(sum(partial.mass), 1.0) and partial.index(10_000) == len(partial.bins)


def test_tempered() -> None:
    logp = {t: math.log(p) for t, p in _flat(50, 2).items()}
    same = D.tempered(logp, 1.0)
    assert same is not None and math.isclose(sum(same.values()), 1.0)
    sharp = D.tempered(logp, 0.5)
    assert sharp is not None and math.isclose(sum(sharp.values()), 1.0)
    top = max(logp, key=logp.__getitem__)
    assert sharp[top] > same[top]
    five = dict(sorted(logp.items(), key=lambda kv: -kv[1])[:5])
    assert D.tempered(five, 0.5) is None and D.tempered(five, 1.0) is not None


def test_measured_false_alarm_rate_of_exact_draws() -> None:
    """2000 runs of the test on exact draws (160 each, fresh seeds) from flat and peaked
    distributions: none fails, and the largest TV stays well under the threshold."""
    worst, alarms = 0.0, 0
    for run in range(2000):
        q = _flat(400 if run % 2 else 12, run)
        rng = random.Random(10_000 + run)
        ids, weights = zip(*q.items(), strict=True)
        verdict = D.tv_test(rng.choices(ids, weights, k=DRAWS), q)
        alarms += verdict.differs
        worst = max(worst, verdict.tv)
    assert alarms == 0 and worst < 0.2, (alarms, worst)


def test_a_distribution_apart_is_caught() -> None:
    q, other = _flat(400, 3), _flat(400, 4)
    rng = random.Random(5)
    ids, weights = zip(*other.items(), strict=True)
    assert D.tv_test(rng.choices(ids, weights, k=DRAWS), q).differs
    top = max(q, key=q.__getitem__)
    verdict = D.tv_test([top] * DRAWS, q)  # a temperature ignored: all greedy
    assert verdict.differs and "total variation" in verdict.describe()


def test_greedy_filter_recognised() -> None:
    for name, value in GREEDY_FILTERS.items():
        sampled = dataclasses.replace(SamplingParams(temperature=0.7), **{name: value})  # type: ignore[arg-type]
        assert greedy_filter(sampled) == name
        assert greedy_filter(dataclasses.replace(sampled, temperature=0.0)) is None
        assert greedy_filter(dataclasses.replace(sampled, presence_penalty=1.0)) is None
    assert greedy_filter(SamplingParams(temperature=1.0, top_k=2)) is None


@pytest.mark.parametrize("bug", DISTRIBUTION_BUGS, ids=lambda b: b.__name__)
def test_distribution_check_catches(bug: Any) -> None:
    caught = hunt(bug)
    assert caught is not None and caught.prop == bug.caught_by, caught
    assert "do not follow the reference engine's distribution" in str(caught)


def test_the_planted_distribution_bugs_pass_the_seeds_check() -> None:
    """Their seeded draws are right: only unseeded draws show them."""
    for bug in (GreedyWhenUnseeded, DoubleTemperatureUnseeded):
        assert hunt(bug, check="seeds", settings=pinned(10)) is None


def _ours(spec: str) -> SuiteContext:
    return build_context(load_factory(spec), name=spec, spec=spec,
                         options=SuiteOptions(reference=SequentialEngine,
                                              reference_spec=OURS[0]))


@pytest.mark.parametrize("spec", OURS)
def test_our_engines_pass_both(spec: str) -> None:
    ctx = _ours(spec)
    for check in ("greedy_filters", "sampling_distribution"):
        coverage = search(ctx, check, settings=pinned(8, shrink=False))
        judged = [k for k in coverage.counts if k.endswith("judged") and coverage.counts[k]]
        assert judged, (check, coverage.counts)
    assert coverage.counts["unseeded draw groups judged"] == 2


def test_distribution_check_runs_its_seed_workloads_only() -> None:
    """A statistical check: judged on its seed workload, no Hypothesis search (each example
    would add to its false-alarm rate, and a replay of a statistical failure is no replay)."""
    ctx = _ours(OURS[1])
    limits = drawing_of(ctx, "sampling_distribution")
    seeds = seed_workloads(limits, alone=ctx.oracle.tokens)
    (draws,) = [w for w in seeds if w.label == "unseeded draws of two prompts"]
    assert len(draws.requests) == 2 * DRAWS
    coverage = search(ctx, "sampling_distribution", settings=pinned(50, shrink=False))
    assert coverage.counts["workloads"] == len(seeds)


def test_draws_judged_only_with_enough_of_them() -> None:
    ctx = _ours(OURS[0])
    full = distribution_workload(drawing_of(ctx, "sampling_distribution"))
    few = Workload(full.requests[:40], full.arrivals[:40])
    trace = run_workload(SequentialEngine(), few)
    assert check_sampling_distribution(check_named("sampling_distribution"), trace,
                                       ctx.judge)[:3] == (0, 0, 0)


class _Seedless(SequentialEngine):
    """Declares seeds broken (as mistral.rs does): the checks of unseeded sampling still
    judge its sampling path."""

    CAPABILITIES = dataclasses.replace(SequentialEngine.CAPABILITIES,
                                       expected_failed_checks={"seeds": "no per-request seed"})


def test_an_engine_without_seeds_is_judged_on_unseeded_sampling() -> None:
    ctx = build_context(_Seedless, name="seedless",
                        options=SuiteOptions(reference=SequentialEngine))
    assert not ctx.limits.sampling  # every other check draws greedy requests only
    for check, key in (("greedy_filters", "greedy-filter requests judged"),
                       ("sampling_distribution", "unseeded draw groups judged")):
        coverage = search(ctx, check, settings=pinned(4, shrink=False))
        assert coverage.counts[key] > 0, (check, coverage.counts)
