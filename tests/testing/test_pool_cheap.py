"""EnginePool.cheap, the choice between a fresh engine per workload and a reused one, follows
what a build costs in CPU time, not how long a loaded machine makes it wait: a planted bug
that only a fresh engine shows (a reused engine's prefix cache holds right blocks) escaped
under `pytest -n auto` when the LoRA engines' 5-8 ms builds went past 50 ms of wall time."""

from __future__ import annotations

import time

from engines.testing.pool import CHEAP_S, EnginePool
from examples.toy_engine import ToyEngine


def _waits() -> ToyEngine:
    """A build that waits, as one does on a loaded machine: wall time, little CPU time."""
    time.sleep(2 * CHEAP_S)
    return ToyEngine()


def _computes() -> ToyEngine:
    """A build that computes for longer than the bound."""
    end = time.process_time() + 2 * CHEAP_S
    while time.process_time() < end:
        pass
    return ToyEngine()


def test_a_build_that_waits_is_still_cheap() -> None:
    pool = EnginePool(_waits, "waits")
    pool.release(pool.fresh())
    assert pool.build_s is not None and pool.build_s >= 2 * CHEAP_S
    assert pool.cheap


def test_a_build_that_computes_is_not_cheap() -> None:
    pool = EnginePool(_computes, "computes")
    pool.release(pool.fresh())
    assert not pool.cheap


def test_a_build_that_waits_for_seconds_is_not_cheap() -> None:
    """A server or another process building the engine: wall time only, but seconds of it."""
    pool = EnginePool(ToyEngine, "toy")
    pool.release(pool.fresh())
    assert pool.cheap
    pool.build_s = 2.0  # the fastest build, as a server's start would make it
    assert not pool.cheap
