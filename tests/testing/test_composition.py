"""Features drawn together (engines.testing.composition, issue 51): the draws put stop strings
and late aborts on n > 1 families, shrink to families without them, and the seed workloads
hold them, which a correct engine passes; each planted bug of tests/planted/composition_bugs.py
passes a family alone and a stop string alone (its check's tests show the composed seed
workloads catch it: tests/testing/checks/test_stop_strings.py, test_kv_accounting.py and
tests/testing/test_crash_reports.py); so do the bugs of the remaining classes, each
feature without its partner (their checks' tests: test_stop_strings.py, test_children.py,
test_constraints.py, test_reference_parity.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, find
from hypothesis import settings as Settings

from engines.protocol import Request, SamplingParams
from engines.slot.continuous import ContinuousBatchEngine
from engines.testing.context import SuiteContext, build_context
from engines.testing.coverage import Coverage
from engines.testing.features.children import family_workloads
from engines.testing.search import drawing_of
from engines.testing.strategies import workloads
from engines.testing.verdict import verify
from engines.testing.workload import Abort, Workload
from tests.planted.catalog import name_of
from tests.planted.composition_bugs import (
    COMPOSITION_PLANTED,
    SpeculationSkipsPenalties,
    lora_rows_unconstrained_with_loras,
)
from tests.planted.harness import check_of, context_of
from tests.planted.lifecycle_bugs import AbortDuringHoldBackEndsStop
from tests.planted.tenants import lora_context


@pytest.fixture(scope="module")
def correct() -> SuiteContext:
    make = ContinuousBatchEngine
    return build_context(make, name=make.__name__, spec=f"{make.__module__}:{make.__name__}")


def _family(stop: tuple[str, ...] = ()) -> Request:
    return Request((3, 1, 4), SamplingParams(max_tokens=8, n=3, temperature=1.0, seed=7,
                                             logprobs=1, stop=stop), request_id="r0")


def _find(ctx: SuiteContext, check: str, wanted: Any) -> Workload:
    drawing = drawing_of(ctx, check)
    # One request in the mix: the families come after it, and the draws stay cheap.
    return find(workloads(drawing, alone=ctx.oracle.tokens, max_requests=1), wanted,
                settings=Settings(max_examples=300, database=None, derandomize=True,
                                  suppress_health_check=list(HealthCheck)))


def test_the_draws_compose_families_with_stop_strings_and_late_aborts(
        correct: SuiteContext) -> None:
    found = _find(correct, "stop_strings", lambda w: any(
        r.params.n > 1 and r.params.stop and r.request_id in {a.request_id for a in w.aborts}
        for r in w.requests))
    family = next(r for r in found.requests if r.params.n > 1 and r.params.stop)
    assert family.params.temperature == 0 or family.params.seed is not None  # from its output


def test_composition_shrinks_off(correct: SuiteContext) -> None:
    """The smallest workload with a family holds a plain one: no stop string, no abort."""
    found = _find(correct, "stop_strings", lambda w: any(r.params.n > 1 for r in w.requests))
    assert not any(r.params.stop for r in found.requests if r.params.n > 1), found
    assert not found.aborts, found


def test_the_seed_workloads_hold_the_compositions(correct: SuiteContext) -> None:
    drawing = drawing_of(correct, "stop_strings")
    made = family_workloads(drawing, lambda i, p, m, **kw: Request(
        tuple(p), SamplingParams(max_tokens=m, **kw), request_id=f"r{i}"),
        correct.oracle.tokens)
    labels = [w.label for w in made]
    assert labels == ["a family whose stop string one child completes",
                      "families aborted after a child finished"], labels
    stopped = made[0].requests[0]
    assert stopped.params.n == 3 and stopped.params.stop
    summary = Coverage()
    for w in made:  # a correct engine passes them, and the summary counts what they compose
        for check in ("stop_strings", "children"):
            outcome = verify(correct, w, check)
            assert outcome.ok and outcome.trace is not None, (w.label, check)
            trace = outcome.trace
        summary.record(trace, correct.limits)
    assert summary.counts["families with stop strings"] == 1, summary.counts
    assert summary.counts["families aborted after a child finished"] == 2, summary.counts


@pytest.mark.parametrize("bug", COMPOSITION_PLANTED, ids=lambda b: b.__name__)
def test_the_bug_needs_features_together(bug: Any) -> None:
    """A family alone, and a lone request with a stop string, pass: only composed they fail."""
    ctx = context_of(bug)
    lone = Request((1, 2, 3), SamplingParams(max_tokens=6, stop=("e",)), request_id="r1")
    for w in (Workload((_family(),), (0,)), Workload((lone,), (0,))):
        assert verify(ctx, w, check_of(bug)).ok, w


def _alone_cases() -> list[tuple[Any, str, list[Workload]]]:
    """Issue 51's remaining compositions, each feature without the other: an abort of a
    request without stop strings, and stop strings not aborted; allowed ids on a base row,
    and an adapter's row unconstrained; a speculated row without penalties."""
    held = (Request((2, 9, 4), SamplingParams(max_tokens=8), request_id="r0"),
            Request((7, 3), SamplingParams(max_tokens=8, stop=("zzq",)), request_id="r1"))
    plain = tuple(Request(p, SamplingParams(max_tokens=6), request_id=f"r{i}")
                  for i, p in enumerate(((3, 3, 9, 3, 3, 9), (5, 1, 5, 1))))
    return [
        (AbortDuringHoldBackEndsStop, "stop_strings",
         [Workload(held[:1], (0,), (Abort(2, "r0"),)), Workload(held[1:], (0,))]),
        (SpeculationSkipsPenalties, "reference_parity", [Workload(plain, (0, 0))]),
    ]


@pytest.mark.parametrize("case", _alone_cases(), ids=lambda c: name_of(c[0]))
def test_each_feature_alone_passes_the_composed_bugs(case: tuple[Any, str, list[Workload]]
                                                      ) -> None:
    bug, check, alone = case
    ctx = context_of(bug)
    for w in alone:
        assert verify(ctx, w, check).ok, w


def test_lora_rows_unconstrained_needs_an_adapter_and_a_constraint() -> None:
    ctx = lora_context(lora_rows_unconstrained_with_loras)
    adapter = drawing_of(ctx, "constraints").loras[0]
    base = Request((3, 1, 4), SamplingParams(max_tokens=6, allowed_token_ids=(5, 9, 77)),
                   request_id="r0")
    tenant = Request((3, 1, 4), SamplingParams(max_tokens=6), request_id="r1", lora=adapter)
    for w in (Workload((base,), (0,)), Workload((tenant,), (0,))):
        assert verify(ctx, w, "constraints").ok, w
