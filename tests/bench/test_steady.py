"""The steady clock: CPU time rescaled by the host's own speed, which a gauge times between the
engines' steps (engines.bench.host.steady)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from engines.bench import comparison, draws, traces
from engines.bench.config import Config
from engines.bench.doubles.fake import FakeEngine, FakeTimer, Machine, VirtualClock
from engines.bench.host import kit as host_kit
from engines.bench.host.steady import SteadyTime


class Host:
    """A modelled CPU: work advances its clock by the work's cost times the machine's factor,
    and the gauge's decode step is 1 ms of such work."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.t = 0.0

    def clock(self) -> float:
        return self.t

    def work(self, seconds: float) -> None:
        self.t += seconds * self.machine.factor

    def decode(self) -> float:
        start = self.t
        self.work(0.001)
        return self.t - start


def _turn(steady: SteadyTime, host: Host) -> None:
    """A turn of the kit's gauge between steps (engines.bench.host.kit.HostKit.turn)."""
    steady()
    steady.observe(host.decode())
    steady()


def test_work_counts_at_the_settled_speed_whatever_the_host_does() -> None:
    machine = Machine()
    host = Host(machine)
    steady = SteadyTime(host, raw=host.clock, window=3, settle_turns=2)

    def timed(seconds: float) -> float:
        start = steady()
        host.work(seconds)
        return steady() - start

    assert timed(0.01) == pytest.approx(0.01)
    machine.factor = 1.25  # between the engines' steps the gauge's caches are cold
    for _ in range(2):
        host.work(0.01)
        _turn(steady, host)
    # The baseline is the turns', not the back-to-back timings': no slowdown is reported.
    assert steady.settled and steady.baseline_s == pytest.approx(0.00125)
    assert timed(0.01) == pytest.approx(0.0125)  # at the settled speed: as it ran
    machine.factor = 1.0
    for _ in range(3):
        host.work(0.01)
        _turn(steady, host)
    assert steady.speed == pytest.approx(0.8)
    assert timed(0.01) == pytest.approx(0.0125)  # faster than settled: the same figure
    machine.factor = 2.5  # the host runs at half the settled speed: raw CPU time doubles
    assert timed(0.01) == pytest.approx(0.025 / 0.8)  # no gauge turn yet: the old speed holds
    for _ in range(4):  # the window's median moves to the new speed
        host.work(0.01)
        _turn(steady, host)
    assert steady.speed == pytest.approx(2.0)
    assert timed(0.01) == pytest.approx(0.0125)
    assert steady.speed_range() == pytest.approx((0.8, 2.0))


def test_a_paired_run_gives_the_gauge_its_turns() -> None:
    # The engine spends a virtual clock, on which the gauge also keeps its share of the time
    # (its timings spend none of it): a turn every cycle, however slow the host running the
    # test (on the wall clock, a gauge slow next to the engine's steps skipped turns).
    machine, virtual = Machine(), VirtualClock()
    gauge = FakeTimer(step_s=0.001, machine=machine)
    steady = SteadyTime(gauge, raw=virtual.now, window=1, settle_turns=2)
    before = gauge.calls
    trace = traces.closed(draws.uniform(4, prompt_len=4, max_tokens=4, vocab_size=100))
    config = Config(clock="steady")
    kit = host_kit.build(config, 64, timer=gauge, steady=steady, now=virtual.now)
    comparison.context(config, 100, kit=kit).paired(  # the steady clock: on `virtual`
        {"e": FakeEngine(max_batch_size=2, base_s=0.001, clock=virtual)}, {"e": trace})
    # One gauge: the kit's turns time it, and the steady clock settles on those timings.
    assert gauge.calls > before and steady.settled


def test_a_steady_source_for_another_clock_is_refused() -> None:
    steady = SteadyTime(FakeTimer(), raw=time.perf_counter, window=1)
    with pytest.raises(ValueError, match="a steady time source was given for --clock wall"):
        host_kit.build(Config(clock="wall"), 64, timer=FakeTimer(), steady=steady)


def test_the_baseline_is_settled_after_the_warm_up_runs() -> None:
    # A fresh engine's first steps carry one-off costs (allocations, first shapes) that slow
    # the gauge timed between them; the baseline must come from the turns after them.
    from engines.bench.progress import Progress

    class CountingBar(Progress):
        def __init__(self) -> None:
            super().__init__(False)
            self.ticks = 0

        def tick(self, units: int = 1, postfix: Any = None, **more: Any) -> None:
            self.ticks += units
            super().tick(units, postfix, **more)

    bar = CountingBar()

    class SlowWhileWarmingUp(FakeTimer):
        def decode(self) -> float:
            return 0.002 if bar.ticks < 2 else 0.001

    virtual = VirtualClock()  # the engine's and the gauge's share's: as in the test above
    steady = SteadyTime(SlowWhileWarmingUp(), raw=virtual.now, window=1, settle_turns=2)
    trace = traces.closed(draws.uniform(4, prompt_len=4, max_tokens=4, vocab_size=100))
    config = Config(warmup=2, runs=2, clock="steady")
    kit = host_kit.build(config, 64, timer=SlowWhileWarmingUp(), steady=steady, now=virtual.now)
    ctx = comparison.context(config, 100, bar=bar, kit=kit)
    comparison.closed_stage(ctx, {"e": FakeEngine(max_batch_size=2, base_s=0.001,
                                                  clock=virtual)}, trace, config)
    assert bar.ticks == 4  # the warm-ups and the recorded runs, each once
    assert steady.settled and steady.baseline_s == pytest.approx(0.001)
