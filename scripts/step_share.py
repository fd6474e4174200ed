"""Where a continuous step's time goes: the model forward vs everything else (scheduling,
sampling, bookkeeping). Wraps the engine's runner, so it looks inside our engine on purpose;
engines.bench stays protocol-only.

    python scripts/step_share.py [--preset tiny] [--requests 32] [--slots 8]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from engines.bench.draws import closed_mix
from engines.slot.continuous import ContinuousBatchEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    inside = [0.0]

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            out = fn(*a, **k)
            inside[0] += time.perf_counter() - start
            return out

        return wrapper

    shares, rates = [], []
    for run in range(args.runs + 2):  # 2 warm-up runs
        engine = ContinuousBatchEngine(args.preset, max_batch_size=args.slots)
        engine.runner.mixed = timed(engine.runner.mixed)  # type: ignore[method-assign]
        engine.runner.decode = timed(engine.runner.decode)  # type: ignore[method-assign]
        # The foundation issue's closed mix: prompts 4-256 tokens, budgets 1-64.
        items = closed_mix(vocab_size=engine.vocab_size, n=args.requests)
        for i, item in enumerate(items):
            engine.add_request(item.to_request(f"r{i}"))
        inside[0] = 0.0
        tokens, start = 0, time.perf_counter()
        while engine.has_work():
            tokens += sum(len(o.token_ids) for o in engine.step())
        total = time.perf_counter() - start
        if run >= 2:
            shares.append(1 - inside[0] / total)
            rates.append(tokens / total)
    print(
        f"{args.preset}: {np.median(rates):.0f} output tok/s; share of step time outside the "
        f"model forward: {100 * np.median(shares):.1f}% (median of {args.runs} runs)"
    )


if __name__ == "__main__":
    main()
