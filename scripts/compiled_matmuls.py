"""The paged forward's step on the small preset three ways, in one process, interleaved, min of
N: compiled with the matmuls on oneDNN's packed weights (engines.core.ops.linear, now), compiled
with F.linear (before), and eager. A decode step (16 rows at position 150) and a mixed one (15
such rows and a 64-token prompt chunk). It looks inside our engine on purpose (the runner's
graph and its arguments); compiling small takes minutes on a loaded host.

    taskset -c 1 python scripts/compiled_matmuls.py [--repeats 40] [--preset small]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from engines.paged.forward import Row
from engines.paged.variants import equal_memory


def _decode(n: int, start: int, block_size: int) -> list[Row]:
    per = start // block_size + 1
    return [Row([5], start, list(range(i * per, (i + 1) * per)), True, seat=i) for i in range(n)]


def _mixed(n: int, start: int, chunk: int, block_size: int) -> list[Row]:
    rows = _decode(n, start, block_size)
    first = n * (start // block_size + 1)
    blocks = list(range(first, first + (start + chunk) // block_size + 1))
    return [*rows, Row([7] * chunk, start, blocks, True, seat=n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    engine = equal_memory(max_batch_size=8, model=args.preset, enable_prefix_caching=False,
                          compiled="step")
    runner: Any = engine.runner
    graph, packed_args = runner.compiled.graph, runner._graph_args
    ways: dict[str, tuple[Any, Any]] = {
        "compiled, packed": (graph, packed_args),
        "compiled, F.linear": (graph, (*packed_args[:-1], False)),
        "eager": (None, packed_args),
    }
    bs = runner.block_size

    def use(way: str) -> None:
        runner.compiled.graph, runner._graph_args = ways[way]

    for way in ways:  # compile both graph kinds (static, then dynamic shapes)
        use(way)
        start = time.perf_counter()
        for rows in (_decode(16, 150, bs), _decode(15, 140, bs), _mixed(15, 150, 64, bs),
                     _mixed(14, 140, 48, bs)):
            runner.forward(rows)
        print(f"{way}: warm-up {time.perf_counter() - start:.0f} s", flush=True)
    for name, rows in (("decode, 16 rows", _decode(16, 150, bs)),
                       ("mixed, 15 rows + a 64-token chunk", _mixed(15, 150, 64, bs))):
        best = dict.fromkeys(ways, float("inf"))
        out: dict[str, torch.Tensor] = {}
        for _ in range(args.repeats):
            for way in ways:
                use(way)
                start = time.perf_counter()
                out[way] = runner.forward(rows)
                best[way] = min(best[way], time.perf_counter() - start)
        same = all(torch.equal(o.argmax(-1), out["eager"].argmax(-1)) for o in out.values())
        times = ", ".join(f"{way} {1e3 * t:.2f} ms" for way, t in best.items())
        print(f"{name}: {times}; same argmax: {same}", flush=True)


if __name__ == "__main__":
    main()
