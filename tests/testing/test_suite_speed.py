"""What keeps a full run of the suite short: checks share one workload stream and its runs,
and hand-shrinking resumes where its last step was found. The sharing and shrinking-speed
tests fail without the piece they name; the others guard what must not change with them (a
failure on a kept run is still confirmed on a fresh engine, shrinking still ends at a local
minimum)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings as Settings

from engines.protocol import Request, SamplingParams, StepOutput
from engines.testing.context import build_context
from engines.testing.runs import RunCache
from engines.testing.search import search
from engines.testing.seed_workloads import seed_workloads
from engines.testing.shrink import _candidates, shrink_workload
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from examples.toy_engine import ToyEngine
from tests.planted.harness import hunt
from tests.planted.paged_bugs import PrefixKeyIgnoresPast
from tests.planted.toy_bugs import HasWorkStale

ROOT = str(Path(__file__).resolve().parents[2])
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance")


class CountingToy(ToyEngine):
    """The example engine, counting every step() any instance takes."""

    steps = 0

    def step(self) -> list[StepOutput]:
        CountingToy.steps += 1
        return super().step()


def _few(n: int = 12, **kw: Any) -> Settings:
    return Settings(max_examples=n, database=None, **kw)


def test_a_second_check_judges_the_first_checks_runs_without_serving_them() -> None:
    ctx = build_context(CountingToy, name="CountingToy")
    first = search(ctx, "token_range", settings=_few())
    before = CountingToy.steps
    second = search(ctx, "budget_finish", settings=_few())
    # The same workloads (seed workloads and the Hypothesis stream), judged from the runs
    # kept: no engine stepped, not even for the alone answers the strategies ask for.
    assert second.counts["workloads"] == first.counts["workloads"] > 12
    assert second.as_dict() == first.as_dict()
    assert CountingToy.steps == before
    assert ctx.runs.hits >= second.counts["workloads"]


def test_a_derandomized_stream_is_shared_and_the_same_in_every_session() -> None:
    streams = []
    for _ in range(2):
        ctx = build_context(CountingToy, name="CountingToy")
        search(ctx, "liveness", settings=_few(derandomize=True))
        before = CountingToy.steps
        search(ctx, "token_range", settings=_few(derandomize=True))
        assert CountingToy.steps == before
        streams.append(ctx.runs.workloads())
    assert streams[0] == streams[1] and len(streams[0]) > 12


def test_a_failure_on_a_kept_run_is_confirmed_on_a_fresh_engine() -> None:
    # HasWorkStale's has_work() goes stale once it has drained: its second workload fails
    # liveness on a reused engine only. Judged for liveness from the run token_range kept,
    # that failure must still be told apart from one a fresh engine repeats: a leak, with
    # the history of the engine that made the run.
    ctx = build_context(HasWorkStale, name="HasWorkStale")
    w1, w2, *_ = seed_workloads(ctx.limits, alone=ctx.oracle.tokens)
    assert verify(ctx, w1, "token_range").ok and verify(ctx, w2, "token_range").ok
    kept = ctx.runs.get(w2)
    assert kept is not None and not kept.fresh and kept.history == (w1,)
    outcome = verify(ctx, w2, "liveness")
    assert outcome.failure is None and outcome.leak is not None
    assert outcome.leak.history == (w1,)
    assert "has_work() is False" in str(outcome.leak.first.error)


def test_only_finished_runs_are_kept_and_the_cache_is_bounded() -> None:
    ctx = build_context(ToyEngine, name="ToyEngine")
    w1, w2, w3, *_ = seed_workloads(ctx.limits)
    verify(ctx, w1, "liveness")
    trace = ctx.runs.get(w1)
    assert trace is not None
    runs = RunCache(limit=1)
    stalled = trace.trace
    stalled.stalled = True
    runs.keep(w2, stalled, fresh=True, history=())
    assert runs.get(w2) is None
    stalled.stalled = False
    runs.keep(w2, stalled, fresh=True, history=())
    runs.keep(w3, stalled, fresh=True, history=())
    assert runs.get(w2) is not None and runs.get(w3) is None and len(runs) == 1


def _w(budgets: list[int]) -> Workload:
    reqs = tuple(Request((1, 2), SamplingParams(max_tokens=b), request_id=f"r{i}")
                 for i, b in enumerate(budgets))
    return Workload(reqs, (0,) * len(reqs))


def test_shrinking_reaches_a_long_minimal_budget_in_few_tries() -> None:
    # Fails while at least 3 requests have budgets of 17 or more: every request but three
    # must go, and each budget left must come down to exactly 17, not one below.
    tried: list[Workload] = []

    def fails(w: Workload) -> bool:
        tried.append(w)
        return sum(r.params.max_tokens >= 17 for r in w.requests) >= 3

    out = shrink_workload(_w([32] * 8), fails)
    assert [r.params.max_tokens for r in out.requests] == [17, 17, 17]
    # One token at a time, restarting every round from the first candidate, took the whole
    # budget of 150 tries and stopped short of the minimum.
    assert len(tried) < 75


def test_shrinking_stops_only_after_a_whole_round_finds_nothing() -> None:
    tried: list[tuple[Workload, bool]] = []

    def fails(w: Workload) -> bool:
        result = len(w.requests) >= 2 and all(r.params.max_tokens >= 3 for r in w.requests)
        tried.append((w, result))
        return result

    out = shrink_workload(_w([5, 6, 9, 4, 7]), fails)
    assert [r.params.max_tokens for r in out.requests] == [3, 3]
    # After the last step that still failed, every candidate of its result was tried once.
    last = max(i for i, (_, result) in enumerate(tried) if result)
    assert len(tried) - last - 1 == len(list(_candidates(tried[last][0])))


def test_torch_threads_option_sets_them_before_engines_are_built(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    pytester.makepyfile(threaded="""
        import torch
        from examples.toy_engine import ToyEngine

        class Threaded(ToyEngine):
            def __init__(self):
                assert torch.get_num_threads() == 1, torch.get_num_threads()
                super().__init__()
    """)
    torch.set_num_threads(2)
    try:
        result = pytester.runpytest(*SUITE, "--engine", "threaded:Threaded", "-k", "token_range",
                                    "--torch-threads", "1")
        result.assert_outcomes(passed=1)
        # Without the option the suite leaves torch alone: the factory sees 2 and fails.
        torch.set_num_threads(2)
        result = pytester.runpytest(*SUITE, "--engine", "threaded:Threaded", "-k", "token_range")
        assert result.ret != 0
    finally:
        torch.set_num_threads(1)


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_bad_torch_threads_value_is_a_usage_error(pytester: pytest.Pytester,
                                                    value: str) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine",
                                "--torch-threads", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*torch_threads: '{value}' is not a whole number of at least 1*"])


def test_a_shrunk_seed_workload_is_replayed_on_a_fresh_engine() -> None:
    # On a reused engine the prefix cache can hold right blocks for the shrunk workload and
    # hide the bug; replayed on a pooled engine, the report fell back to the unshrunk seed
    # workload of 5 requests.
    caught = hunt(PrefixKeyIgnoresPast, settings=Settings(max_examples=1, database=None))
    assert caught is not None and caught.prop == "reference_parity"
    assert "Counterexample (2 request(s)" in str(caught)
