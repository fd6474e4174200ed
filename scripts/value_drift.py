"""Measure how far one engine's logprob values are from exact, to ground each side's part of
the value tolerance against the reference (engines.testing.precision.value_part): the model at
each reduced dtype against the same model in float32 (the closest to exact values we have),
over every position of long random prompts, the top 5 logprobs of either side compared.

    PYTHONPATH=. python scripts/value_drift.py [PRESET]

Prints, per dtype, the largest |difference| by position band and the largest ratio of a
difference to that side's part, 2 * G * depth_factor(i) + relative_for(fmt) * |value|
(below 1: the part holds; the tolerance against the reference is two such parts).
"""

from __future__ import annotations

import sys

import torch

from engines.models import DEFAULT_PRESET, load_model
from engines.testing.precision import VALUE_TERMS, depth_factor, relative_for, tolerance_for

BANDS = [(1, 49), (50, 149), (150, 299), (300, 511)]
SEEDS = range(1, 7)
LENGTH = 512
DTYPES = ("float16", "bfloat16")


def logprobs(model: torch.nn.Module, prompt: torch.Tensor) -> torch.Tensor:
    """[positions, vocab] log-softmax of the model's logits at every prompt position."""
    with torch.no_grad():
        return torch.log_softmax(model(prompt[None]).logits[0].float(), dim=-1)


def main(preset: str) -> None:
    torch.set_num_threads(1)
    exact = load_model(preset)
    vocab = int(exact.config.vocab_size)
    length = min(LENGTH, int(getattr(exact.config, "max_position_embeddings", LENGTH)))
    for dtype in DTYPES:
        model = load_model(preset, dtype=dtype)
        g, rel = tolerance_for(dtype), relative_for(dtype)
        worst = dict.fromkeys(BANDS, 0.0)
        ratio = 0.0
        for seed in SEEDS:
            prompt = torch.randint(0, vocab, (length,),
                                   generator=torch.Generator().manual_seed(seed))
            want, got = logprobs(exact, prompt), logprobs(model, prompt)
            ids = torch.cat([want.topk(5, -1).indices, got.topk(5, -1).indices], dim=1)
            a, b = got.gather(1, ids), want.gather(1, ids)
            diff = (a - b).abs()
            for i in range(length):  # row i predicts the token at position i + 1
                position = i + 1
                part = (VALUE_TERMS * g * depth_factor(position)
                        + rel * torch.maximum(a[i].abs(), b[i].abs()))
                ratio = max(ratio, float((diff[i] / part).max()))
                for band in BANDS:
                    if band[0] <= position <= band[1]:
                        worst[band] = max(worst[band], float(diff[i].max()))
        bands = ", ".join(f"{lo}-{hi}: {v:.4f}" for (lo, hi), v in worst.items())
        print(f"{dtype}: max |logprob - float32's| by position {bands}; at most {ratio:.2f} "
              "of its part")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PRESET)
