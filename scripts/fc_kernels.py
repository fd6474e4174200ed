"""The small preset's four projections, 8 layers of distinct weights (as a step meets them: no
weight warm in cache), fp32 on one thread: our oneDNN product (engines.core.ops.Linear, packed
weights) and, where the `openvino` package imports (run it with .venv-openvino's python),
OpenVINO's CPU plugin on the same shapes. Prints ms and GFLOPS per row count.

    taskset -c 0 .venv-openvino/bin/python scripts/fc_kernels.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from engines.core.ops import Linear

# (out, in) of qkv, o, gate_up and down on the small preset (engines.models).
SHAPES = ((768, 512), (512, 512), (2816, 512), (512, 1408))
LAYERS = 8


def _timed(call: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        call()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats


def _ours(rows: int, repeats: int) -> float:
    layers = [[Linear(torch.randn(n, k) * 0.05, None) for n, k in SHAPES]
              for _ in range(LAYERS)]
    inputs = [torch.randn(rows, k) for _, k in SHAPES]

    def call() -> None:
        for layer in layers:
            for linear, x in zip(layer, inputs, strict=True):
                linear(x)

    return _timed(call, repeats)


def _openvino(rows: int, repeats: int) -> float | None:
    try:
        import openvino as ov
        import openvino.opset13 as ops
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    inputs = {k: ops.parameter([-1, k], np.float32, name=f"x{k}") for k in (512, 1408)}
    total = None
    for _ in range(LAYERS):
        for n, k in SHAPES:
            weight = ops.constant((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
            # Each product summed to a scalar, so that one output keeps every matmul alive.
            out = ops.reduce_sum(ops.matmul(inputs[k], weight, False, True), [0, 1], False)
            total = out if total is None else ops.add(total, out)
    model = ov.Model([total], list(inputs.values()))
    compiled = ov.Core().compile_model(model, "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1})
    request = compiled.create_infer_request()
    feed = {f"x{k}": rng.standard_normal((rows, k)).astype(np.float32) for k in (512, 1408)}
    return _timed(lambda: request.infer(feed), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="16,96,256")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for rows in (int(r) for r in args.rows.split(",")):
        flops = 2 * rows * sum(n * k for n, k in SHAPES) * LAYERS
        line = f"{rows:5d} rows:"
        for label, seconds in (("ours (oneDNN, packed)", _ours(rows, args.repeats)),
                               ("OpenVINO CPU f32", _openvino(rows, args.repeats))):
            if seconds is None:
                line += f"  {label}: not run (no openvino package here)"
            else:
                line += f"  {label} {1e3 * seconds:.2f} ms, {flops / seconds / 1e9:.0f} GFLOPS"
        print(line)


if __name__ == "__main__":
    main()
