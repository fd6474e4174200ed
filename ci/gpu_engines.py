"""Engine factories for ci/gpu-check.sh: the suite's --engine and --reference-engine take
zero-argument callables, and the GPU check runs the reference engines on CUDA in bf16.

GPU_CHECK_DEVICE (cuda), GPU_CHECK_DTYPE (bfloat16) and GPU_CHECK_SUITE_PRESET (tiny: the
suite's many small workloads test scheduling and the KV path, not the model's size) choose.
Importable as `ci.gpu_engines` from the repository root (engines.factories puts the working
directory on the path).
"""

from __future__ import annotations

import os
from typing import Any

from engines.protocol import Engine


def _kwargs() -> dict[str, Any]:
    return {"model": os.environ.get("GPU_CHECK_SUITE_PRESET", "tiny"),
            "device": os.environ.get("GPU_CHECK_DEVICE", "cuda"),
            "dtype": os.environ.get("GPU_CHECK_DTYPE", "bfloat16")}


def continuous() -> Engine:
    from engines.slot.continuous import ContinuousBatchEngine

    return ContinuousBatchEngine(**_kwargs())


def sequential() -> Engine:
    from engines.sequential import SequentialEngine

    return SequentialEngine(**_kwargs())


def paged() -> Engine:
    from engines.paged.engine import PagedEngine

    engine: Engine = PagedEngine(**_kwargs())
    return engine
