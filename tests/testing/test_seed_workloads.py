"""The two seed workloads of engines.testing.seed_workloads, each with a one-line bug planted in the
paged engine that only it reaches (tests/planted/revisit_bugs.py): the same prompts again
after they finished (a full prefix hit that hangs the engine: `liveness` reports it, the test
does not hang), and seeded requests past a small pool (a resumed request reseeded: the
variant's tokens differ from the main engine's). The unmutated engine passes both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.paged.variants import small_pool
from engines.protocol import Engine
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.seed_workloads import seed_workloads
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted.revisit_bugs import (
    FullHitComputesNothing,
    ReseedsOnResume,
    reseeds_on_resume_small_pool,
)

AGAIN = "the same prompts again after they finished"
SEEDED = "seeded sampling"


def _ctx(factory: Callable[[], Engine], **variants: Callable[[], Engine]) -> SuiteContext:
    return build_context(factory, name=getattr(factory, "__name__", "engine"),
                         options=SuiteOptions(variants=variants))


def _split(ctx: SuiteContext, label: str) -> tuple[list[Workload], list[Workload]]:
    """(the seed workloads whose label holds `label`, the others)."""
    seeds = seed_workloads(ctx.limits, alone=ctx.oracle.tokens)
    return ([w for w in seeds if label in w.label], [w for w in seeds if label not in w.label])


@pytest.fixture(scope="module")
def full_hit() -> SuiteContext:
    return _ctx(FullHitComputesNothing)


def test_a_full_prefix_hit_that_hangs_is_reported_by_liveness(full_hit: SuiteContext) -> None:
    (again,), _ = _split(full_hit, AGAIN)
    block = full_hit.limits.block
    assert [len(r.prompt_token_ids) for r in again.requests] == [block - 1, block, block + 1,
                                                                  2 * block] * 2
    outcome = verify(full_hit, again, FullHitComputesNothing.caught_by)
    assert outcome.failure is not None
    text = str(outcome.failure.error)
    assert "had not finished after" in text and "(the bound for this workload)" in text, text


def test_no_other_seed_workload_reaches_the_full_hit_bug(full_hit: SuiteContext) -> None:
    _, others = _split(full_hit, AGAIN)
    failed = [w.label for w in others
              if not verify(full_hit, w, FullHitComputesNothing.caught_by).ok]
    assert not failed, failed


@pytest.fixture(scope="module")
def reseeds() -> SuiteContext:
    return _ctx(ReseedsOnResume, small_pool=reseeds_on_resume_small_pool)


def test_a_preempted_seeded_request_reseeded_is_caught_on_the_variant(
        reseeds: SuiteContext) -> None:
    found, _ = _split(reseeds, SEEDED)
    assert found, "no seeded workload past a pool"
    failures = [verify(reseeds, w, ReseedsOnResume.caught_by).failure for w in found]
    caught = [f for f in failures if f is not None]
    assert caught, [w.label for w in found]
    assert "on variant 'small_pool' but" in str(caught[0].error)


def test_no_other_seed_workload_reaches_the_reseed_bug(reseeds: SuiteContext) -> None:
    _, others = _split(reseeds, SEEDED)
    failed = [w.label for w in others if not verify(reseeds, w, ReseedsOnResume.caught_by).ok]
    assert not failed, failed


@pytest.mark.parametrize("label", [AGAIN, SEEDED])
def test_the_correct_paged_engine_passes_them(label: str) -> None:
    ctx = _ctx(PagedEngine, small_pool=small_pool)
    found, _ = _split(ctx, label)
    assert found
    checks: list[Any] = [FullHitComputesNothing.caught_by, ReseedsOnResume.caught_by]
    for w in found:
        for check in checks:
            outcome = verify(ctx, w, check)
            assert outcome.ok, (w.label, check, outcome.failure)
