"""How steady is this machine's speed? The bench's yardstick, timed in windows.

    python scripts/host_steadiness.py [--seconds 30] [--window 2] [--cpu N] [--preset tiny]

Times the preset's full-batch decode step and its longest-class prefill (the SLO yardstick's,
engines.bench.calibration, one prefill for every three decode steps as the yardstick takes
them) in this thread's CPU time, and prints each window's decode-step median, mean and p90 and
its prefill over its decode step, then the spread of both over the windows. Run it with the
machine otherwise idle: CPU time does not count other processes' time slices, so what moves it
is the host itself (another tenant's core or memory traffic under a VM, frequency changes).

Two figures, because the bench can rescale one. The decode step's spread is what the steady
clock takes out (engines.bench.host.steady): `bench --quick`'s ratios between engines repeat once
it is gone. The prefill over the decode step is the host's mix of two speeds, and no clock
rescales it: an admission spike (an admitting step over a decode step) and every latency that
weighs a prefill against decode steps move with it between runs. On a steady machine both
stay within a few percent across windows; on the 2-core VM of docs/benchmarks.md (how stable a
quick run is), over 20 s, the decode step moved 1.69x and the mix 1.33x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from engines.bench.calibration import ForwardTimer
from engines.bench.draws import prompt_classes
from engines.bench.host.gauge import DECODES_PER_PREFILL  # the mix the yardstick takes
from engines.models import preset_max_model_len


def windows(timer: ForwardTimer, seconds: float,
            window: float) -> list[tuple[list[float], list[float]]]:
    """(decode-step times, prefill times) in seconds, by wall-clock windows of `window` s."""
    out: list[tuple[list[float], list[float]]] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        close = time.perf_counter() + window
        decodes: list[float] = []
        prefills: list[float] = []
        while time.perf_counter() < close:
            decodes.append(timer.decode())
            if len(decodes) % DECODES_PER_PREFILL == 0:
                prefills.append(timer.prefill())
        out.append((decodes, prefills))
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
    max_model_len = preset_max_model_len(args.preset)
    if max_model_len is None:
        parser.error(f"--preset: {args.preset!r} is not a preset (engines.models.PRESETS)")
    prompt_len = prompt_classes(max_model_len)[-1]
    timer = ForwardTimer(args.preset, device="cpu", dtype="float32", batch=args.batch,
                         prompt_len=prompt_len, seed=0, clock=time.thread_time)
    medians, mixes = [], []
    for decodes, prefills in windows(timer, args.seconds, args.window):
        ordered = sorted(decodes)
        median = statistics.median(ordered)
        mix = statistics.median(prefills) / median if prefills else float("nan")
        medians.append(median)
        mixes.append(mix)
        print(f"decode median {median * 1e3:.3f} ms  mean {statistics.fmean(ordered) * 1e3:.3f}"
              f" ms  p90 {ordered[int(0.9 * (len(ordered) - 1))] * 1e3:.3f} ms  n "
              f"{len(ordered)}  prefill/decode {mix:.2f}x  n {len(prefills)}")
    print(f"decode-step window medians {min(medians) * 1e3:.3f}-{max(medians) * 1e3:.3f} ms: "
          f"{max(medians) / min(medians):.2f}x between the fastest and slowest "
          f"{args.window:g}-s window ({args.preset}, {args.batch}-row decode step, CPU time; "
          "the steady clock rescales this)")
    print(f"prefill over decode step {min(mixes):.2f}-{max(mixes):.2f}x: "
          f"{max(mixes) / min(mixes):.2f}x between windows ({prompt_len}-token prefill; "
          "the host's mix of the two speeds, which no clock rescales)")


if __name__ == "__main__":
    main()
