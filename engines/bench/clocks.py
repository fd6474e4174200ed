"""What the bench's engine clocks count: wall time, or this thread's CPU time.

wall (time.perf_counter): what a user waits, the core's clock. Beside other tenants it also
counts the time slices the OS gave them, which stretch long steps more than short ones.

cpu (time.thread_time): the CPU time of the thread stepping the engines, which another
process's time slice does not advance. Right only when all of an engine's work runs on that
thread (the default engines, in-process, `--threads 1`); an engine computing in other threads
or processes (vLLM's engine core, a server, a GPU) would look almost free, so such engines
take the wall clock, and CUDA always does.

steady (engines.bench.host.steady): the cpu clock rescaled by the host's own speed, timed
between the steps by the kit's gauge; built with it by engines.bench.host.kit.build, so
`source` has only the two plain ones. What each clock did on this project's VM:
docs/benchmarks.md, the noisy-host kit.
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
