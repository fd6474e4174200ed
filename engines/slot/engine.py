"""Engines over a SlotCache and SlotForward: the set-up and emission the slot engines share."""

from __future__ import annotations

from typing import Any

import torch

from engines.core.prompt_logprobs import whole_prompt
from engines.core.request_state import RequestState
from engines.core.sampling import sample
from engines.core.slots import BaseEngine
from engines.protocol import StepOutput
from engines.slot.cache import SlotCache
from engines.slot.forward import SlotForward


class SlotEngine(BaseEngine):
    supported_sampling = BaseEngine.supported_sampling | {"prompt_logprobs"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runner = SlotForward(self.model)
        param = next(self.model.parameters())
        self.cache = SlotCache(
            num_layers=self.runner.num_layers,
            max_batch_size=self.max_batch_size,
            num_kv_heads=self.runner.num_kv_heads,
            max_len=self.max_model_len,
            head_dim=self.runner.head_dim,
            device=param.device,
            dtype=param.dtype,
        )

    def slot_lengths(self) -> list[int]:
        return list(self.cache.lengths)

    def _admit(self) -> list[RequestState]:
        """Move waiting requests, first come first served, into free slots."""
        admitted = []
        while self.waiting and self.cache.can_allocate():
            seq = self.waiting.popleft()
            seq.slot = self.cache.allocate()
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _forward(self, decoding: list[RequestState], admitted: list[RequestState]) -> torch.Tensor:
        """Logits for each decoding row's next token, then each admitted prompt's first."""
        tokens = self._last_tokens(decoding)
        if not admitted:
            return self.runner.decode(tokens, self.cache)
        prompts = [(seq.slot, self._prompt_tensor(seq)) for seq in admitted]
        wanting = [seq for seq in admitted if seq.request.params.prompt_logprobs]
        if not wanting:
            return self.runner.mixed(tokens, prompts, self.cache)
        every = dict.fromkeys((seq.slot for seq in wanting), torch.empty(0))
        logits = self.runner.mixed(tokens, prompts, self.cache, every=every)
        for seq in wanting:  # computed once, at the request's one prefill
            seq.prompt_logprobs = list(whole_prompt(every[seq.slot], seq.request.prompt_token_ids,
                                                    seq.request.params.prompt_logprobs))
        return logits

    def _emit(
        self, logits: torch.Tensor, seqs: list[RequestState], outputs: list[StepOutput]
    ) -> None:
        tokens, tops, logprobs = sample(logits, seqs)
        for seq, token, top, logprob in zip(seqs, tokens, tops, logprobs, strict=True):
            outputs.append(seq.append(token, top, logprob))
            if seq.finished:
                self._finish(seq)

    def _release(self, seq: RequestState) -> None:
        """Free seq's slot; the last live row moves in (compaction), so re-point its owner."""
        moved = self.cache.free(seq.slot)
        last = self.running.pop()
        if moved is not None:
            self.running[seq.slot] = last
            last.slot = seq.slot
        seq.slot = -1
