"""Mixed-draw decode throughput as a share of a uniform batch of the same size.

The serving series' continuous-batching part (docs/references.md) measured a batch of 32
requests of mixed prompt lengths decoding at 12.5% of the speed of a uniform batch (158 vs
1,264 tok/s on an A10): a padded cache prices every row by the longest. Here, per engine:
n requests (prompt lengths drawn from the bench's classes, engines.bench.draws, with
the longest class at 3/4 of the context so that every row can go on decoding) are
prefilled, then W decode steps with all n rows are timed; the same for n requests whose
prompts all have the mixed draw's mean length (the same KV in all, so a cache whose cost
follows the sum of lengths decodes both alike) and for n at the shortest class.

All engines and workloads are stepped in turn (paired), each step timed on its own, so a
shared machine's slow spells land on every figure alike.

    python scripts/decode_mix.py [--preset tiny] [--batch 32] [--window 24] [--rounds 8]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from statistics import median

import numpy as np
import torch

from engines.bench.draws import mixed, prompt_classes
from engines.models import preset_max_model_len
from engines.paged.engine import PagedEngine
from engines.protocol import Engine, Request, SamplingParams
from engines.slot.continuous import ContinuousBatchEngine

Factory = Callable[[], Engine]


def _requests(lengths: list[int], context: int, vocab: int, seed: int) -> list[Request]:
    # Budgets fill the context: rows that finished prefill early decode while the last
    # prompts are prefilled, and must still be decoding through the timed window.
    rng = np.random.default_rng(seed)
    return [Request(tuple(int(t) for t in rng.integers(0, vocab, n)),
                    SamplingParams(max_tokens=context - n), request_id=f"r{i}")
            for i, n in enumerate(lengths)]


class Run:
    """One engine decoding one batch: prefilled on start, then timed a step at a time."""

    def __init__(self, make: Factory, requests: list[Request]) -> None:
        self.engine = make()
        self.n = len(requests)
        for r in requests:
            self.engine.add_request(r)
        started: set[object] = set()
        while len(started) < self.n:  # prefill: every request has its first token
            started.update(o.request_id for o in self.engine.step() if o.token_ids)
        self.times: list[float] = []

    def step(self) -> None:
        start = time.perf_counter()
        outputs = self.engine.step()
        self.times.append(time.perf_counter() - start)
        assert len(outputs) == self.n, "a row left the batch while timed"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--window", type=int, default=24, help="decode steps timed per round")
    parser.add_argument("--rounds", type=int, default=8, help="fresh batches")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    context = preset_max_model_len(args.preset) or 512
    budget = context // 4  # room to decode: the longest class is 3/4 of the context
    draw = mixed(args.batch, max_model_len=context, vocab_size=1024, seed=args.seed,
                 budget=budget)
    lengths = [item.prompt_len for item in draw]
    shapes = {"mixed": lengths, "uniform mean": [round(float(np.mean(lengths)))] * args.batch,
              "uniform shortest": [min(prompt_classes(context, budget))] * args.batch}
    engines: dict[str, Factory] = {
        "continuous": lambda: ContinuousBatchEngine(args.preset, max_batch_size=args.batch),
        "paged": lambda: PagedEngine(args.preset, max_batch_size=args.batch,
                                     max_num_batched_tokens=max(64, args.batch)),
    }
    times: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds + 1):  # round 0 warms up
        runs = {(e, s): Run(make, _requests(ls, context, 1024, args.seed + rnd))
                for e, make in engines.items() for s, ls in shapes.items()}
        for _ in range(args.window):
            for run in runs.values():
                run.step()
        if rnd:
            for key, run in runs.items():
                times.setdefault(key, []).extend(run.times)
    print(f"{args.preset}, batch {args.batch}, prompts {min(lengths)}-{max(lengths)} "
          f"(mean {np.mean(lengths):.0f}); decode tok/s = batch / median step time over "
          f"{args.rounds} rounds of {args.window} paired steps (a median resists a shared "
          "machine's slow spells better than a sum)")
    print(f"{'engine':12}" + "".join(f"{s:>18}" for s in shapes)
          + f"{'mixed / mean':>14}{'mixed / shortest':>18}")
    for e in engines:
        r = {s: args.batch / median(times[(e, s)]) for s in shapes}
        print(f"{e:12}" + "".join(f"{r[s]:18.0f}" for s in shapes)
              + f"{r['mixed'] / r['uniform mean']:14.1%}"
              + f"{r['mixed'] / r['uniform shortest']:18.1%}")


if __name__ == "__main__":
    main()
