"""The steady clock: this thread's CPU time, rescaled to the host's speed when the bench began.

CPU time already leaves out the time slices other processes get (engines.bench.clocks), but on
a VM the core itself changes speed under the guest (a tenant on its SMT sibling, memory
traffic, frequency): on one idle 2-core guest the tiny preset's 8-row decode step, in CPU
time, moved 0.93-1.87 ms between 2-s windows (scripts/host_steadiness.py). Paired runs cancel
such a spell between engines only where figures are linear in speed. An open-loop run at a
rate set in a fast spell runs past its share of capacity in a slow one, and queueing latency
grows as load / (1 - load): on that guest the quick bench's queue-wait ratios moved 2.9-5.1x
between four runs of the same code.

So the kit's one gauge (engines.bench.host.gauge: a decode step of the preset's forward,
timed on the raw CPU clock between the engines' steps) hands every decode timing to
`observe`. The host's speed is the median of the last WINDOW timings over the median of the
first SETTLE_TURNS, and each stretch of CPU time counts as itself divided by the speed in
force when it ran; the kit banks the time before and after each gauge turn, so the speed
changes only between steps, never inside one. Between steps the engines' work has evicted
the gauge's caches (a cold call took 1.19-1.36x as long as a warm one right after it), so
the baseline comes from turns between the engines' steps too, after the closed stage's
warm-up runs (engines.bench.comparison), not from fresh engines' first steps or from timings
before the run; until it is settled, time counts against WINDOW back-to-back timings taken
when the clock was built. (Before the kit the clock timed its own gauge, a warmed second
call, beside the SLO's: two gauges on the same decode step.)

Measured on that guest, the gauge alternating with another load of the same model (a 24-row
decode step and a 96-token prefill), one gauge timing for every 8 of them: window medians that
moved 1.6-1.9x in raw CPU time moved 1.05-1.10x rescaled, idle or beside two busy loops. The
prefills kept more of the spread (1.09-1.10x against the decode steps' 1.05x): a slow spell
slows a decode step more than a prefill, and one gauge cannot follow both. A ratio of the two
inside one engine (the admission spike) moves with that mix, which the output states beside
it instead (engines.bench.comparison's disturbance run).

What it changes: every figure is in the host's speed over the gauge's first turns, a virtual
machine that does not change speed. Ratios between engines mean what they did; an absolute
figure is the one the host would give if it kept that speed, which the output states with the
range the speed took (`speed_range`). It assumes what the cpu clock assumes (every engine's
work on this thread) and that the engines slow as the gauge does: the same model's forward,
on the same core.
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
