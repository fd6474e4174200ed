"""The two seed workloads of engines.testing.seed_workloads that each reach a one-line bug
planted in the paged engine (tests/planted/revisit_bugs.py; the tests of `liveness` and
`variants` show each reached and caught, and no other seed workload reaching it): the
unmutated engine passes both."""

from __future__ import annotations

from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.paged.variants import small_pool
from engines.testing.verdict import verify
from tests.planted.revisit_bugs import FullHitComputesNothing, ReseedsOnResume
from tests.planted.seed_reach import AGAIN, SEEDED, seed_context, split


@pytest.mark.parametrize("label", [AGAIN, SEEDED])
def test_the_correct_paged_engine_passes_them(label: str) -> None:
    ctx = seed_context(PagedEngine, small_pool=small_pool)
    found, _ = split(ctx, label)
    assert found
    checks: list[Any] = [FullHitComputesNothing.caught_by, ReseedsOnResume.caught_by]
    for w in found:
        for check in checks:
            outcome = verify(ctx, w, check)
            assert outcome.ok, (w.label, check, outcome.failure)
