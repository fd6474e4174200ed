"""How fast the bench's closed mix could possibly run on this core: the mix's arithmetic (fp32
FLOPs of every projection, the LM head and causal attention, no recompute) at the best GEMM
rate measured here on the preset's own projection shapes. An engine's closed tok/s divided by
this ceiling is the share of the core's matrix throughput it turns into tokens; a target above
the ceiling cannot be met at fp32 on this core by any schedule or kernel.

    taskset -c 0 python -m scripts.closed_ceiling [--preset small] [--rows 2048] \
        [--peak GFLOPS]

--peak: this core's fp32 multiply-add peak (scripts/fma_peak.c), for a second ceiling that no
library can pass.

The ceiling is generous: it charges attention and the decode steps (memory-bound) at the GEMM
rate, and norms, RoPE, sampling and scheduling nothing. Measure it beside the engines (same
minutes, same core): this VM's speed drifts by up to 2x over an evening.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engines.bench import draws
from engines.core.ops import Linear
from engines.models import PRESETS


def _head_dim(config: dict[str, int]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def _projections(config: dict[str, int]) -> list[tuple[int, int]]:
    """(in, out) of one layer's products: fused QKV, O, fused gate-up, down."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    dim = _head_dim(config)
    return [(hidden, (heads + 2 * kv_heads) * dim), (heads * dim, hidden),
            (hidden, 2 * inter), (inter, hidden)]


def mix_flops(preset: str, seed: int = 0) -> tuple[float, float, float, int]:
    """(projection, LM head, attention) FLOPs of the closed mix, and its output tokens: every
    prompt token and every output token but the last passes the stack once; each output token
    takes one row of the LM head; a token at position p attends to p + 1 keys."""
    config = PRESETS[preset].config
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    dim = _head_dim(config)
    per_token = 2 * sum(i * o for i, o in _projections(config)) * layers
    items = draws.closed_mix(vocab_size=config["vocab_size"], seed=seed)
    tokens = outputs = keys = 0
    for item in items:
        span = item.prompt_len + item.max_tokens - 1  # positions that pass the stack
        tokens += span
        outputs += item.max_tokens
        keys += span * (span + 1) // 2  # sum over positions p of p + 1
    attention = 4.0 * heads * dim * keys * layers  # q.k and p.v, 2 FLOPs a multiply-add
    head = 2.0 * config["hidden_size"] * config["vocab_size"] * outputs
    return float(per_token * tokens), head, attention, outputs


def _rate(fn: Callable[[], torch.Tensor], flops: float, calls: int) -> float:
    """GFLOP/s of `fn`: its mean over `calls` calls after a warm-up."""
    with torch.inference_mode():
        for _ in range(3):
            fn()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return flops * calls / (time.perf_counter() - start) / 1e9


def best_rate(preset: str, rows: int, calls: int) -> tuple[float, str]:
    """The best GFLOP/s of fp32 products on the preset's shapes at `rows` rows, MKL's sgemm
    (F.linear) or oneDNN on a packed weight (engines.core.ops.Linear), and which."""
    config = PRESETS[preset].config
    shapes = [*_projections(config), (config["hidden_size"], config["vocab_size"])]
    best, which = 0.0, ""
    gen = torch.Generator().manual_seed(0)
    for inp, out in shapes:
        x = torch.randn(rows, inp, generator=gen)
        weight = torch.randn(out, inp, generator=gen)
        packed = Linear(weight, None, pack=True)
        flops = 2.0 * rows * inp * out
        for name, fn in (("MKL sgemm", functools.partial(F.linear, x, weight)),
                         ("oneDNN packed", functools.partial(packed, x))):
            rate = _rate(fn, flops, calls)
            if rate > best:
                best, which = rate, f"{name}, {rows} x {inp} x {out}"
    return best, which


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--peak", type=float, help="the core's fp32 FMA peak, GFLOP/s")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    proj, head, attention, outputs = mix_flops(args.preset)
    total = proj + head + attention
    rate, which = best_rate(args.preset, args.rows, args.calls)
    seconds = total / (rate * 1e9)
    print(f"{args.preset} closed mix: {outputs} output tokens; {total / 1e9:.1f} GFLOP "
          f"(projections {proj / 1e9:.1f}, LM head {head / 1e9:.1f}, "
          f"attention {attention / 1e9:.1f})")
    print(f"best fp32 GEMM rate here, {args.threads} thread(s): {rate:.1f} GFLOP/s ({which})")
    print(f"ceiling: {seconds * 1e3:.0f} ms a run, {outputs / seconds:.1f} output tok/s")
    if args.peak:
        floor = total / (args.peak * 1e9)
        print(f"at the FMA peak ({args.peak:.1f} GFLOP/s): {floor * 1e3:.0f} ms a run, "
              f"{outputs / floor:.1f} output tok/s")


if __name__ == "__main__":
    main()
