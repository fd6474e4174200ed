"""Measure what batching moves at reduced precision, to hold --parity=auto's tolerances
(engines.testing.precision) to our engines: each factory serves greedy requests in one burst
and each alone, then the reference alone; prints the logprob margin of every first
divergence (batched vs alone, alone vs the reference), the tolerance auto derives from the
declared dtype, and the top logits' range (the scale the tolerance's ulps are taken at).

    PYTHONPATH=. python scripts/precision_margins.py engines.sequential:sequential_bf16 \\
        engines.slot.continuous:continuous_bf16 engines.paged.variants:bf16

The first spec is the reference; the rest are measured against it. Seeds 1 and 2 of 16
prompts of 3 to 70 tokens, 24 tokens each, 5 top logprobs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engines.factories import load_factory
from engines.protocol import Engine, Request, SamplingParams, capabilities_of
from engines.testing.oracle import first_divergence
from engines.testing.precision import tolerance_for

LENGTHS = [3, 41, 17, 58, 9, 30, 12, 50, 25, 6, 44, 20, 70, 33, 15, 61]
Served = tuple[dict[Any, list[int]], dict[Any, list[dict[int, float]]]]


def prompts(seed: int, vocab: int) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(0, vocab, (n,), generator=gen).tolist()) for n in LENGTHS]


def serve(engine: Engine, requests: Sequence[Request]) -> Served:
    tokens: dict[Any, list[int]] = {r.request_id: [] for r in requests}
    tops: dict[Any, list[dict[int, float]]] = {r.request_id: [] for r in requests}
    for request in requests:
        engine.add_request(request)
    while engine.has_work():
        for out in engine.step():
            tokens[out.request_id].extend(out.token_ids)
            tops[out.request_id].extend(dict(t) for t in out.top_logprobs or ())
    return tokens, tops


def margins(a: Served, b: Served) -> list[float | None]:
    found = []
    for rid, tokens in a[0].items():
        d = first_divergence(tokens, b[0][rid], observed_top=a[1][rid], expected_top=b[1][rid],
                             mode="tie-aware", tolerance=float("inf"))
        if d is not None:
            found.append(None if d.margin is None else round(d.margin, 4))
    return found


def top_logits(engine: Any, seed: int) -> tuple[float, float]:
    """The smallest and largest top logit over every position of the seed's prompts."""
    tops = []
    with torch.no_grad():
        for p in prompts(seed, int(engine.vocab_size)):
            logits = engine.model(torch.tensor([p], device=engine.device)).logits[0].float()
            tops.append(logits.max(-1).values)
    every = torch.cat(tops)
    return float(every.min()), float(every.max())


def main(specs: list[str]) -> None:
    torch.set_num_threads(1)
    reference: Callable[[], Engine] = load_factory(specs[0], option="reference")
    for spec in specs[1:]:
        make = load_factory(spec, option="engine")
        engine = make()
        dtype = capabilities_of(engine).kv_dtype
        print(f"{spec}: declares {capabilities_of(engine).dtype}, KV {dtype}; --parity=auto "
              f"tolerance {tolerance_for(dtype):g}")
        for seed in (1, 2):
            requests = [Request(p, SamplingParams(max_tokens=24, logprobs=5), request_id=i)
                        for i, p in enumerate(prompts(seed, int(engine.vocab_size)))]
            batched = serve(make(), requests)
            alone = [serve(make(), [r]) for r in requests]
            ref = [serve(reference(), [r]) for r in requests]
            merged = ({k: v for a in alone for k, v in a[0].items()},
                      {k: v for a in alone for k, v in a[1].items()})
            refs = ({k: v for a in ref for k, v in a[0].items()},
                    {k: v for a in ref for k, v in a[1].items()})
            low, high = top_logits(engine, seed) if hasattr(engine, "model") else (0.0, 0.0)
            print(f"  seed {seed}: {len(requests)} requests; batched vs alone margins "
                  f"{margins(batched, merged)}; alone vs the reference {margins(merged, refs)}; "
                  f"top logits {low:.2f} to {high:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
