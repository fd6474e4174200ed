"""One request at a time with a KV cache: the simplest reference.

Deliberately independent of SlotCache and SlotForward: it runs the model's own forward with
transformers' DynamicCache, so a bug in our batched kernels cannot hide in both sides of a
parity check.

Long-RoPE models (Phi-3) switch from short to long rotary factors once a sequence passes
`original_max_position_embeddings`; transformers' generate then recomputes the whole cache,
so that no key keeps its short-factor rotation (Phi3ForCausalLM.prepare_inputs_for_generation).
This engine does the same at the same token, so it stays generate's semantics.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import DynamicCache

from engines.core.request_state import RequestState
from engines.core.sampling import sample
from engines.core.slots import BaseEngine
from engines.models import long_rope_threshold
from engines.protocol import StepOutput


class SequentialEngine(BaseEngine):
    name = "sequential"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["max_batch_size"] = 1
        super().__init__(*args, **kwargs)
        self._kv: DynamicCache | None = None
        # transformers renamed past_key_values to cache (5.2x); accept both.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._cached = 0  # tokens whose KV is in self._kv
        self._recompute_at = long_rope_threshold(self.model.config)

    def slot_lengths(self) -> list[int]:
        return [self._cached]

    @torch.inference_mode()
    def _forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        assert self._kv is not None
        kwargs = {self._cache_arg: self._kv}
        out = self.model(input_ids=input_ids[None], use_cache=True, logits_to_keep=1, **kwargs)
        self._cached += input_ids.shape[0]
        return out.logits[:, -1]

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        if self._take_aborts(outputs):
            self._retire()
        if not self.running:
            if not self.waiting:
                return outputs
            seq = self.waiting.popleft()
            seq.slot = 0
            self.running.append(seq)
            self._kv = DynamicCache(config=self.model.config)
            logits = self._forward(self._prompt_tensor(seq))
        elif self._cached == self._recompute_at:  # the sequence passes it with this token
            seq = self.running[0]
            self._kv = DynamicCache(config=self.model.config)
            self._cached = 0
            tokens = (*seq.request.prompt_token_ids, *seq.output)
            logits = self._forward(torch.tensor(tokens, device=self.device))
        else:
            seq = self.running[0]
            logits = self._forward(self._last_tokens([seq]))
        self._emit(logits, seq, outputs)
        if seq.finished:
            self._retire()
        return outputs

    def _emit(self, logits: torch.Tensor, seq: RequestState, outputs: list[StepOutput]) -> None:
        tokens, tops, logprobs = sample(logits, [seq])
        outputs.append(seq.append(tokens[0], tops[0], logprobs[0]))
        if seq.finished:
            self._finish(seq)

    def _retire(self) -> None:
        self.running.clear()
        self._kv = None
        self._cached = 0
