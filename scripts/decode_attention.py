"""The compiled step's decode attention two ways, one layer at a time: inductor's loops
(engines.paged.compiled._attention, compiled on its own) and the native kernel's op
(engines.core.native_ops.decode_attention), at the tiny preset's heads over a scattered pool
of 16-token blocks. One thread, fp32, mean of `--repeats` calls after a warm-up; the two are
checked against each other first.

    taskset -c 0 python -m scripts.decode_attention [--shapes 16x320,16x160,8x480]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import torch

from engines.core import native_ops
from engines.paged.compiled import _attention

HEADS, KV_HEADS, DIM, BLOCK, POOL = 2, 1, 32, 16, 300


def _mean_us(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return 1e6 * (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shapes", default="16x320,16x160,8x480", help="ROWSxWIDTH, ...")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(POOL, KV_HEADS, DIM, BLOCK, generator=gen)
    values = torch.randn(POOL, BLOCK, KV_HEADS, DIM, generator=gen)
    compiled = torch.compile(_attention, dynamic=True)
    op = torch.ops.batching_engines.decode_attention
    assert native_ops.decodes(HEADS // KV_HEADS, BLOCK)
    for shape in args.shapes.split(","):
        rows, width = (int(x) for x in shape.split("x"))
        tables = torch.stack([torch.randperm(POOL, generator=gen)[: width // BLOCK]
                              for _ in range(rows)])
        positions = torch.randint(width // 2, width, (rows,), generator=gen)
        q = torch.randn(rows, HEADS, DIM, generator=gen)
        call = (q, positions, tables, keys, values, DIM**-0.5)
        torch.testing.assert_close(op(*call), compiled(*call))
        ours = _mean_us(functools.partial(op, *call), args.repeats)
        theirs = _mean_us(functools.partial(compiled, *call), args.repeats)
        print(f"{rows:3} rows x {width:4} keys: inductor {theirs:6.1f} us, "
              f"native op {ours:6.1f} us")


if __name__ == "__main__":
    main()
