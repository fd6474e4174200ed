"""Engines over a SlotCache and SlotForward: the set-up and emission the slot engines share."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from engines.core.prompt_logprobs import whole_prompt
from engines.core.request_state import RequestState
from engines.core.sampling import sample
from engines.core.slots import BaseEngine
from engines.protocol import StepOutput
from engines.slot.cache import SlotCache
from engines.slot.forward import SlotForward
from engines.slot.invariant import InvariantSlotForward


class SlotEngine(BaseEngine):
    CAPABILITIES = dataclasses.replace(
        BaseEngine.CAPABILITIES,
        supported_sampling=BaseEngine.CAPABILITIES.supported_sampling | {"prompt_logprobs", "n"})

    def __init__(self, *args: Any, batch_invariant: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # batch_invariant (engines.slot.invariant): the same bits whatever the batch.
        self.batch_invariant = batch_invariant
        self.runner = (InvariantSlotForward(self.model, max_len=self.max_model_len)
                       if batch_invariant else SlotForward(self.model))
        self.forked_prefills = 0  # children that started from a sibling's prefill, ever
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

    @property
    def execution(self) -> str:
        if not self.batch_invariant:
            return super().execution
        return (f"{super().execution}, batch-invariant (engines.core.invariant: products on "
                "tiles of fixed shape, every token over its own keys through the native kernel)")

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
        """Logits for each decoding row's next token, then each admitted prompt's first.
        Children of one request (n > 1) admitted together prefill once: the first one's KV
        is copied into its siblings' slots, and they sample from its logits."""
        tokens = self._last_tokens(decoding)
        if not admitted:
            return self.runner.decode(tokens, self.cache)
        first: dict[object, RequestState] = {}
        for seq in admitted:
            first.setdefault(seq.request.request_id, seq)
        leaders = list(first.values())
        prompts = [(seq.slot, self._prompt_tensor(seq)) for seq in leaders]
        wanting = [seq for seq in leaders if seq.request.params.prompt_logprobs]
        if not wanting:
            logits = self.runner.mixed(tokens, prompts, self.cache)
        else:
            every = dict.fromkeys((seq.slot for seq in wanting), torch.empty(0))
            logits = self.runner.mixed(tokens, prompts, self.cache, every=every)
            for seq in wanting:  # computed once, at the request's one prefill
                seq.prompt_logprobs = list(whole_prompt(
                    every[seq.slot], seq.request.prompt_token_ids,
                    seq.request.params.prompt_logprobs))
        if len(leaders) == len(admitted):
            return logits
        row = {id(seq): len(decoding) + i for i, seq in enumerate(leaders)}
        for seq in admitted:
            lead = first[seq.request.request_id]
            if lead is not seq:  # a sibling: the leader's prefill, copied
                self.cache.copy(lead.slot, seq.slot)
                seq.prompt_logprobs = list(lead.prompt_logprobs)
                self.forked_prefills += 1
        rows = list(range(len(decoding))) + [row[id(first[s.request.request_id])]
                                             for s in admitted]
        return logits[rows]

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
