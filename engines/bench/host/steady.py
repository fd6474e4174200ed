"""The steady clock: this thread's CPU time, rescaled to the host's speed when the bench began.

CPU time leaves out other processes' time slices (engines.bench.clocks), but on a VM the core
itself changes speed under the guest (a tenant on its SMT sibling, memory traffic,
frequency), and an open-loop run at a rate timed in a fast spell runs past its share of
capacity in a slow one. So the kit's one gauge (engines.bench.host.gauge: the preset's decode
step, timed on the raw CPU clock between the engines' steps) hands every decode timing to
`observe`. The host's speed is the median of the last WINDOW timings over the median of the
first SETTLE_TURNS, and each stretch of CPU time counts as itself divided by the speed in
force when it ran; the kit banks the time before and after each gauge turn, so the speed
changes only between steps, never inside one. The baseline comes from turns between the
engines' steps after the closed stage's warm-up runs (engines.bench.comparison): a cold call
between steps is slower than a warm one back to back, and fresh engines' first steps carry
one-off costs.

Every figure is then at the host's speed over the gauge's first turns, which the output
states with the range the speed took (`speed_range`). It assumes what the cpu clock assumes,
and that the engines slow as the gauge does: the same model's forward, on the same core; a
slow spell slows a decode step more than a prefill, which the spike's host-mix line states
instead. Measured: docs/benchmarks.md, the noisy-host kit.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Protocol

from engines.bench.clocks import TimeSource

WINDOW = 9  # gauge timings whose median is the host's speed now
SETTLE_TURNS = 24  # the speed everything is rescaled to: the gauge's first this many turns


class Gauge(Protocol):
    """One decode step of the gauge's model (engines.bench.calibration.ForwardTimer), timed
    on the raw clock, in seconds: the back-to-back timings a clock starts from."""

    def decode(self) -> float: ...


class SteadyTime:
    """A TimeSource (engines.bench.clocks) on a virtual machine of constant speed, fed by
    the kit's gauge (`observe`, engines.bench.host.kit)."""

    def __init__(self, gauge: Gauge, *, raw: TimeSource = time.thread_time,
                 window: int = WINDOW, settle_turns: int = SETTLE_TURNS) -> None:
        for name, value in (("window", window), ("settle_turns", settle_turns)):
            if value < 1:
                raise ValueError(f"steady clock {name}: must be >= 1, got {value}")
        self._raw = raw
        self._recent = deque([gauge.decode() for _ in range(window)], maxlen=window)
        # Provisional, back to back: replaced by the first settle_turns turns' median.
        self.baseline_s = statistics.median(self._recent)
        self._settling: list[float] | None = []
        self._settle_turns = settle_turns
        self._speed = 1.0  # gauge now / baseline: 2.0 is half the baseline's speed
        self.speeds: list[float] = []  # after every turn once settled
        self._t, self._last = 0.0, raw()

    def __call__(self) -> float:
        raw = self._raw()
        self._t += (raw - self._last) / self._speed
        self._last = raw
        return self._t

    def resettle(self) -> None:
        """Take the baseline afresh from the next turns (engines.bench.comparison: after the
        warm-up runs, so that fresh engines' one-off first steps are not in it)."""
        self._settling, self.speeds = [], []

    @property
    def settled(self) -> bool:
        """Whether the baseline comes from the gauge's turns between steps yet."""
        return self._settling is None

    @property
    def speed(self) -> float:
        """How much longer the gauge's step takes now than over its settling turns."""
        return self._speed

    def observe(self, timing: float) -> None:
        """One decode timing of the kit's gauge, taken between steps with the time before and
        after it banked (engines.bench.host.kit): the speed from it on."""
        self._recent.append(timing)
        if self._settling is not None:
            self._settling.append(timing)
            if len(self._settling) >= self._settle_turns:
                self.baseline_s = statistics.median(self._settling)
                self._settling = None
        self._speed = statistics.median(self._recent) / self.baseline_s
        if self._settling is None:
            self.speeds.append(self._speed)

    def speed_range(self) -> tuple[float, float]:
        """The lowest and highest factor (gauge step / the baseline's) since it settled."""
        seen = self.speeds or [self._speed]
        return min(seen), max(seen)
