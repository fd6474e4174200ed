"""One forward pass over a block KV pool: decode rows and prompt chunks packed together.

Every row is a span of one request's tokens at positions start..start+n-1 with its block
table. The projections and MLP run once over all tokens packed end to end (as SlotForward's
mixed pass); each token's K and V are written to its block slot; attention reads each row's
own blocks only (engines.paged_attention).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engines.forward import DecoderParts
from engines.paged_attention import PAD_ELEMENTS, AttentionPlan, attend, long_tensor


@dataclass(frozen=True, slots=True)
class Row:
    tokens: Sequence[int]  # token ids to compute, at positions start, start+1, ...
    start: int  # tokens before them already have KV in `blocks`
    blocks: Sequence[int]  # the request's block table, covering start + len(tokens) tokens
    wants_logits: bool  # sample after the last token (the span reaches the request's end)


class PagedForward(DecoderParts):
    def __init__(self, model: Any, *, num_blocks: int, block_size: int) -> None:
        super().__init__(model)
        param = next(model.parameters())
        self.block_size = block_size
        self.pad = PAD_ELEMENTS // (self.num_kv_heads * self.head_dim)
        # [layers, K/V, slot, kv_heads, head_dim]; slot = block * block_size + offset.
        shape = (self.num_layers, 2, num_blocks * block_size, self.num_kv_heads, self.head_dim)
        self.kv = torch.zeros(shape, device=param.device, dtype=param.dtype)

    def slots(self, blocks: Sequence[int], start: int, end: int) -> list[int]:
        bs = self.block_size
        return [blocks[p // bs] * bs + p % bs for p in range(start, end)]

    @torch.inference_mode()
    def forward(self, rows: Sequence[Row]) -> torch.Tensor:
        """Compute every row's span; return logits [rows wanting them, vocab], in row order."""
        device = self.kv.device
        plan = AttentionPlan.build(rows, self.block_size, self.pad, device, self.kv.dtype)
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        last: dict[int, int] = {}  # row -> packed index of its last token
        for i in plan.order:
            row = rows[i]
            end = row.start + len(row.tokens)
            tokens.extend(row.tokens)
            positions.extend(range(row.start, end))
            slots.extend(self.slots(row.blocks, row.start, end))
            last[i] = len(tokens) - 1
        write = long_tensor(slots, device)
        pos = long_tensor(positions, device)
        x = self.embed(long_tensor(tokens, device)[None])
        cos, sin = self.rotary(x, pos[None])
        for i, layer in enumerate(self.layers):
            q, k, v = self._attend_qkv(layer, layer.ln1(x), cos, sin)  # [1, heads, T, D]
            keys, values = self.kv[i, 0], self.kv[i, 1]
            keys.index_copy_(0, write, k[0].transpose(0, 1))
            values.index_copy_(0, write, v[0].transpose(0, 1))
            attn = attend(plan, q[0], k[0], v[0], keys, values, self.scale)
            x = self._finish_layer(layer, x, attn.transpose(0, 1)[None])
        wanted = [last[i] for i, row in enumerate(rows) if row.wants_logits]
        return self._logits(x[0, long_tensor(wanted, device)])
