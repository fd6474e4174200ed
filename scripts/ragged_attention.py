"""How to run decode attention over a block KV pool on this CPU: the candidates, timed.

Each decode row attends over its own cached tokens, which sit in blocks scattered over the
pool. The candidates, one attention layer each, fp32, one thread, including the gathers:

- padded:  every row's tokens gathered into [n, longest] (past a row's end: masked), one
           masked SDPA; the slot cache's way, so its cost is n x the longest row.
- per-row: one SDPA per row over its own gathered tokens: the sum of lengths, plus a fixed
           price per row.
- buckets: what engines.paged.attention does: rows sorted by length, cut into groups whose
           padding stays under PAD_ELEMENTS, one masked SDPA per group.
- segment: all rows' tokens packed end to end, scores by one gathered dot product, a
           segment softmax by index_reduce / index_add: the sum of lengths in a fixed
           number of ops whatever n.

    python scripts/ragged_attention.py [--repeats 200] [--pad-sweep]

Prints microseconds per layer call for mixed lengths (the bench's prompt classes at the tiny
preset's context, round robin) and for a uniform batch of the same total length. With
--pad-sweep: the buckets candidate at several padding allowances (tokens), which is where
engines.paged.attention.PAD_ELEMENTS comes from.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engines.paged.attention import PAD_ELEMENTS, attend, causal_table, plan_attention

Fn = Callable[[], torch.Tensor]
BLOCK = 16


@dataclass(frozen=True)
class Span:
    tokens: Sequence[int]
    start: int
    blocks: Sequence[int]


def _segment(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor,
             row_of_key: torch.Tensor, scale: float) -> torch.Tensor:
    n, heads, dim = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    k, v = keys.index_select(0, slots), values.index_select(0, slots)
    qg = q.view(n, kv_heads, group, dim).index_select(0, row_of_key)
    scores = torch.matmul(qg, k.unsqueeze(-1)).squeeze(-1) * scale  # [T, Hkv, g]
    top = scores.new_full((n, kv_heads, group), float("-inf"))
    top.index_reduce_(0, row_of_key, scores, "amax")
    weights = (scores - top.index_select(0, row_of_key)).exp_()
    total = scores.new_zeros((n, kv_heads, group)).index_add_(0, row_of_key, weights)
    out = q.new_zeros((n, kv_heads, group, dim))
    out.index_add_(0, row_of_key, torch.matmul(weights.unsqueeze(-1), v.unsqueeze(-2)))
    return (out / total.unsqueeze(-1)).view(n, heads, dim)


def candidates(lengths: list[int], kv_heads: int, heads: int, dim: int,
               pad: int | None = None) -> dict[str, Fn]:
    gen = torch.Generator().manual_seed(0)
    n, scale = len(lengths), dim**-0.5
    nblocks = sum(-(-x // BLOCK) for x in lengths)
    perm = torch.randperm(nblocks, generator=gen).tolist()  # blocks scattered over the pool
    keys = torch.randn(nblocks * BLOCK, kv_heads, dim, generator=gen)
    values = torch.randn(nblocks * BLOCK, kv_heads, dim, generator=gen)
    tables, used = [], 0
    for x in lengths:
        tables.append(perm[used : used + -(-x // BLOCK)])
        used += len(tables[-1])
    rows_slots = [torch.tensor([t[p // BLOCK] * BLOCK + p % BLOCK for p in range(x)])
                  for t, x in zip(tables, lengths, strict=True)]
    q = torch.randn(n, heads, dim, generator=gen)
    width = max(lengths)
    padded = torch.zeros(n, width, dtype=torch.long)
    for i, s in enumerate(rows_slots):
        padded[i, : s.numel()] = s
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    packed = torch.cat(rows_slots)
    row_of_key = torch.repeat_interleave(torch.arange(n), torch.tensor(lengths))
    spans = [Span([1], x - 1, t) for x, t in zip(lengths, tables, strict=True)]
    pad = PAD_ELEMENTS // (kv_heads * dim) if pad is None else pad
    plan = plan_attention(spans, BLOCK, pad, causal_table(width, torch.device("cpu"),
                                                          torch.float32))
    inverse = torch.argsort(torch.tensor(plan.order))
    k_new = torch.empty(n, kv_heads, dim)
    key_blocks = keys.view(nblocks, BLOCK, kv_heads, dim)
    value_blocks = values.view(nblocks, BLOCK, kv_heads, dim)

    def pad_all() -> torch.Tensor:
        idx = padded.flatten()
        k = keys.index_select(0, idx).view(n, width, kv_heads, dim).transpose(1, 2)
        v = values.index_select(0, idx).view(n, width, kv_heads, dim).transpose(1, 2)
        return F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=mask, scale=scale,
                                              enable_gqa=True)[:, :, 0]

    def per_row() -> torch.Tensor:
        out = []
        for i, idx in enumerate(rows_slots):
            k = keys.index_select(0, idx).transpose(0, 1)[None]
            v = values.index_select(0, idx).transpose(0, 1)[None]
            out.append(F.scaled_dot_product_attention(q[i : i + 1, :, None], k, v, scale=scale,
                                                      enable_gqa=True)[:, :, 0])
        return torch.cat(out)

    def buckets() -> torch.Tensor:
        qp = q[plan.order]  # the plan's packed order, [n, heads, D]
        return attend(plan, qp, k_new, k_new, key_blocks, value_blocks, scale)[inverse]

    def segment() -> torch.Tensor:
        return _segment(q, keys, values, packed, row_of_key, scale)

    return {"padded": pad_all, "per-row": per_row, "buckets": buckets, "segment": segment}


def _time(fn: Fn, repeats: int) -> float:
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(3):  # best of 3 rounds: the machine is shared
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--pad-sweep", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="index_reduce")
    classes = [15, 30, 60, 120, 482]  # engines.bench.draws.prompt_classes(512)
    shapes = {"tiny (1 kv head, 2 heads, d 32)": (1, 2, 32),
              "small (2 kv heads, 8 heads, d 64)": (2, 8, 64)}
    names = ("padded", "per-row", "buckets", "segment")
    if args.pad_sweep:
        pads = (0, 64, 128, 256, 512, 1024, 2048, 10**6)
        print(f"{'shape':34} {'n':>3} {'lengths':>12} " + " ".join(f"{p:>8}" for p in pads)
              + "   (buckets, us per layer call, by padding allowed in tokens)")
    else:
        print(f"{'shape':34} {'n':>3} {'lengths':>12} " + " ".join(f"{c:>8}" for c in names)
              + "   (us per layer call)")
    with torch.inference_mode():
        for shape, (kv_heads, heads, dim) in shapes.items():
            for n in (8, 32):
                mixed = [classes[i % len(classes)] + 1 for i in range(n)]
                mean = round(sum(mixed) / n)
                for label, lengths in (("mixed", mixed), (f"uniform {mean}", [mean] * n)):
                    if args.pad_sweep:
                        cells = [f"{_time(candidates(lengths, kv_heads, heads, dim, p)['buckets'], args.repeats):8.0f}"  # noqa: E501
                                 for p in pads]
                        print(f"{shape:34} {n:>3} {label:>12} " + " ".join(cells))
                        continue
                    fns = candidates(lengths, kv_heads, heads, dim)
                    ref = fns["padded"]()
                    cells = []
                    for name in names:
                        torch.testing.assert_close(fns[name](), ref, atol=1e-5, rtol=1e-4)
                        cells.append(f"{_time(fns[name], args.repeats):8.0f}")
                    print(f"{shape:34} {n:>3} {label:>12} " + " ".join(cells))


if __name__ == "__main__":
    main()
