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

steady (engines.bench.host.steady): the cpu clock rescaled by the host's own speed, which a gauge
times between the engines' steps: what a CPU that does not change speed would count. Built
with its gauge by engines.bench.host.kit.build; `source` has only the two plain ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

TimeSource = Callable[[], float]
ClockName = Literal["wall", "cpu", "steady"]
CLOCKS: dict[str, TimeSource] = {"wall": time.perf_counter, "cpu": time.thread_time}
NAMES = (*CLOCKS, "steady")
ON_THREAD = ("cpu", "steady")  # count this thread's CPU time: every engine's work on it


def check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"clock: must be one of {', '.join(NAMES)}, got {name!r}")


def on_thread(name: str) -> bool:
    """Whether the clock counts only this thread's CPU time (cpu, steady)."""
    check(name)
    return name in ON_THREAD


def source(name: str) -> TimeSource:
    """The plain clock `name`: wall or cpu (steady needs its gauge: engines.bench.host.steady)."""
    check(name)
    if name not in CLOCKS:
        raise ValueError(f"clock: {name!r} is built with its gauge "
                         "(engines.bench.host.kit.build)")
    return CLOCKS[name]


def describe(name: str) -> str:
    return {"wall": "wall time", "cpu": "CPU time of the thread stepping the engines",
            "steady": "CPU time of the thread stepping the engines, rescaled to the host's "
                      "speed over the gauge's first turns, after the warm-up runs"}[name]
