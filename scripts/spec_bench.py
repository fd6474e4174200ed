"""Speculative decoding on vs off in the paged engine, paired: each round runs every
configuration once, in rotated order, in one process, on the same requests (fresh engines,
built before the rounds); per configuration and trace, the median over the rounds of output
tok/s, TTFT (arrival to first token; all requests arrive at once), ITL p50 (the gaps between
a request's token arrivals; a step emitting several tokens gives gaps of 0), the acceptance
rate (spec_accepted_tokens / spec_draft_tokens) and the speed ratio to "off" of the same
round. Two traces: "repetitive" (prompts of a repeated chunk, greedy: the model's output
loops, so drafts can hit) and "random" (random prompts, half of them sampled at temperature
0.8).

    PYTHONPATH=$PWD python scripts/spec_bench.py [--rounds 3] [--requests 8] [--budget 64]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

from engines.paged import PagedEngine
from engines.paged.speculate import Speculation
from engines.protocol import Request, SamplingParams

CONFIGS: dict[str, Callable[[], PagedEngine]] = {
    "off": lambda: PagedEngine(),
    "ngram k=3": lambda: PagedEngine(speculation=Speculation("ngram", num_tokens=3)),
    "draft k=3": lambda: PagedEngine(speculation=Speculation("draft", num_tokens=3)),
    "draft k=3 sampled": lambda: PagedEngine(
        speculation=Speculation("draft", num_tokens=3, sampled_drafts=True)),
}


def trace(kind: str, n: int, budget: int, shift: int) -> list[Request]:
    rng = random.Random(shift)
    out = []
    for i in range(n):
        if kind == "repetitive":
            chunk = [rng.randrange(1024) for _ in range(4)]
            prompt, params = chunk * 6, SamplingParams(max_tokens=budget)
        else:
            prompt = [rng.randrange(1024) for _ in range(24)]
            params = SamplingParams(max_tokens=budget, temperature=0.8 if i % 2 else 0.0,
                                    seed=i if i % 2 else None)
        out.append(Request(tuple(prompt), params, request_id=f"r{i}"))
    return out


def run(engine: PagedEngine, requests: list[Request]) -> dict[str, float]:
    counts0 = engine.exercised()
    start = time.perf_counter()
    for r in requests:
        engine.add_request(r)
    times: dict[str, list[float]] = defaultdict(list)
    tokens = 0
    while engine.has_work():
        outs = engine.step()
        now = time.perf_counter() - start
        for o in outs:
            times[o.request_id] += [now] * len(o.token_ids)
            tokens += len(o.token_ids)
    wall = time.perf_counter() - start
    counts = engine.exercised()
    drafted = counts.get("spec_draft_tokens", 0) - counts0.get("spec_draft_tokens", 0)
    accepted = counts.get("spec_accepted_tokens", 0) - counts0.get("spec_accepted_tokens", 0)
    gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:], strict=False)]
    return {"tok/s": tokens / wall, "ttft": statistics.median(t[0] for t in times.values()),
            "itl50": statistics.median(gaps), "accept": accepted / drafted if drafted else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--budget", type=int, default=64)
    args = ap.parse_args()
    engines = {k: make() for k, make in CONFIGS.items()}
    for e in engines.values():  # warm-up
        run(e, trace("random", 2, 4, 99))
    order = list(CONFIGS)
    for kind in ("repetitive", "random"):
        got: dict[str, list[dict[str, float]]] = defaultdict(list)
        for r in range(args.rounds):
            reqs = trace(kind, args.requests, args.budget, r)
            this = {k: run(engines[k], reqs) for k in order[r % 4:] + order[: r % 4]}
            for k, m in this.items():
                got[k].append({**m, "ratio": m["tok/s"] / this["off"]["tok/s"]})
        print(f"\ntrace {kind}: {args.requests} requests at once, budget {args.budget}, "
              f"{args.rounds} rounds; load average {os.getloadavg()}")
        print("| speculation | output tok/s | / off (range) | acceptance | TTFT ms | ITL p50 ms |")
        print("|---|---|---|---|---|---|")
        for k in order:
            med = {m: statistics.median(x[m] for x in got[k]) for m in got[k][0]}
            lo, hi = min(x["ratio"] for x in got[k]), max(x["ratio"] for x in got[k])
            acc = "-" if k == "off" else f"{med['accept']:.2f}"
            print(f"| {k} | {med['tok/s']:.0f} | {med['ratio']:.2f} ({lo:.2f}-{hi:.2f}) | "
                  f"{acc} | {1000 * med['ttft']:.0f} | {1000 * med['itl50']:.1f} |")


if __name__ == "__main__":
    main()
