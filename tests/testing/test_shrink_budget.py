"""A failing check's shrinking stops at the suite's budget (--shrink-budget), the report says it
was cut short, and Hypothesis' own "PLEASE REPORT THIS" warning (what it prints when its five
minutes of shrinking run out, issue 51) never reaches the user."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as conjecture_engine
from hypothesis.reporting import with_reporter

from engines.protocol import Request, SamplingParams
from engines.testing.leaks import minimal_leak
from engines.testing.shrink import shrink_workload
from engines.testing.shrink_budget import bounded_shrinking
from engines.testing.workload import Workload

ROOT = str(Path(__file__).resolve().parents[2])
# batching-ci: derandomized and without an example database, so that the run finds the bug
# afresh (the 3rd machine run) and shrinks it, whatever earlier runs saved.
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-ci", "--pyargs",
         "engines.testing.conformance", "--torch-threads=1")
CUT = "Shrinking was cut short by the 0 s shrink budget (--shrink-budget=S)"


@pytest.fixture
def importable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def _failing_search() -> None:
    """A Hypothesis test whose every failure shrinks (any list summing past 10 fails)."""

    @settings(database=None, derandomize=True, max_examples=200)
    @given(st.lists(st.integers(0, 100), min_size=1))
    def sums(xs: list[int]) -> None:
        assert sum(xs) < 10

    sums()


def test_hypothesis_warns_past_its_own_bound_without_the_suite() -> None:
    """The control: what Hypothesis prints when its shrink bound runs out (the bound set to 0
    here, as the suite's budget would), so that the next test's absence of it means something."""
    said: list[object] = []
    saved = conjecture_engine.MAX_SHRINKING_SECONDS
    conjecture_engine.MAX_SHRINKING_SECONDS = 0
    try:
        with with_reporter(said.append), pytest.raises(AssertionError):
            _failing_search()
    finally:
        conjecture_engine.MAX_SHRINKING_SECONDS = saved
    assert any("PLEASE REPORT THIS" in str(m) for m in said), said


def test_the_budget_bounds_shrinking_and_says_so_instead() -> None:
    said: list[object] = []
    with with_reporter(said.append), pytest.raises(AssertionError) as caught:
        with bounded_shrinking(0):
            _failing_search()
    assert not any("PLEASE REPORT THIS" in str(m) for m in said), said
    assert CUT in "\n".join(getattr(caught.value, "__notes__", ())), caught.value
    assert conjecture_engine.MAX_SHRINKING_SECONDS == 300  # restored


def test_a_shrink_within_the_budget_has_no_note() -> None:
    with pytest.raises(AssertionError) as caught:
        with bounded_shrinking(600):
            _failing_search()
    assert not any("cut short" in n for n in getattr(caught.value, "__notes__", ()))
    assert "[10]" in str(getattr(caught.value, "__notes__", ()))  # shrunk all the way


def test_the_seed_shrink_stops_when_out_of_time() -> None:
    """The suite's own greedy shrink of a seed workload stops at the budget: after one try
    here, where every candidate still fails and a full shrink would take dozens."""
    w = Workload(tuple(Request((1, 2, 3, 4), SamplingParams(max_tokens=8), request_id=f"r{i}")
                       for i in range(8)), (0,) * 8)
    tries: list[Workload] = []

    def fails(candidate: Workload) -> bool:
        tries.append(candidate)
        return True

    done = shrink_workload(w, fails)
    assert len(done.requests) == 1 and len(tries) > 5
    tries.clear()
    calls = iter([False, True])
    cut = shrink_workload(w, fails, out_of_time=lambda: next(calls, True))
    assert len(tries) == 1 and len(cut.requests) == 4  # the first halving, then time was up


def test_a_leaks_history_shrink_stops_at_the_budget() -> None:
    """A leak's history is the suite's to shrink too: at a spent budget its workloads come back
    as found (prompts of 3 tokens, which a full shrink cuts to 1), the budget marked cut."""
    def w(n: int, tag: str) -> Workload:
        return Workload(tuple(Request((1, 2, 3), SamplingParams(max_tokens=2),
                                      request_id=f"{tag}{i}") for i in range(n)), (0,) * n)

    def fails_after(earlier: Sequence[Workload], last: Workload) -> bool:  # 8 leaky blocks
        return sum(len(e.requests) for e in earlier) + len(last.requests) > 8

    with bounded_shrinking(0) as budget:
        earlier, last = minimal_leak([w(3, "a"), w(6, "b")], w(3, "x"), fails_after, shrink=True)
    assert budget.cut and fails_after(earlier, last)
    assert all(len(r.prompt_token_ids) == 3 for e in earlier for r in e.requests)


@pytest.mark.usefixtures("importable_tests")
def test_a_planted_bug_in_the_state_machine_is_reported_cut_short(
        pytester: pytest.Pytester) -> None:
    """The run issue 51 measured: the state machine on a planted bug, whose shrinking took
    5+ minutes and ended in Hypothesis' warning. With a budget of 0 it ends in seconds, the
    failure said, the cut said, the warning not."""
    result = pytester.runpytest(*SUITE, "--engine", "tests.planted.toy_bugs:StopOnlyFirstId",
                                "-k", "stateful", "--shrink-budget=0")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert CUT in out and "PLEASE REPORT THIS" not in out + result.stderr.str()
    assert "StopOnlyFirstId-stateful: " in out and "found a failure, shrinking it" in out
    assert conjecture_engine.MAX_SHRINKING_SECONDS == 300
