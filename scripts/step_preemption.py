"""What a busy neighbour on the same core does to a step's CPU time, and what SCHED_FIFO does
about it (the measurement behind engines/bench/host/priority.py).

    python scripts/step_preemption.py [--cpu 1] [--requests 60] [--preset tiny]

Pins itself to --cpu, then serves the same requests one at a time (one-row decode steps, the
kind that suffers most) on the static engine three times: alone on the core, beside a busy loop
pinned to that core, and beside the busy loop with this thread under SCHED_FIFO (needs root or
CAP_SYS_NICE; reported as not run otherwise). Each step is timed on this thread's CPU time and
counted as preempted when the thread's involuntary context switches rose during it. Other
processes that share the core also count as neighbours: run it with the core otherwise idle.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time
from contextlib import AbstractContextManager, nullcontext

import torch

from engines.bench.host.priority import stepping_priority
from engines.protocol import Request, SamplingParams
from engines.slot.static import StaticBatchEngine


def _switches() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def serve(engine: StaticBatchEngine, requests: int) -> tuple[list[float], int]:
    """(every step's CPU time, how many steps were preempted)."""
    times, preempted = [], 0
    for _ in range(requests):
        engine.add_request(Request(prompt_token_ids=tuple(range(1, 40)),
                                   params=SamplingParams(max_tokens=64)))
        while engine.has_work():
            c0, t0 = _switches(), time.thread_time()
            engine.step()
            t1, c1 = time.thread_time(), _switches()
            times.append(t1 - t0)
            preempted += c1 != c0
    return times, preempted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--preset", default="tiny")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    engine = StaticBatchEngine(model=args.preset, max_batch_size=8)
    serve(engine, 5)  # warm-up
    conditions: list[tuple[str, bool, AbstractContextManager[object]]] = [
        ("alone", False, nullcontext()),
        ("beside a busy loop", True, nullcontext()),
        ("beside a busy loop, SCHED_FIFO", True, stepping_priority("auto", "cpu")),
    ]
    for label, busy, scheduling in conditions:
        hog = (subprocess.Popen(["taskset", "-c", str(args.cpu), "sh", "-c",
                                 "while :; do :; done"]) if busy else None)
        try:
            with scheduling as sched:
                if sched is not None and not getattr(sched, "realtime", True):
                    print(f"{label}: not run ({getattr(sched, 'note', '')})")
                    continue
                times, preempted = serve(engine, args.requests)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        print(f"{label}: {len(times)} steps, median {statistics.median(times) * 1e3:.3f} ms, "
              f"mean {statistics.fmean(times) * 1e3:.3f} ms, {preempted} preempted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
