"""Keep other processes on the bench's core from preempting the engines' steps.

The CPU-time clock (engines.bench.clocks) does not count another process's time slices, but
it still counts what they leave behind: a step that resumes after one finds its caches cold
(docs/benchmarks.md, the noisy-host kit, for what that cost on this project's VM). So, under
the CPU-time clocks only, the stepping thread runs under SCHED_FIFO at the lowest real-time
priority (1) where the OS permits it (root, CAP_SYS_NICE or an RLIMIT_RTPRIO); the kernel's
real-time throttling still leaves the others 5% of the core. Only there: those clocks'
premise is that all of an engine's work runs on this thread, where an engine with worker
threads or processes (vLLM, servers, CTranslate2) would have its workers starved. The policy
is per thread and restored when the measurement ends.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from engines.bench import clocks

Mode = Literal["auto", "realtime", "normal"]
MODES: tuple[Mode, ...] = ("auto", "realtime", "normal")
RT_PRIORITY = 1  # the lowest: above every ordinary process, below every real-time one


@dataclass(frozen=True, slots=True)
class Scheduling:
    realtime: bool
    note: str  # what the run was scheduled as, and why: printed with the results


def check(mode: str, clock: str) -> None:
    """Refuse a mode that cannot be honoured, naming the option and the value."""
    if mode not in MODES:
        raise ValueError(f"priority: must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "realtime" and not clocks.on_thread(clock):
        raise ValueError(f"priority: 'realtime' needs --clock cpu or steady (an engine timed "
                         f"on the wall clock may compute in other threads, which a real-time "
                         f"stepping thread would starve), got --clock {clock}")


@contextmanager
def stepping_priority(mode: str, clock: str) -> Iterator[Scheduling]:
    """Run the block with the calling thread under SCHED_FIFO where `mode` and `clock` allow
    it and the OS permits it; yield what was done. `realtime` that the OS refuses raises
    (the user asked for it); `auto` falls back to normal scheduling and says so."""
    check(mode, clock)
    if mode == "normal":
        yield Scheduling(False, "normal scheduling (--priority normal): other processes on "
                                "this core slow the figures")
        return
    if not clocks.on_thread(clock):
        yield Scheduling(False, "normal scheduling: timed on the wall clock, whose engines may "
                                "compute in threads a real-time stepping thread would starve")
        return
    if not hasattr(os, "sched_setscheduler"):
        if mode == "realtime":
            raise ValueError("priority: 'realtime' needs SCHED_FIFO, which this OS lacks")
        yield Scheduling(False, "normal scheduling: no SCHED_FIFO on this OS; other processes "
                                "on this core slow the figures")
        return
    before = os.sched_getscheduler(0)
    before_param = os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except PermissionError as exc:
        if mode == "realtime":
            raise ValueError(f"priority: 'realtime' was refused by the OS ({exc.strerror}): it "
                             "needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least "
                             f"{RT_PRIORITY}") from exc
        yield Scheduling(False, "normal scheduling: SCHED_FIFO not permitted (needs root, "
                                "CAP_SYS_NICE or an RLIMIT_RTPRIO); other processes on this "
                                "core slow the figures (docs/benchmarks.md)")
        return
    try:
        yield Scheduling(True, f"the stepping thread under SCHED_FIFO {RT_PRIORITY}: no "
                               "ordinary process on its core preempts a step "
                               "(--priority normal turns this off)")
    finally:
        os.sched_setscheduler(0, before, before_param)
