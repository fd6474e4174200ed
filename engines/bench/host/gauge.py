"""The noisy-host kit's one gauge: the preset's forward, timed between the engines' steps.

Its timings serve everything the kit says about the host: each paired round's SLO targets
(engines.bench.slo.PairedSLO), the steady clock's speed (engines.bench.host.steady: every
decode timing goes to `on_decode`), the drift over the reference run and the host's
prefill-over-decode mix over the admission-spike steps (engines.bench.host.lines).

A HostGauge holds a Timer (the preset's transformers forward, engines.bench.calibration, or a
test double) and gets a turn after every cycle of engine steps. It takes a timing only while
its own time stays within `share` of the round's wall time (10%: the engines keep nine tenths
of the machine), alternating decode steps and prefills at a fixed ratio. `take()` ends the
round: the mean of its decode steps and of its prefills, topped up to a minimum of each.

The mean, not the minimum: the engines' latencies in the same round include every stall a
busy machine inflicts, and targets sampled across the round, interleaved with the engines'
steps, meet the same stalls at the same rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from engines.bench.slo import HardwareTimes, Timer

SHARE = 0.1  # at most this share of a round's wall time is spent timing
DECODES_PER_PREFILL = 3  # one prefill for every this many decode steps
MIN_DECODES = 12  # per round, topped up at take() if the round ran short
MIN_PREFILLS = 4


class HostGauge:
    """`on_decode` gets every raw decode timing (the steady clock's speed); `scale` divides
    each timing the rounds keep (that speed: the targets count on the engines' clock)."""

    def __init__(self, timer: Timer, *, share: float = SHARE,
                 now: Callable[[], float] | None = None,
                 on_decode: Callable[[float], None] | None = None,
                 scale: Callable[[], float] | None = None) -> None:
        if not 0 < share < 1:
            raise ValueError(f"yardstick share: must be in (0, 1), got {share}")
        self.timer = timer
        self.share = share
        self._now = now or time.perf_counter  # the wall clock, unless a run gives its own
        self._on_decode, self._scale = on_decode, scale
        self._decodes: list[float] = []
        self._prefills: list[float] = []
        self._started: float | None = None  # when the round's first turn came
        self._spent = 0.0  # wall time spent timing in this round

    def turn(self) -> None:
        """Take one timing if the yardstick is within its share of the round's time."""
        now = self._now()
        if self._started is None:
            self._started = now
        if self._spent > self.share * (now - self._started):
            return
        self._sample()
        self._spent += self._now() - now

    def _sample(self) -> None:
        if len(self._prefills) * DECODES_PER_PREFILL < len(self._decodes):
            self._prefills.append(self._scaled(self.timer.prefill()))
        else:
            self._decodes.append(self._decode())

    def _decode(self) -> float:
        raw = self.timer.decode()
        if self._on_decode is not None:
            self._on_decode(raw)
        return self._scaled(raw)

    def _scaled(self, raw: float) -> float:
        return raw / self._scale() if self._scale is not None else raw

    def restart(self) -> None:
        """Drop the round's timings so far: the next round starts now."""
        self._decodes, self._prefills = [], []
        self._started, self._spent = None, 0.0

    def take(self) -> HardwareTimes:
        """The round's mean timings; the next turn starts a new round."""
        while len(self._decodes) < MIN_DECODES:
            self._decodes.append(self._decode())
        while len(self._prefills) < MIN_PREFILLS:
            self._prefills.append(self._scaled(self.timer.prefill()))
        times = HardwareTimes(
            step_s=float(np.mean(self._decodes)), prefill_s=float(np.mean(self._prefills)),
            batch=self.timer.batch, prompt_len=self.timer.prompt_len,
            basis=self.timer.basis, samples=(len(self._decodes), len(self._prefills)))
        self.restart()
        return times
