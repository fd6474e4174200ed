"""The kit's one hook between steps, and how it is built for a comparison."""

from __future__ import annotations

import time

from engines.bench import clocks, draws
from engines.bench.clocks import TimeSource
from engines.bench.config import Config
from engines.bench.host.gauge import HostGauge, Timer
from engines.bench.host.steady import SteadyTime


class HostKit:
    """`turn` goes between every cycle of engine steps (RunContext.hook): the gauge's turn,
    with the steady clock's time banked on both sides of it (what ran before counts at the
    speed it ran at; the gauge's own time on no engine's clock)."""

    def __init__(self, gauge: HostGauge, steady: SteadyTime | None = None) -> None:
        self.gauge, self.steady = gauge, steady

    @property
    def time_source(self) -> TimeSource | None:
        return self.steady

    def turn(self) -> None:
        if self.steady is not None:
            self.steady()
        self.gauge.turn()
        if self.steady is not None:
            self.steady()


def _raw(config: Config) -> TimeSource:
    """What the gauge's timer reads: this thread's CPU time under the on-thread clocks (the
    steady clock rescales it), else the wall clock."""
    return time.thread_time if clocks.on_thread(config.clock) else time.perf_counter


def build(config: Config, max_model_len: int, *, timer: Timer | None = None,
          steady: SteadyTime | None = None) -> HostKit:
    """The kit for `config`: its gauge on the preset's forward (or `timer`; tests), feeding
    the steady clock when that is the clock (`steady`: a modelled one, tests)."""
    if timer is None:
        from engines.bench.calibration import ForwardTimer  # torch: only when timing

        timer = ForwardTimer(config.preset, device=config.device, dtype=config.dtype,
                             batch=config.max_batch_size,
                             prompt_len=draws.prompt_classes(max_model_len)[-1],
                             seed=config.seed, clock=_raw(config))
    if config.clock != "steady":
        if steady is not None:
            raise ValueError(f"clock: a steady time source was given for --clock "
                             f"{config.clock}")
        return HostKit(HostGauge(timer))
    clock = steady or SteadyTime(timer)
    return HostKit(HostGauge(timer, on_decode=clock.observe, scale=lambda: clock.speed), clock)
