"""A decode step's cost, paged vs continuous, on the same rows: one row (almost all of it the
fixed cost of a step) and uniform batches. Both engines are stepped in turn (paired), each
step timed on its own, fresh batches every round; medians.

    python scripts/step_cost.py [--preset tiny] [--rounds 6] [--steps 40]
"""

from __future__ import annotations

import argparse
import gc
import time
from statistics import median

import numpy as np
import torch

from engines.paged.engine import PagedEngine
from engines.protocol import Engine, Request, SamplingParams
from engines.slot.continuous import ContinuousBatchEngine

SHAPES = ((1, 16), (8, 100), (32, 114))  # (rows, prompt tokens)


def _decoding(engine: Engine, rows: int, prompt: int, rng: np.random.Generator) -> Engine:
    for i in range(rows):
        tokens = tuple(int(t) for t in rng.integers(0, 1024, prompt))
        engine.add_request(Request(tokens, SamplingParams(max_tokens=200), request_id=i))
    started: set[object] = set()
    while len(started) < rows:  # every row has its first token: from now on all decode
        started.update(o.request_id for o in engine.step() if o.token_ids)
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    gc.disable()
    for rows, prompt in SHAPES:
        times: dict[str, list[float]] = {"continuous": [], "paged": []}
        for _ in range(args.rounds):
            engines = {
                "continuous": _decoding(ContinuousBatchEngine(args.preset, max_batch_size=rows),
                                        rows, prompt, rng),
                "paged": _decoding(PagedEngine(args.preset, max_batch_size=rows,
                                               max_num_batched_tokens=max(rows, 64)),
                                   rows, prompt, rng),
            }
            for _ in range(args.steps):
                for name, engine in engines.items():
                    start = time.perf_counter()
                    engine.step()
                    times[name].append(time.perf_counter() - start)
        cont, paged = median(times["continuous"]), median(times["paged"])
        print(f"{rows:3} rows at {prompt:3} tokens: continuous {1e6 * cont:5.0f} us, "
              f"paged {1e6 * paged:5.0f} us, paged / continuous {paged / cont:.2f}")


if __name__ == "__main__":
    main()
