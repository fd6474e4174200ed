"""The hardware timings the SLO targets are derived from (engines.bench.slo), taken in the
same run as the comparison, on the preset's own transformers forward.

Not one of the engines under test: the yardstick must not move when an engine's code does
(an engine that got 10% slower must not loosen its own targets by 10%), and it must not depend
on which engines are being compared. Timed with a CUDA synchronize around each call and after
warm-up calls, so kernel selection and allocator growth are not in the figure.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from engines.bench.devices import synchronizer
from engines.bench.slo import HardwareTimes
from engines.models import load_model

SHORT_PROMPT = 16  # the uniform batch's prompt: decode steps over short contexts
WARMUP = 3
DECODE_STEPS = 32
PREFILL_REPEATS = 7


def _timed(call: Callable[[], Any], sync: Callable[[], None] | None) -> float:
    if sync is not None:
        sync()
    start = time.perf_counter()
    call()
    if sync is not None:
        sync()
    return time.perf_counter() - start


@torch.inference_mode()
def measure(preset: str, *, device: str, dtype: str, batch: int, prompt_len: int,
            seed: int = 0) -> HardwareTimes:
    """Fastest decode step of `batch` uniform rows, and fastest prefill of one `prompt_len`
    prompt alone, on the preset's model (models are cached: engines reuse it). The minimum,
    as timeit takes it: on a shared machine noise only ever adds, and the targets describe
    what the hardware can do, not how busy it was at the moment it was asked."""
    model: Any = load_model(preset, seed=seed, device=device, dtype=dtype)
    sync = synchronizer(device)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else (
        "past_key_values")
    gen = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)

    def prompt(rows: int, length: int) -> torch.Tensor:
        return torch.randint(0, vocab, (rows, length), generator=gen).to(device)

    def forward(ids: torch.Tensor, kv: DynamicCache) -> torch.Tensor:
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_arg: kv})
        return out.logits[:, -1].argmax(-1, keepdim=True)  # type: ignore[no-any-return]

    kv = DynamicCache(config=model.config)
    token = forward(prompt(batch, SHORT_PROMPT), kv)
    tokens = [token]  # each decode step feeds the previous step's token

    def decode() -> None:
        tokens.append(forward(tokens[-1], kv))

    steps = [_timed(decode, sync) for _ in range(WARMUP + DECODE_STEPS)][WARMUP:]
    long_prompt = prompt(1, prompt_len)
    prefills = [_timed(lambda: forward(long_prompt, DynamicCache(config=model.config)), sync)
                for _ in range(WARMUP + PREFILL_REPEATS)][WARMUP:]
    return HardwareTimes(
        step_s=float(np.min(steps)), prefill_s=float(np.min(prefills)), batch=batch,
        prompt_len=prompt_len,
        basis=f"{preset} {dtype} on {device}, transformers forward",
    )
