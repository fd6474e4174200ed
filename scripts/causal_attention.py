"""A prompt's causal self-attention on the CPU, the ways PyTorch offers and our native kernel
(engines.core.native), at the tiny preset's heads (2 query heads over 1 KV head of 32) or the
small one's (8 over 2, of 64): what a prefill's attention costs our engines a layer. One
thread, fp32, best of `--repeats` calls; every variant is checked against the first.

    taskset -c 0 python scripts/causal_attention.py [--lengths 120,240,482] [--heads 8,2,64]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from engines.core import native

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _full_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    n = q.shape[2]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _matmuls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    n = q.shape[2]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.matmul(q[0], k[0].transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.matmul(scores.softmax(-1), v[0])[None]


def _by_query_blocks(block: int) -> Attention:
    """Queries in blocks, each over the keys up to its last: skips the causal upper half
    above the diagonal blocks, one SDPA a block."""
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n, parts = q.shape[2], []
        for start in range(0, n, block):
            end = min(start + block, n)
            mask = torch.ones(end - start, end, dtype=torch.bool).tril(start)
            parts.append(F.scaled_dot_product_attention(
                q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=mask,
                enable_gqa=True))
        return torch.cat(parts, 2)
    return attend


def _native(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = native.causal_attention(q[0].transpose(0, 1), native.dense(k[0].transpose(0, 1)),
                                  native.dense(v[0].transpose(0, 1)), 0, q.shape[-1] ** -0.5)
    return out.transpose(0, 1)[None]


def _flex() -> Attention:
    compiled = torch.compile(flex_attention, dynamic=False)
    masks: dict[int, BlockMask] = {}

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = q.shape[2]
        if n not in masks:
            masks[n] = create_block_mask(lambda b, h, i, j: i >= j, None, None, n, n,
                                         device="cpu")
        out: torch.Tensor = compiled(q, k, v, block_mask=masks[n], enable_gqa=True)
        return out
    return attend


def _best_ms(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lengths", default="120,240,482")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--heads", default="2,1,32", help="query heads, KV heads, head_dim")
    args = parser.parse_args()
    heads, kv_heads, dim = (int(x) for x in args.heads.split(","))
    torch.set_num_threads(1)
    q_device = torch.device("cpu")
    variants: dict[str, Attention] = {
        "flash, is_causal": _flash, "flash, full mask": _full_mask,
        "matmul-softmax-matmul": _matmuls, "query blocks of 128": _by_query_blocks(128),
        "query blocks of 64": _by_query_blocks(64), "flex_attention (compiled)": _flex(),
    }
    if native.available():
        variants["native kernel"] = _native
    else:
        print(f"native kernel not measured: {native.describe(torch.float32, q_device, dim)}")
    gen = torch.Generator().manual_seed(0)
    for n in (int(length) for length in args.lengths.split(",")):
        q = torch.randn(1, heads, n, dim, generator=gen)
        k, v = (torch.randn(1, kv_heads, n, dim, generator=gen) for _ in range(2))
        expected = _flash(q, k, v)
        row = []
        for name, attend in variants.items():
            torch.testing.assert_close(attend(q, k, v), expected)
            call = functools.partial(attend, q, k, v)
            row.append(f"{name} {_best_ms(call, args.repeats):.3f}")
        print(f"{n:4} tokens (ms a layer): " + ", ".join(row))


if __name__ == "__main__":
    main()
