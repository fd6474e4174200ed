"""The SLO's timings, taken between the engines' steps (engines.bench.slo.PairedSLO).

A Yardstick holds a Timer (the preset's transformers forward, engines.bench.calibration, or a
test double) and is given a turn after every cycle of engine steps in a paired round. It takes
a timing only while its own time stays within `share` of the round's wall time (10%: the
engines' steps keep nine tenths of the machine), alternating decode steps and prefills so
that the prefills get a fixed share of the samples. `take()` ends the round: the mean of its
decode steps and of its prefills, after topping up to a minimum of each if the round was too
short to reach it.

The mean, not the minimum: the engines' latencies in the same round include every stall a
busy machine inflicts (a preemption in the middle of a step), and the targets must include
them in the same proportion, or a slow spell fails the engines against a yardstick that the
spell never touched. Sampled across the whole round, interleaved with the engines' steps, the
timings meet the same stalls at the same rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from engines.bench.slo import HardwareTimes

SHARE = 0.1  # at most this share of a round's wall time is spent timing
DECODES_PER_PREFILL = 3  # one prefill for every this many decode steps
MIN_DECODES = 12  # per round, topped up at take() if the round ran short
MIN_PREFILLS = 4


class Timer(Protocol):
    """Runs and times one call of the yardstick's model."""

    batch: int  # rows in the decode step's uniform batch
    prompt_len: int  # tokens in the prefilled prompt
    basis: str  # what is timed, e.g. "tiny float32 on cpu, transformers forward"

    def decode(self) -> float: ...  # seconds for one decode step of the uniform batch

    def prefill(self) -> float: ...  # seconds for one prefill of the long prompt, alone


class Yardstick:
    def __init__(self, timer: Timer, *, share: float = SHARE,
                 now: Callable[[], float] = time.perf_counter) -> None:
        if not 0 < share < 1:
            raise ValueError(f"yardstick share: must be in (0, 1), got {share}")
        self.timer = timer
        self.share = share
        self._now = now
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
            self._prefills.append(self.timer.prefill())
        else:
            self._decodes.append(self.timer.decode())

    def take(self) -> HardwareTimes:
        """The round's mean timings; the next turn starts a new round."""
        while len(self._decodes) < MIN_DECODES:
            self._decodes.append(self.timer.decode())
        while len(self._prefills) < MIN_PREFILLS:
            self._prefills.append(self.timer.prefill())
        times = HardwareTimes(
            step_s=float(np.mean(self._decodes)), prefill_s=float(np.mean(self._prefills)),
            batch=self.timer.batch, prompt_len=self.timer.prompt_len,
            basis=self.timer.basis, samples=(len(self._decodes), len(self._prefills)))
        self._decodes, self._prefills = [], []
        self._started, self._spent = None, 0.0
        return times
