"""On CUDA, every attention call of the continuous engine runs a fused SDPA kernel, and the
decode call's fold is timed against the math fallback it replaces (ci/gpu-check.sh).

With the math backend disabled, SDPA raises when no fused kernel takes a call, so serving a
mixed batch to the end (prefill, decode, admission into a running batch, compaction) under
that restriction proves none fell back.
"""

from __future__ import annotations

import os
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from engines.protocol import Request, SamplingParams
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.forward import decode_attention

FUSED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]


def serve_fused(preset: str, dtype: str) -> int:
    engine = ContinuousBatchEngine(preset, device="cuda", dtype=dtype, max_batch_size=8)
    gen = torch.Generator().manual_seed(0)
    steps = 0
    with sdpa_kernel(FUSED):
        for i, length in enumerate([7, 300, 33, 1024, 5, 64, 129, 2000, 17, 900, 45, 12]):
            prompt = torch.randint(0, engine.vocab_size, (length,), generator=gen).tolist()
            engine.add_request(Request(tuple(prompt), SamplingParams(max_tokens=8 + 5 * i),
                                       request_id=f"r{i}"))
        while engine.has_work():
            engine.step()
            steps += 1
    torch.cuda.synchronize()
    return steps


def time_decode(fold: bool, dtype: torch.dtype, reps: int = 50) -> float:
    """ms per decode attention call: 8 rows, qwen2.5-1.5b's heads, a 4352-token cache."""
    n, heads, kv_heads, dim, width = 8, 12, 2, 128, 4352
    q = torch.randn(n, heads, 1, dim, device="cuda", dtype=dtype)
    cache = torch.randn(2, n, kv_heads, width, dim, device="cuda", dtype=dtype)
    lengths = torch.randint(1, width, (n,), device="cuda")
    mask = (torch.arange(width, device="cuda")[None, :] <= lengths[:, None])[:, None, None, :]
    for _ in range(5):
        decode_attention(q, cache[0], cache[1], mask, dim**-0.5, fold_groups=fold)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        decode_attention(q, cache[0], cache[1], mask, dim**-0.5, fold_groups=fold)
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / reps


def main() -> None:
    preset = os.environ.get("GPU_CHECK_ATTN_PRESET", "qwen2.5-0.5b")
    dtype = os.environ.get("GPU_CHECK_DTYPE", "bfloat16")
    steps = serve_fused(preset, dtype)
    print(f"fused attention: {preset} {dtype}: 12 requests served in {steps} steps with the "
          "math SDPA backend disabled")
    torch_dtype = getattr(torch, dtype)
    folded, unfolded = time_decode(True, torch_dtype), time_decode(False, torch_dtype)
    print(f"decode attention call: folded (fused) {folded:.3f} ms, enable_gqa with a mask "
          f"{unfolded:.3f} ms, {unfolded / folded:.2f}x")


if __name__ == "__main__":
    main()
