"""What the bench's engine clocks count: wall time, or this thread's CPU time.

wall (time.perf_counter): what a user waits. Beside other tenants it also counts the time the
operating system gave the CPU to them: a step preempted by another process for a 4 ms time
slice is 4 ms longer. That stretches long steps more than short ones (a 15 ms prefill nearly
always holds a slice, a 4 ms decode step often none: measured here beside one busy loop on
the same core, decode 2.1x and prefill 3.1x slower), so the ratios the bench reports
between engines, and between a prompt's admission and a decode step, move with the load.

cpu (time.thread_time): the CPU time of the thread that runs the engines' steps, which a
time slice given to another process does not advance. Beside the same busy loop: decode 1.1x,
prefill 1.2x (cache sharing, not preemption). Right only when all of an engine's work runs on
that thread: a CPU engine built in-process with one torch thread (the default engines under
`--threads 1`). An engine that computes in other threads or processes (vLLM's engine core, a
server, a GPU) would be timed as almost free: such engines take the wall clock, and on CUDA it
is always the wall clock, with a synchronize around every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

TimeSource = Callable[[], float]
ClockName = Literal["wall", "cpu"]
CLOCKS: dict[str, TimeSource] = {"wall": time.perf_counter, "cpu": time.thread_time}


def source(name: str) -> TimeSource:
    if name not in CLOCKS:
        raise ValueError(f"clock: must be one of {', '.join(CLOCKS)}, got {name!r}")
    return CLOCKS[name]


def describe(name: str) -> str:
    return {"wall": "wall time", "cpu": "CPU time of the thread stepping the engines"}[name]
