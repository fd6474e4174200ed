"""The paged engine's compiled decode graphs (engines.paged.compiled, mode "graphs": each
decode batch bucket captured as a CUDA graph and replayed) against its eager forward, for
ci/gpu-check.sh: the same tokens on one workload, graphs that really ran, and the decode
step's time at each bucket, eager over graphs.

    python ci/gpu_paged_graphs.py           (GPU_CHECK_DEVICE=cpu: the same on a CPU, where
                                             the graphs are inductor's, not CUDA graphs)

fp32, so that eager and graphed tokens can be compared exactly (in bf16 the two attentions'
orders of summation differ by more than a near-tie). Exits 1 on any difference.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

from engines.paged.engine import PagedEngine
from engines.protocol import Request, SamplingParams
from tests.helpers import make_prompts

DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
PRESET = os.environ.get("GPU_GRAPHS_PRESET", "small" if DEVICE == "cuda" else "tiny")
BUCKETS = (1, 4, 8)
SEATS = 8  # buckets 1, 2, 4, 8: four graphs to capture, within the part's time cap


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _engine(compiled: str) -> PagedEngine:
    return PagedEngine(PRESET, device=DEVICE, dtype=torch.float32, compiled=compiled,
                       max_batch_size=SEATS)


def _requests(tag: str) -> list[Request]:
    prompts = make_prompts([3, 40, 17, 120, 64, 9, 200, 33, 77, 5], seed=7)
    return [Request(p, SamplingParams(max_tokens=24, temperature=0.7 * (i % 3 == 0), seed=i),
                    request_id=f"{tag}{i}") for i, p in enumerate(prompts)]


def _tokens(engine: PagedEngine, tag: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for request in _requests(tag):
        engine.add_request(request)
    while engine.has_work():
        for o in engine.step():
            out.setdefault(str(o.request_id)[len(tag):], []).extend(o.token_ids)
    return out


def _decode_step_s(engine: PagedEngine, rows: int, steps: int = 30) -> float:
    """Median time of a decode-only step of `rows` rows."""
    for i, p in enumerate(make_prompts([48] * rows, seed=rows)):
        engine.add_request(Request(p, SamplingParams(max_tokens=steps + 8),
                                   request_id=f"t{rows}-{i}"))
    while any(seq.num_pending > 1 for seq in engine.running) or engine.waiting:
        engine.step()
    for _ in range(3):  # a bucket's first replay captures (or compiles) it: not timed
        engine.step()
    times = []
    for _ in range(steps):
        _sync()
        start = time.perf_counter()
        engine.step()
        _sync()
        times.append(time.perf_counter() - start)
    while engine.has_work():
        engine.step()
    return statistics.median(times)


def main() -> int:
    eager, graphs = _engine("off"), _engine("graphs")
    want, got = _tokens(eager, "a"), _tokens(graphs, "a")
    compiled = graphs.exercised()["compiled_steps"]
    print(f"{PRESET} fp32 on {DEVICE}: {compiled} decode steps ran as graphs; tokens "
          f"{'identical' if got == want else 'DIFFER'} on {len(want)} requests")
    if got != want or not compiled:
        return 1
    for rows in BUCKETS:
        e, g = _decode_step_s(eager, rows), _decode_step_s(graphs, rows)
        print(f"decode step, {rows:2} rows: eager {1e3 * e:.2f} ms, graphs {1e3 * g:.2f} ms, "
              f"eager / graphs {e / g:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
