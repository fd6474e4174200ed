"""The timer behind the SLO targets (engines.bench.slo, engines.bench.host.gauge): the preset's
own transformers forward, one decode step of a uniform batch or one long prefill per call.

Not one of the engines under test: the yardstick must not move when an engine's code does
(an engine that got 10% slower must not loosen its own targets by 10%), and it must not depend
on which engines are being compared. It does move with the machine: it is timed between the
engines' steps, so a slow spell reaches it as it reaches them. Warm-up calls run when it is
built, so kernel selection and allocator growth are not in any figure, and on CUDA each call
is bracketed by a synchronize.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache

from engines.bench.devices import synchronizer
from engines.models import load_model

SHORT_PROMPT = 16  # the uniform batch's prompt: decode steps over short contexts
CONTEXT_STEPS = 32  # decode steps before the batch is prefilled afresh: contexts stay short
WARMUP = 3


def for_config(config: Any, max_model_len: int) -> ForwardTimer:
    """The timer of a comparison under `config` (engines.bench.config.Config): the preset's
    forward on its device and dtype, a decode step of its slots, a prefill of the workload's
    longest prompt class, read on the raw clock: this thread's CPU time under the kit's
    on-thread clocks (the steady clock rescales it), else the wall clock."""
    from engines.bench import clocks, draws

    return ForwardTimer(config.preset, device=config.device, dtype=config.dtype,
                        batch=config.max_batch_size,
                        prompt_len=draws.prompt_classes(max_model_len)[-1], seed=config.seed,
                        clock=time.thread_time if clocks.on_thread(config.clock)
                        else time.perf_counter)


class ForwardTimer:
    """Times the preset's model (cached by engines.models: the engines reuse it)."""

    def __init__(self, preset: str, *, device: str, dtype: str, batch: int, prompt_len: int,
                 seed: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        """clock: what a call's time is read from, the engines' own (engines.bench.clocks)."""
        self.batch, self.prompt_len = batch, prompt_len
        self._clock = clock
        self.basis = f"{preset} {dtype} on {device}, transformers forward"
        self._model: Any = load_model(preset, seed=seed, device=device, dtype=dtype)
        self._sync = synchronizer(device)
        params = inspect.signature(self._model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        gen = torch.Generator().manual_seed(seed)
        vocab = int(self._model.config.vocab_size)
        self._short = torch.randint(0, vocab, (batch, SHORT_PROMPT), generator=gen).to(device)
        self._long = torch.randint(0, vocab, (1, prompt_len), generator=gen).to(device)
        self._kv: DynamicCache | None = None
        self._token: torch.Tensor | None = None
        self._steps = 0
        for _ in range(WARMUP):
            self.decode()
            self.prefill()

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, kv: DynamicCache) -> torch.Tensor:
        out = self._model(input_ids=ids, use_cache=True, logits_to_keep=1,
                          **{self._cache_arg: kv})
        return out.logits[:, -1].argmax(-1, keepdim=True)  # type: ignore[no-any-return]

    def _timed(self, ids: torch.Tensor, kv: DynamicCache) -> tuple[float, torch.Tensor]:
        if self._sync is not None:
            self._sync()
        start = self._clock()
        token = self._forward(ids, kv)
        if self._sync is not None:
            self._sync()
        return self._clock() - start, token

    def decode(self) -> float:
        """One decode step of `batch` rows, each feeding its previous token."""
        if self._kv is None or self._token is None or self._steps >= CONTEXT_STEPS:
            self._kv = DynamicCache(config=self._model.config)  # untimed: a fresh short batch
            self._token = self._forward(self._short, self._kv)
            self._steps = 0
        seconds, self._token = self._timed(self._token, self._kv)
        self._steps += 1
        return seconds

    def prefill(self) -> float:
        """One prefill of the `prompt_len`-token prompt, alone, into an empty cache."""
        seconds, _ = self._timed(self._long, DynamicCache(config=self._model.config))
        return seconds
