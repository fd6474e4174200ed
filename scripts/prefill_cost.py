"""What a prompt's prefill costs each engine of the issue-37 pair (scripts/pair_factories.py,
prefix caching off): N prompts of L random tokens, one output token each, added at once and
stepped to the end; the best of `--repeats` runs, per prompt token. The bench's `compare`
draws (engines.bench.draws.mixed) are ~90% prompt tokens, so this is what bounds their
capacity and goodput.

    taskset -c 0 .venv-openvino/bin/python -m scripts.prefill_cost --preset tiny \\
        --lengths 120,482 --prompts 1,6
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from engines.protocol import Request, SamplingParams
from scripts import pair_factories

ENGINES: dict[str, str] = {  # label -> pair_factories' name, with {preset}
    "openvino": "openvino_{preset}_nopc",
    "compiled256": "paged_{preset}_nopc_compiled_b256",
    "eager": "paged_{preset}_nopc",
}


def _cost(engine: Any, length: int, prompts: int, repeats: int, rng: np.random.Generator,
          vocab: int) -> float:
    best = float("inf")
    for rep in range(repeats + 1):  # the first run warms up (and compiles)
        for j in range(prompts):
            tokens = tuple(int(t) for t in rng.integers(0, vocab, length))
            engine.add_request(Request(tokens, SamplingParams(max_tokens=1),
                                       request_id=f"p{length}x{prompts}-{rep}-{j}"))
        start = time.perf_counter()
        while engine.has_work():
            engine.step()
        if rep:
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--lengths", default="120,482", help="prompt lengths, comma-separated")
    parser.add_argument("--prompts", default="1,6", help="prompts at once, comma-separated")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--engines", default=",".join(ENGINES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for label in args.engines.split(","):
        make: Callable[[], Any] = getattr(pair_factories,
                                          ENGINES[label].format(preset=args.preset))
        engine = make()
        rng = np.random.default_rng(0)
        for prompts in (int(p) for p in args.prompts.split(",")):
            for length in (int(n) for n in args.lengths.split(",")):
                best = _cost(engine, length, prompts, args.repeats, rng,
                             int(engine.vocab_size))
                print(f"{label:12} {prompts} x {length:4}-token prompt: {1e3 * best:7.2f} ms "
                      f"({1e6 * best / (prompts * length):5.2f} us a prompt token)")


if __name__ == "__main__":
    main()
