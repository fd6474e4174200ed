"""The slot engines' batch-invariant forward (`ContinuousBatchEngine(batch_invariant=True)`):
a token's logits and KV are the same bits whichever rows shared its step and whether it was
prefilled or decoded.

Decode rows and admitted prompts are packed in one step, padded to whole tiles, and every op
outside attention runs tile by tile (engines.core.invariant.TileDecoder); each row's tokens
attend over exactly their own slot's keys 0..their position, widened to fp32, through the
native kernel (engines.core.invariant.attend_spans), instead of SlotForward's padded decode
batch (every row as long as the longest) and ATen's causal prefill.
"""

from __future__ import annotations

from typing import Any

import torch

from engines.core.invariant import Span, TileDecoder, attend_spans, padded, refusal
from engines.slot.cache import SlotCache
from engines.slot.forward import SlotForward

__all__ = ["InvariantSlotForward"]


class InvariantSlotForward(SlotForward):
    def __init__(self, model: Any, *, max_len: int) -> None:
        super().__init__(model)
        param = next(model.parameters())
        why = refusal(param.device, self.head_dim)
        if why is not None:
            raise ValueError(f"batch_invariant: the invariant forward attends through the "
                             f"native kernel, which cannot run here: {why}")
        self.tiled = TileDecoder(self, max_len=max_len, device=param.device, dtype=param.dtype)

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        """As SlotForward.decode: one token for each live row 0..n-1; logits [n, vocab]."""
        return self.mixed(tokens, [], cache)

    @torch.inference_mode()
    def mixed(
        self, tokens: torch.Tensor, prompts: list[tuple[int, torch.Tensor]], cache: SlotCache,
        *, every: dict[int, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """As SlotForward.mixed: decode rows 0..n-1 and prefill each (slot, prompt) in one
        step; logits [n + len(prompts), vocab] (and `every`'s whole-prompt logits)."""
        n = tokens.shape[0]
        device = tokens.device
        lengths = cache.lengths
        spans = [Span(r, 1, lengths[r]) for r in range(n)]
        owners = list(range(n))
        for slot, prompt in prompts:
            spans.append(Span(spans[-1].first + spans[-1].size if spans else 0,
                              int(prompt.shape[0]), 0))
            owners.append(slot)
        real = spans[-1].first + spans[-1].size
        total = padded(real)
        packed = torch.cat([tokens, *(p for _, p in prompts),
                            tokens.new_zeros(total - real)])
        positions = torch.cat(
            [torch.tensor(lengths[:n], dtype=torch.long, device=device)]
            + [torch.arange(int(p.shape[0]), device=device) for _, p in prompts]
            + [torch.zeros(total - real, dtype=torch.long, device=device)])
        rows = torch.tensor([owners[i] for i, s in enumerate(spans) for _ in range(s.size)],
                            dtype=torch.long, device=device)
        x = self.tiled.embed(packed)
        for i in range(self.num_layers):
            q, k, v = self.tiled.qkv(i, x, positions)
            keys, values = cache.keys(i), cache.values(i)  # [slots, kv_heads, max_len, D]
            keys[rows, :, positions[:real]] = k[:real]
            values[rows, :, positions[:real]] = v[:real]

            def kv_of(r: int, keys: torch.Tensor = keys, values: torch.Tensor = values
                      ) -> tuple[torch.Tensor, torch.Tensor]:
                end = spans[r].start + spans[r].size
                return (keys[owners[r], :, :end].transpose(0, 1),
                        values[owners[r], :, :end].transpose(0, 1))

            attn = attend_spans(q, spans, kv_of, self.scale)
            x = self.tiled.finish(i, x, attn.view(total, -1))
        for r in range(n):
            lengths[r] += 1
        for (slot, prompt), span in zip(prompts, spans[n:], strict=True):
            lengths[slot] = int(prompt.shape[0])
            if every is not None and slot in every:
                every[slot] = self.tiled.logits(x[span.first : span.first + span.size])
        last = torch.tensor([s.first + s.size - 1 for s in spans], device=device)
        return self.tiled.logits(x.index_select(0, last))
