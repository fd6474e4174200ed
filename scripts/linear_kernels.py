"""F.linear (MKL sgemm) against oneDNN with the weight packed once
(torch.ops.mkldnn._linear_pointwise), on the preset shapes: what engines.core.ops.Linear's
PACK_ELEMENTS threshold rests on; with --rows, the tiny preset's four projections over a range
of row counts, what ROW_PACK_ELEMENTS rests on. One thread, fp32; us per call and GFLOP/s.

    python scripts/linear_kernels.py [--threads 1] [--rows]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

# (rows, in, out): the small preset's decode step, a chunked step and the closed mix's first
# prefill, then the tiny preset's.
SHAPES = ((16, 512, 768), (96, 512, 768), (96, 512, 2816), (96, 1408, 512),
          (1829, 512, 2816), (16, 512, 8192), (16, 64, 192), (96, 64, 256), (16, 64, 1024))
# --rows: the tiny preset's qkv, o, gate_up and down (in, out), at these many rows (a decode
# step's 16 up to the compare closed trace's first prefill, 3,327 tokens).
TINY = ((64, 128), (64, 64), (64, 256), (128, 64))
ROWS = (16, 64, 96, 128, 192, 256, 1024, 3327)


def _time(fn: Callable[[], torch.Tensor], calls: int) -> float:
    for _ in range(5):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rows", action="store_true", help="the tiny preset's projections "
                        "over a range of row counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shapes = [(rows, k, n) for k, n in TINY for rows in ROWS] if args.rows else SHAPES
    with torch.inference_mode():
        for rows, k, n in shapes:
            x, w = torch.randn(rows, k), torch.randn(n, k)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
            mkl = _time(functools.partial(F.linear, x, w), args.calls)
            dnn = _time(functools.partial(torch.ops.mkldnn._linear_pointwise, x, packed, None,
                                          "none", [], ""), args.calls)
            flop = 2 * rows * k * n
            print(f"{rows:5} x {k:4} x {n:5} ({k * n:7} weights): F.linear {1e6 * mkl:8.1f} us "
                  f"({flop / mkl / 1e9:5.1f} GF/s), oneDNN packed {1e6 * dnn:8.1f} us "
                  f"({flop / dnn / 1e9:5.1f} GF/s), packed / F.linear {dnn / mkl:.2f}")


if __name__ == "__main__":
    main()
