"""How steady is this machine's speed? The bench's yardstick step, timed in windows.

    python scripts/host_steadiness.py [--seconds 30] [--window 2] [--cpu N] [--preset tiny]

Times the preset's full-batch decode step (the SLO yardstick's, engines.bench.calibration) in
this thread's CPU time, back to back, and prints each window's median, mean and p90, then the
spread of the window medians. Run it with the machine otherwise idle: CPU time does not count
other processes' time slices, so what moves it is the host itself (another tenant's core or
memory traffic under a VM, frequency changes). On a steady machine the window medians stay
within a few percent; `bench --quick`'s latency ratios repeat only on such a machine (on one
whose medians moved 0.8-1.4 ms between windows they moved by up to 1.8x between quick runs:
docs/benchmarks.md, how stable a quick run is).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from engines.bench.calibration import ForwardTimer


def windows(timer: ForwardTimer, seconds: float, window: float) -> list[list[float]]:
    """Decode-step times (s), grouped by wall-clock windows of `window` seconds."""
    out: list[list[float]] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        close = time.perf_counter() + window
        samples = []
        while time.perf_counter() < close:
            samples.append(timer.decode())
        out.append(samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--cpu", type=int, help="pin to this CPU")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)  # the bench's default: everything on the clock's thread
    timer = ForwardTimer(args.preset, device="cpu", dtype="float32", batch=args.batch,
                         prompt_len=8, seed=0, clock=time.thread_time)
    medians = []
    for samples in windows(timer, args.seconds, args.window):
        ordered = sorted(samples)
        median = statistics.median(ordered)
        medians.append(median)
        print(f"median {median * 1e3:.3f} ms  mean {statistics.fmean(ordered) * 1e3:.3f} ms  "
              f"p90 {ordered[int(0.9 * (len(ordered) - 1))] * 1e3:.3f} ms  n {len(ordered)}")
    print(f"window medians {min(medians) * 1e3:.3f}-{max(medians) * 1e3:.3f} ms: "
          f"{max(medians) / min(medians):.2f}x between the fastest and slowest "
          f"{args.window:g}-s window ({args.preset}, {args.batch}-row decode step, CPU time)")


if __name__ == "__main__":
    main()
