"""The alone oracle's crashes: one on a fresh engine is reported with a one-request script;
one that needs what a reused engine served before is reported with that history, shortened."""

from __future__ import annotations

import pytest

from engines.protocol import Request, SamplingParams, StepOutput
from engines.testing.leaks import shortest_suffix
from engines.testing.oracle import AloneOracle
from engines.testing.pool import EnginePool
from engines.testing.recorder import EngineCrashed
from examples.toy_engine import ToyEngine

LIMIT = 5  # the leaking engine crashes on the step after it has served this many requests


class LeaksAcrossRequests(ToyEngine):
    """Counts every request it ever served, and crashes once the count passes LIMIT (a block
    pool that never gets its blocks back, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.served = 0

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self.served += 1

    def step(self) -> list[StepOutput]:
        if self.served > LIMIT:
            raise RuntimeError("No requests can be scheduled")
        return super().step()


class CrashesOnLongPrompts(ToyEngine):
    def step(self) -> list[StepOutput]:
        if any(len(s.request.prompt_token_ids) > 3 for s in self.live.values()):
            raise RuntimeError("prompt too long for the pool")
        return super().step()


def _oracle(factory: type[ToyEngine]) -> AloneOracle:
    pool = EnginePool(factory, "--engine tests:leaky")
    pool.release(pool.fresh())
    pool.build_s = 1.0  # engines "slow to build": the oracle reuses them, as with a real model
    source = f"from tests.testing.test_oracle_crashes import {factory.__name__} as make_engine"
    return AloneOracle(pool, repro_source=source)


def test_a_crash_that_needs_history_is_reported_with_the_shortest_history(
        capsys: pytest.CaptureFixture[str]) -> None:
    oracle = _oracle(LeaksAcrossRequests)
    for i in range(LIMIT):
        oracle.tokens((1, 2, i), SamplingParams(max_tokens=2))
    with pytest.raises(EngineCrashed) as info:
        oracle.tokens((7, 8), SamplingParams(max_tokens=2))
    message, replay = str(info.value), info.value.replay
    assert "On a fresh engine this request is served fine" in message
    assert f"served {LIMIT} earlier request(s) alone" in message
    assert replay is not None and replay.count("# earlier workload") == LIMIT
    assert "Request((7, 8), SamplingParams(max_tokens=2)" in replay
    # The script replays the crash (its factory is this module's leaking engine) and exits 1
    # with the engine's exception last, what was expected before it.
    with pytest.raises(SystemExit) as exit_:
        exec(replay, {"__name__": "replay"})
    assert exit_.value.code == 1
    said = capsys.readouterr().err
    assert said.startswith("expected: the workload served to the end\nobserved: it raises "
                           "RuntimeError in step()"), said
    assert said.rstrip().splitlines()[-1].startswith("RuntimeError: No requests can be "
                                                     "scheduled"), said


def test_a_crash_on_a_fresh_engine_is_reported_with_the_request_alone() -> None:
    oracle = _oracle(CrashesOnLongPrompts)
    oracle.tokens((1, 2), SamplingParams(max_tokens=2))  # the engine now has a history
    with pytest.raises(EngineCrashed) as info:
        oracle.tokens((1, 2, 3, 4), SamplingParams(max_tokens=1))
    replay = info.value.replay
    assert "On a fresh engine" not in str(info.value)
    assert replay is not None and "# earlier workload" not in replay
    assert "Request((1, 2, 3, 4), SamplingParams(max_tokens=1)" in replay


@pytest.mark.parametrize("need", [1, 3, 7])
def test_shortest_suffix_finds_the_tail_a_buildup_needs(need: int) -> None:
    history = list(range(10))
    calls: list[int] = []

    def fails(tail: object) -> bool:
        calls.append(1)
        return len(tail) >= need  # type: ignore[arg-type]

    assert len(shortest_suffix(history, fails)) == need
    assert len(calls) <= 1 + 4 + 8  # the whole history, bisection, the drop budget


def test_shortest_suffix_keeps_everything_when_nothing_fails() -> None:
    assert shortest_suffix([1, 2, 3], lambda tail: False) == [1, 2, 3]


def test_shortest_suffix_drops_what_the_failure_does_not_need() -> None:
    # Only items 2 and 7 matter; the bisected tail [2..9] loses the rest.
    assert shortest_suffix(list(range(10)), lambda t: 2 in t and 7 in t) == [2, 7]
