"""The closed mix on the compiled paged engine, its forward time split into compiled-graph steps
and eager steps: for before/after comparisons of engines/paged/compiled.py, run from each
checkout in turn, alternating (the host's speed drifts; only pairs run back to back compare).

    taskset -c 0 python scripts/graph_step_times.py --preset tiny --budget 256 --runs 30
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import torch

from engines.bench.draws import closed_mix
from engines.paged import forward as paged_forward
from engines.paged.variants import equal_memory


def _median_ms(values: Sequence[float]) -> float:
    return 1e3 * sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--budget", type=int, default=256, help="max_num_batched_tokens")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps: list[tuple[bool, float]] = []
    original = paged_forward.PagedForward.forward

    def timed(self: Any, rows: Any) -> torch.Tensor:
        before = self.graph_steps
        start = time.perf_counter()
        out: torch.Tensor = original(self, rows)
        steps.append((self.graph_steps > before, time.perf_counter() - start))
        return out

    paged_forward.PagedForward.forward = timed  # type: ignore[method-assign]
    runs: list[float] = []
    graph: list[float] = []
    eager: list[float] = []
    for run in range(args.runs + 2):  # two warm-ups: the graphs compile in the first
        steps.clear()
        engine = equal_memory(max_batch_size=8, model=args.preset, compiled="step",
                              enable_prefix_caching=False, max_num_batched_tokens=args.budget)
        for i, item in enumerate(closed_mix(vocab_size=engine.vocab_size)):
            engine.add_request(item.to_request(f"r{i}"))
        start = time.perf_counter()
        while engine.has_work():
            engine.step()
        if run >= 2:
            runs.append(time.perf_counter() - start)
            graph.append(sum(t for compiled, t in steps if compiled))
            eager.append(sum(t for compiled, t in steps if not compiled))
    print(f"{args.preset}, budget {args.budget}, {args.runs} runs (medians): run "
          f"{_median_ms(runs):.1f} ms (min {1e3 * min(runs):.1f}), graph steps "
          f"{_median_ms(graph):.1f} ms, eager steps {_median_ms(eager):.1f} ms")


if __name__ == "__main__":
    main()
