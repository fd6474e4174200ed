"""What the asv suites share: the preset follows the hardware, sizes follow the preset.

Without a GPU: the CPU preset (tiny) with small draws, so `asv run --quick` stays in minutes.
On CUDA: qwen2.5-1.5b in fp16 with the CLI's --quick draws. BENCH_PRESET, BENCH_DEVICE,
BENCH_REQUESTS and BENCH_THREADS override.
"""

from __future__ import annotations

import os

from engines.bench import comparison


def config() -> comparison.Config:
    import torch

    # As the CLI: one CPU thread unless told otherwise (see engines.bench.cli --threads).
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    device = os.environ.get("BENCH_DEVICE")
    cfg = comparison.Config.for_hardware(quick=True, device=device,
                                    preset=os.environ.get("BENCH_PRESET"))
    if cfg.device == "cpu":
        cfg = comparison.Config.for_hardware(
            quick=True, device="cpu", preset=cfg.preset, capacity_requests=48, iterations=2,
            closed_requests=16, disturbance_requests=32)
    requests = os.environ.get("BENCH_REQUESTS")
    if requests:
        fields = {f: getattr(cfg, f) for f in cfg.__slots__}
        cfg = comparison.Config(**{**fields, "capacity_requests": int(requests)})
    return cfg


ENGINES = ["static", "continuous"]
