"""Pieces of the suite on their own: the oracle's divergence rule, crash and hang reports."""

from __future__ import annotations

import pytest

from engines.protocol import StepOutput
from engines.testing.context import SuiteOptions, build_context
from engines.testing.oracle import first_divergence
from engines.testing.search import search
from engines.testing.stateful import engine_machine
from examples.toy_engine import ToyEngine
from tests.planted.harness import hunt, pinned


def test_exact_parity_reports_position_tokens_and_margin() -> None:
    d = first_divergence([5, 6, 7], [5, 6, 8], observed_top=[{5: 0}, {6: 0}, {7: -1.0, 8: -1.2}],
                         expected_top=[{5: 0}, {6: 0}, {8: -1.0, 7: -1.1}])
    assert d is not None and (d.position, d.observed, d.expected) == (2, 7, 8)
    assert d.margin == pytest.approx(0.2) and not d.accepted
    assert "alone gave 8, batched gave 7 (logprob margin 0.2)" in d.describe()


def test_tie_aware_parity_forgives_only_near_ties() -> None:
    def judged(observed_top: list[dict[int, float]], expected_top: list[dict[int, float]]) -> bool:
        d = first_divergence([7, 1], [8, 2], observed_top=observed_top, mode="tie-aware",
                             expected_top=expected_top, tolerance=1e-3)
        assert d is not None and d.position == 0
        return d.accepted

    assert judged([{7: -1.0, 8: -1.0005}], [{8: -1.0, 7: -1.0001}])  # a near-tie both ways
    assert not judged([{7: -1.0, 8: -3.0}], [{8: -1.0, 7: -1.0001}])  # far apart on one side
    assert not judged([{7: -1.0}], [{8: -1.0}])  # not among each other's top candidates
    short = first_divergence([1, 2], [1, 2, 3])
    assert short is not None and short.observed is None  # the batched run ended early


class RaisesWhenCrowded(ToyEngine):
    def step(self) -> list[StepOutput]:
        if self.occupied() >= 2:
            raise RuntimeError("row index out of range")
        return super().step()


class LoopsWhenCrowded(ToyEngine):
    def step(self) -> list[StepOutput]:
        while self.occupied() >= 2:
            pass
        return super().step()


def test_engine_raising_in_step_is_reported_with_the_workload() -> None:
    RaisesWhenCrowded.caught_by = "crash"  # type: ignore[attr-defined]
    RaisesWhenCrowded.check = "liveness"  # type: ignore[attr-defined]
    caught = hunt(RaisesWhenCrowded)
    assert caught is not None and caught.prop == "crash"
    text = str(caught)
    assert text.startswith("crash: the engine raised RuntimeError in step() at step 1: row "
                           "index out of range"), text
    assert "Counterexample (2 request(s)" in text
    assert "main('crash', workload, make_engine)" in text


def test_hanging_step_fails_instead_of_hanging() -> None:
    ctx = build_context(LoopsWhenCrowded, name="LoopsWhenCrowded",
                        options=SuiteOptions(step_timeout=0.2))
    # No seeds: they would be shrunk greedily, each try waiting out the timeout.
    with pytest.raises(AssertionError, match="did not return within 0.2 s"):
        search(ctx, "liveness", settings=pinned(50, shrink=False), seeds=False)


# The shipped state machine, used the way a third party would in their own test module.
TestToyEngineMachine = engine_machine(ToyEngine).TestCase


class CountsPrefills(ToyEngine):
    """Declares one feature counter (engines.protocol.Exercised)."""

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.prefills = 0

    def prefill(self, slot: int) -> int:
        self.prefills += 1
        return super().prefill(slot)

    def exercised(self) -> dict[str, int]:
        return {"prefills": self.prefills}


def test_coverage_reports_the_engines_own_counters_per_workload() -> None:
    ctx = build_context(CountsPrefills, name="CountsPrefills")
    coverage = search(ctx, "liveness", settings=pinned(10, shrink=False), seeds=False)
    # Each workload's change only: every request is prefilled once unless aborted while
    # waiting, so the tally sits between the unaborted requests and all of them.
    counts = coverage.counts
    prefills = counts["engine: prefills"]
    assert counts["requests"] - counts["aborts"] <= prefills <= counts["requests"]
    assert f"the engine counted {prefills} prefills" in coverage.describe(coverage.as_dict())


def _short_context_toy() -> ToyEngine:
    return ToyEngine(max_model_len=48)


def test_a_variant_with_a_shorter_context_is_no_false_alarm_on_bad_input() -> None:
    # The requests drawn fit every engine compared (48 tokens), but a bad request must be past
    # the engine under test's own context (96): one past 48 is a good request for it.
    ctx = build_context(ToyEngine, name="ToyEngine",
                        options=SuiteOptions(variants={"short": _short_context_toy}))
    assert ctx.limits.max_model_len == 48 and ctx.limits.refuse_past == 96
    search(ctx, "bad_input", settings=pinned(10, shrink=False))
