"""The suite releases the engines it is done with: an engine the pool drops is closed, so a
batching-ci run on an engine with a thread of its own keeps a handful of engines and threads
alive, not one per engine built (issue 38 measured ~640 threads and ~140 live engines)."""

from __future__ import annotations

import gc
import threading

import pytest

from engines.protocol import check_declarations, close
from engines.testing.pool import EnginePool
from examples.toy_engine import ToyEngine
from tests.threaded_toy import ThreadedToy

# The engines a sequential run holds at once: per pool (the engine's, the alone oracle's) one
# idle and one in use, and the one a report's replay builds.
OPEN_BOUND = 6


def test_a_dropped_engine_is_closed_and_one_idle_engine_is_kept() -> None:
    ThreadedToy.reset()
    pool = EnginePool(ThreadedToy, "threaded")
    a, b = pool.fresh(), pool.fresh()
    pool.release(a)  # drained: kept idle
    pool.release(b)  # another is idle already: dropped
    assert (ThreadedToy.closed, pool.closed) == (1, 1)
    assert pool.acquire() == (a, False)
    pool.release(a, ok=False)  # broken: dropped
    assert ThreadedToy.closed == 2
    pool.release(pool.fresh())
    pool.close()  # the end of a session: the idle one too
    assert ThreadedToy.closed == ThreadedToy.built == 3


def test_an_engine_without_close_is_dropped_as_before_and_a_failing_close_is_kept() -> None:
    pool = EnginePool(ToyEngine, "toy")
    pool.release(pool.fresh(), ok=False)
    assert pool.closed == 1 and pool.close_error is None

    class CloseFails(ToyEngine):
        def close(self) -> None:
            raise OSError("already gone")

    pool = EnginePool(CloseFails, "fails")
    pool.release(pool.fresh(), ok=False)  # never a verdict: the engine is dropped anyway
    assert isinstance(pool.close_error, OSError)


def test_close_must_be_a_method() -> None:
    engine = ToyEngine()
    assert close(engine) is None
    engine.close = 3  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="close: 3 is not a method"):
        check_declarations(engine)


def test_a_batching_ci_run_on_a_threaded_engine_keeps_few_engines_alive(
        pytester: pytest.Pytester) -> None:
    ThreadedToy.reset()
    gc.collect()
    before = threading.active_count()
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--hypothesis-profile=batching-ci", "--pyargs",
        "engines.testing.conformance", "--engine", "tests.threaded_toy:ThreadedToy")
    assert result.ret == pytest.ExitCode.OK
    gc.collect()
    # Hundreds are built (a fresh engine per example where engines build fast) ...
    assert ThreadedToy.built > 100
    # ... and every one is closed: at most a few open, and threads, at any time.
    assert ThreadedToy.closed == ThreadedToy.built
    assert ThreadedToy.peak_open <= OPEN_BOUND, ThreadedToy.peak_open
    assert ThreadedToy.peak_threads <= before + OPEN_BOUND, (before, ThreadedToy.peak_threads)
    assert threading.active_count() <= before
    assert len(ThreadedToy.alive) <= 2, len(ThreadedToy.alive)  # objects, weakly counted
