"""The kit's one hook between steps, and how it is built for a comparison."""

from __future__ import annotations

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

    def turn(self) -> None:
        if self.steady is not None:
            self.steady()
        self.gauge.turn()
        if self.steady is not None:
            self.steady()


def build(config: Config, max_model_len: int, *, timer: Timer | None = None,
          steady: SteadyTime | None = None, now: TimeSource | None = None) -> HostKit | None:
    """The kit when `config` asks for it (Config.host_kit), else None: its gauge on the
    preset's forward (or `timer`; tests), feeding the steady clock when that is the clock
    (`steady`: a modelled one, tests). `now` is the clock the gauge keeps its share of a
    round's time on: the wall clock, or the virtual one modelled engines spend (tests),
    whose turns then never depend on how fast the machine running them is."""
    if config.clock != "steady" and steady is not None:
        raise ValueError(f"clock: a steady time source was given for --clock {config.clock}")
    if not config.host_kit:
        return None
    if timer is None:
        from engines.bench.calibration import for_config  # torch: only when timing

        timer = for_config(config, max_model_len)
    if config.clock != "steady":
        return HostKit(HostGauge(timer, now=now))
    clock = steady or SteadyTime(timer)
    return HostKit(HostGauge(timer, now=now, on_decode=clock.observe,
                             scale=lambda: clock.speed), clock)
