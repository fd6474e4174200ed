"""Paged engine throughput with 1, 4 and 8 LoRA adapters in one batch against base, paired:
each round runs every configuration once, in rotated order, on the same requests; a ratio is
a configuration's tok/s over the base run of the same round, and the table gives each
ratio's median and range over the rounds.

    python scripts/lora_bench.py [--preset tiny] [--rounds 5] [--requests 16]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import replace

from engines.loras import zoo_loras
from engines.paged import PagedEngine
from engines.protocol import Request, SamplingParams


def _requests(n: int, names: list[str | None], prompt: int, budget: int) -> list[Request]:
    rng = random.Random(0)
    return [Request(tuple(rng.randrange(1024) for _ in range(prompt)),
                    SamplingParams(max_tokens=budget), request_id=f"r{i}",
                    lora=names[i % len(names)]) for i in range(n)]


def _tok_s(engine: PagedEngine, requests: list[Request]) -> float:
    for r in requests:
        engine.add_request(r)
    tokens = 0
    start = time.perf_counter()
    while engine.has_work():
        tokens += sum(len(o.token_ids) for o in engine.step())
    return tokens / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--budget", type=int, default=32)
    args = ap.parse_args()
    adapters = zoo_loras(args.preset, 8)
    names: list[str | None] = list(adapters)
    configs: dict[str, list[str | None]] = {"base": [None], "1 adapter": names[:1],
                                            "4 adapters": names[:4], "8 adapters": names}
    engine = PagedEngine(args.preset, loras=adapters, max_batch_size=args.requests)
    _tok_s(engine, _requests(args.requests, names, args.prompt, 4))  # warm-up
    ratios: dict[str, list[float]] = {k: [] for k in configs if k != "base"}
    base_runs: list[float] = []
    order = list(configs)
    for r in range(args.rounds):
        got = {}
        for k in order[r % len(order):] + order[: r % len(order)]:
            # Distinct prompts per run: no prefix-cache hit from an earlier run.
            reqs = _requests(args.requests, configs[k], args.prompt, args.budget)
            reqs = [replace(q, prompt_token_ids=tuple((t + 7 * r + len(k)) % 1024
                                                      for t in q.prompt_token_ids))
                    for q in reqs]
            got[k] = _tok_s(engine, reqs)
        base_runs.append(got["base"])
        for k in ratios:
            ratios[k].append(got[k] / got["base"])
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}; preset {args.preset}, "
          f"{args.requests} requests in one batch, prompt {args.prompt}, budget {args.budget}, "
          f"{args.rounds} rounds")
    print(f"base: median {statistics.median(base_runs):.0f} tok/s")
    print("| adapters in the batch | tok/s / base, median | range |")
    print("|---|---|---|")
    for k, v in ratios.items():
        print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f}-{max(v):.2f} |")


if __name__ == "__main__":
    main()
