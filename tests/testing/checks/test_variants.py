"""variants: the property on hand-built traces (a config variant's tokens must be the main
engine's, each workload compared on the variant it was given to), and its planted bugs
caught: a chunk boundary off by one on a toy engine's variant, and a preempted seeded
request reseeded, which only the seeded seed workload past a small pool reaches."""

from __future__ import annotations

from typing import Any

import pytest

from engines.protocol import FinishReason
from engines.testing.checks import check_named
from engines.testing.context import SuiteContext
from engines.testing.recorder import Trace
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.helpers import GOOD, R0, R1, Steps, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import TOY, name_of, planted
from tests.planted.revisit_bugs import ReseedsOnResume, reseeds_on_resume_small_pool
from tests.planted.seed_reach import SEEDED, seed_context, split

CHECK = "variants"
check_variants = check_named(CHECK)


def test_variants() -> None:
    same = judge(variants={"one_slot": lambda w: trace(GOOD)})
    check_variants(trace(GOOD), same)
    other: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (3,), FinishReason.LENGTH)],
                    list(GOOD[2])]
    differs = judge(variants={"chunk4": lambda w: trace(other)})
    fails(check_variants, trace(GOOD), r"request 'r1' .* got \[8, 3\] on variant "
          r"'chunk4' but \[8, 9\] on the main engine: at generated position 1", differs)


def test_a_workload_is_compared_on_the_variant_it_was_given_to() -> None:
    seen: list[Workload] = []

    def run(w: Workload) -> Trace:
        seen.append(w)
        return trace(GOOD)

    t = trace(GOOD)
    check_variants(t, judge(variants={"v": run}))
    assert seen == [t.workload] and {r.request_id for r in seen[0].requests} == {
        R0.request_id, R1.request_id}


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.fixture(scope="module")
def reseeds() -> SuiteContext:
    return seed_context(ReseedsOnResume, small_pool=reseeds_on_resume_small_pool)


def test_a_preempted_seeded_request_reseeded_is_caught_on_the_variant(
        reseeds: SuiteContext) -> None:
    found, _ = split(reseeds, SEEDED)
    assert found, "no seeded workload past a pool"
    failures = [verify(reseeds, w, ReseedsOnResume.caught_by).failure for w in found]
    caught = [f for f in failures if f is not None]
    assert caught, [w.label for w in found]
    assert "on variant 'small_pool' but" in str(caught[0].error)


def test_no_other_seed_workload_reaches_the_reseed_bug(reseeds: SuiteContext) -> None:
    _, others = split(reseeds, SEEDED)
    failed = [w.label for w in others if not verify(reseeds, w, ReseedsOnResume.caught_by).ok]
    assert not failed, failed
