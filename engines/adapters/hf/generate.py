"""A baseline, not a batching engine: transformers' `generate`, one request at a time.

It speaks the protocol so the driver can time it like any engine: each step serves the oldest
waiting request to completion with `model.generate` (greedy, KV-cached) and returns all of its
tokens at once. Closed throughput is what it is for; its ITL and TTFT mean nothing.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import torch

from engines.core.validation import check_request
from engines.models import load_model, parse_dtype, preset_max_model_len
from engines.protocol import FinishReason, InvalidRequest, Request, StepOutput
from engines.threads import torch_threads


class HFGenerateEngine:
    name = "hf-generate"

    def __init__(self, model: str | Path = "tiny", *, device: str = "cpu",
                 dtype: str | torch.dtype = torch.float32, max_model_len: int | None = None,
                 seed: int = 0, **_: object) -> None:
        self.model = load_model(model, seed=seed, device=device, dtype=parse_dtype(dtype))
        self.device = torch.device(device)
        self.vocab_size: int = self.model.config.vocab_size
        self.max_model_len: int = (max_model_len or preset_max_model_len(model)
                                   or self.model.config.max_position_embeddings)
        self.waiting: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        check_request(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                      in_flight={r.request_id for r in self.waiting})
        if request.params.temperature > 0:
            raise InvalidRequest("temperature: the generate baseline is greedy only")
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting)

    @property
    def compute_threads(self) -> int | None:
        return torch_threads(self.device)

    def generate_options(self) -> dict[str, Any]:
        """generate's keyword arguments beyond greedy decoding to the budget (a subclass's
        hook: assisted generation adds its drafter)."""
        return {}

    @torch.inference_mode()
    def step(self) -> list[StepOutput]:
        if not self.waiting:
            return []
        request = self.waiting.popleft()
        prompt = torch.tensor([request.prompt_token_ids], device=self.device)
        budget = request.params.max_tokens
        # min_new_tokens = budget: random weights have no EOS, but make the length certain.
        out = self.model.generate(  # type: ignore[operator]  # transformers' stubs
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=budget,
            min_new_tokens=budget, do_sample=False, **self.generate_options())
        tokens = tuple(int(t) for t in out[0, prompt.shape[1]:])
        reason = FinishReason.LENGTH
        stops = set(request.params.stop_token_ids)
        for i, tok in enumerate(tokens):
            if tok in stops:
                tokens, reason = tokens[: i + 1], FinishReason.STOP
                break
        return [StepOutput(request.request_id, tokens, reason)]
