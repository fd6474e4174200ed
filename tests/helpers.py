"""Small drivers shared by the repo's engine tests (not part of the shipped suite)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import torch

from engines.models import load_model
from engines.protocol import Engine, FinishReason, Request, SamplingParams, StepOutput


def make_prompts(lengths: Iterable[int], seed: int = 0, vocab: int = 1024) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(0, vocab, (n,), generator=gen).tolist()) for n in lengths]


def hf_generate(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """transformers' own greedy generate, one request alone: the ground truth."""
    model: Any = load_model("tiny")  # generate() is untyped in transformers' stubs
    ids = torch.tensor([prompt])
    # An explicit mask: generate would otherwise mask every token equal to pad_token_id.
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False
    )
    return out[0, len(prompt) :].tolist()


def drain(
    engine: Engine,
    requests: Iterable[Request],
    *,
    on_step: Callable[[int, list[StepOutput]], None] | None = None,
    max_steps: int = 10_000,
) -> dict[Hashable, tuple[list[int], FinishReason | None]]:
    """Add all requests, step until done; return tokens and finish reason per request id."""
    results: dict[Hashable, tuple[list[int], FinishReason | None]] = {}
    for request in requests:
        engine.add_request(request)
        results[request.request_id] = ([], None)
    for step in range(max_steps):
        if not engine.has_work():
            return results
        outputs = engine.step()
        for out in outputs:
            tokens, reason = results.setdefault(out.request_id, ([], None))
            assert reason is None, f"output for {out.request_id!r} after it finished"
            results[out.request_id] = (tokens + list(out.token_ids), out.finish_reason)
        if on_step:
            on_step(step, outputs)
    raise AssertionError(f"engine still has work after {max_steps} steps")


def greedy(prompts: Iterable[tuple[int, ...]], budgets: Iterable[int]) -> list[Request]:
    return [Request(p, SamplingParams(max_tokens=n)) for p, n in zip(prompts, budgets, strict=True)]


def bf16_continuous() -> Engine:
    """The continuous engine in bf16, 3 slots: a real engine whose logits batching perturbs."""
    from engines.slot.continuous import ContinuousBatchEngine

    return ContinuousBatchEngine(dtype="bfloat16", max_batch_size=3)


def one_slot_continuous() -> Engine:
    """The continuous engine with one slot: a config variant (--engine-variant) of the default
    engine, which must give every request the same tokens."""
    from engines.slot.continuous import ContinuousBatchEngine

    return ContinuousBatchEngine(max_batch_size=1)
