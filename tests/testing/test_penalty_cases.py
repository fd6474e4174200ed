"""engines.testing.penalty_cases: the penalties' hard cases are among every check's seed
workloads, catch the common-mode penalty bugs against the sequential reference that shares
them (routed to its independent twin, the default), pass the correct paged engine, and shrink
to valid requests."""

from __future__ import annotations

from typing import Any

import pytest

from engines.paged import PagedEngine
from engines.protocol import Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.testing.context import SuiteOptions, build_context
from engines.testing.penalty_cases import LABEL
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from engines.testing.shrink import shrink_workload
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted.common_mode_bugs import (
    MinTokensLetsLastStopThrough,
    PresenceSignFlipped,
    RepetitionOverOutputOnly,
)
from tests.planted.expect import caught_by_the_hard_case
from tests.planted.harness import fresh_engines

PENALTY_BUGS = [RepetitionOverOutputOnly, PresenceSignFlipped, MinTokensLetsLastStopThrough]


@pytest.mark.parametrize("bug", PENALTY_BUGS, ids=lambda b: b.__name__)
def test_the_penalty_bugs_are_caught_by_the_seed_workload(bug: Any) -> None:
    ctx = build_context(bug, name=bug.__name__, spec=f"{bug.__module__}:{bug.__name__}",
                        options=SuiteOptions(reference=bug.shared_reference))
    fresh_engines(ctx)
    caught_by_the_hard_case(bug, LABEL, ctx)


def test_the_correct_paged_engine_passes_it() -> None:
    ctx = build_context(PagedEngine, name="PagedEngine",
                        options=SuiteOptions(reference=SequentialEngine))
    for check in ("parity", "reference_parity"):
        found = [w for w in seed_workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)
                 if w.label == LABEL]
        assert len(found) == 1 and len(found[0].requests) == 6, found
        outcome = verify(ctx, found[0], check)
        assert outcome.ok, outcome.failure


def test_shrinking_a_budget_keeps_min_tokens_within_it() -> None:
    held = Request((1, 2), SamplingParams(max_tokens=8, min_tokens=4), request_id="r0")
    seen: list[SamplingParams] = []

    def fails(w: Workload) -> bool:
        seen.append(w.requests[0].params)
        return True

    shrunk = shrink_workload(Workload((held,), (0,)), fails)
    assert all(p.min_tokens <= p.max_tokens for p in seen), seen
    assert shrunk.requests[0].params.max_tokens == 1
