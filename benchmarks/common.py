"""What the asv suites share: the preset follows the hardware, sizes follow the preset.

Without a GPU: the CPU preset (tiny) with small draws, so `asv run --quick` stays in minutes.
On CUDA: qwen2.5-1.5b in bf16 with small probes. Every figure asv tracks carries repeated
samples (closed runs, replicas of the searches, admission steps), so `asv continuous` tests a
change for significance instead of comparing two numbers. BENCH_PRESET, BENCH_DEVICE,
BENCH_REQUESTS, BENCH_REPLICAS and BENCH_THREADS override; BENCH_SLOWDOWN plants a slowdown
(engines.bench.doubles.slowdown); BENCH_PROGRESS_S sets the most seconds between a setup's progress
lines (benchmarks.watch; default 20).
"""

from __future__ import annotations

import os

from benchmarks.watch import INTERVAL_S
from engines.bench.config import DEFAULT_ENGINES, Config

ENGINES = list(DEFAULT_ENGINES)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def progress_interval() -> float:
    value = os.environ.get("BENCH_PROGRESS_S")
    if not value:
        return INTERVAL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise ValueError(f"BENCH_PROGRESS_S: must be > 0 seconds, got {value!r}")
    return seconds


def config() -> Config:
    import torch

    # As the CLI: one CPU thread unless told otherwise (see engines.bench.cli --threads).
    torch.set_num_threads(_env_int("BENCH_THREADS") or 1)
    cfg = Config.for_hardware(quick=True, device=os.environ.get("BENCH_DEVICE"),
                              preset=os.environ.get("BENCH_PRESET"))
    if cfg.device == "cpu":
        # 7 closed runs and 3 replicas: enough samples for asv's statistics, in about a
        # minute and a half on 2 cores.
        cfg = cfg.with_(capacity_requests=48, iterations=3, goodput_iterations=2,
                        closed_requests=16, runs=7, admissions_per_class=6, replicas=3,
                        reference_requests=None)
    else:
        cfg = cfg.with_(replicas=2, runs=6)
    return cfg.with_(capacity_requests=_env_int("BENCH_REQUESTS") or cfg.capacity_requests,
                     replicas=_env_int("BENCH_REPLICAS") or cfg.replicas)
