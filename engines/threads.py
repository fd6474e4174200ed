"""How many CPU threads an engine computes with: the convention between the bench and the
engines built in its process.

`batching-bench --threads N` sets torch's threads and exports BATCHING_ENGINES_THREADS=N
before it builds the engines; a library adapter (OpenVINO GenAI, CTranslate2) then gives its
library N threads instead of the library's own default, so that a comparison runs at equal
cores. An engine states the count it uses as its declared `compute_threads`
(engines.bench.describe prints it beside every engine, and summary.csv records it).
"""

from __future__ import annotations

import os

THREADS_ENV = "BATCHING_ENGINES_THREADS"


def available_cores() -> int:
    """The cores this process may run on (taskset's), or the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def engine_threads() -> int:
    """The threads an engine built now should compute with: BATCHING_ENGINES_THREADS where
    set (a bad value is an error naming it), else every available core."""
    value = os.environ.get(THREADS_ENV)
    if value is None:
        return available_cores()
    try:
        threads = int(value)
    except ValueError:
        raise ValueError(f"{THREADS_ENV}: expected a positive integer, got {value!r}") from None
    if threads < 1:
        raise ValueError(f"{THREADS_ENV}: expected a positive integer, got {value!r}")
    return threads


def torch_threads(device: object) -> int | None:
    """The compute threads of an engine running torch in this process: torch's intra-op
    threads on a CPU; None on an accelerator (its CPU threads do not compute the steps)."""
    import torch

    return torch.get_num_threads() if torch.device(device).type == "cpu" else None  # type: ignore[call-overload]
