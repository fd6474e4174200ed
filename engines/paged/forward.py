"""One forward pass over a block KV pool: decode rows and prompt chunks packed together.

Every row is a span of one request's tokens at positions start..start+n-1 with its block
table. The projections and MLP run once over all tokens packed end to end (as SlotForward's
mixed pass); each token's K and V are written to its block slot; attention reads each row's
own blocks only (engines.paged.attention).

Tokens stay packed as [T, hidden] and heads as [T, heads, D] from embedding to logits (no
batch dimension, no transposes around attention), each layer's pool views are made once, and
the attention plan is a handful of tensor ops a step. On the tiny CPU preset a step is mostly
the fixed cost of dispatching small ops, so these set its price: timed step by step against
the continuous engine's decode step (scripts/step_cost.py), a one-row step went from 1.08x to
0.92x of it (482 to 411 us) and 8 rows at 100 tokens from 1.15x to 1.00x when they replaced
per-layer pool indexing, per-token slot gathers and masks built every step.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engines.core.decoder import DecoderParts, _Layer, _rotate_half
from engines.paged.attention import (
    PAD_ELEMENTS,
    attend,
    causal_table,
    long_tensor,
    plan_attention,
)


@dataclass(frozen=True, slots=True)
class Row:
    tokens: Sequence[int]  # token ids to compute, at positions start, start+1, ...
    start: int  # tokens before them already have KV in `blocks`
    blocks: Sequence[int]  # the request's block table, covering start + len(tokens) tokens
    wants_logits: bool  # sample after the last token (the span reaches the request's end)


class PagedForward(DecoderParts):
    def __init__(self, model: Any, *, num_blocks: int, block_size: int,
                 max_model_len: int) -> None:
        super().__init__(model)
        param = next(model.parameters())
        self.block_size = block_size
        self.pad = PAD_ELEMENTS // (self.num_kv_heads * self.head_dim)
        # [layers, K/V, slot, kv_heads, head_dim]; slot = block * block_size + offset.
        shape = (self.num_layers, 2, num_blocks * block_size, self.num_kv_heads, self.head_dim)
        self.kv = torch.zeros(shape, device=param.device, dtype=param.dtype)
        self.causal = causal_table(max_model_len, param.device, param.dtype)
        # Each layer's K and V as slots (for writes) and as blocks (for gathers): views made
        # once, not indexed out of the pool in every layer of every step.
        blocks = (num_blocks, block_size, self.num_kv_heads, self.head_dim)
        self._slots = [(self.kv[i, 0], self.kv[i, 1]) for i in range(self.num_layers)]
        self._blocks = [(k.view(blocks), v.view(blocks)) for k, v in self._slots]

    def slots(self, blocks: Sequence[int], start: int, end: int) -> list[int]:
        """Pool slots of positions start..end-1: a range per block, not a sum per token."""
        bs = self.block_size
        out: list[int] = []
        for j in range(start // bs, (end - 1) // bs + 1):
            base = blocks[j] * bs - j * bs  # slot of position p in block j: base + p
            out.extend(range(base + max(start, j * bs), base + min(end, (j + 1) * bs)))
        return out

    @torch.inference_mode()
    def forward(self, rows: Sequence[Row]) -> torch.Tensor:
        """Compute every row's span; return logits [rows wanting them, vocab], in row order."""
        device = self.kv.device
        plan = plan_attention(rows, self.block_size, self.pad, self.causal)
        bs = self.block_size
        tokens, positions, slots = array("q"), array("q"), array("q")
        last = [0] * len(rows)  # row -> packed index of its last token
        for i in plan.order:
            row = rows[i]
            start = row.start
            if len(row.tokens) == 1:  # most rows: one decode token
                tokens.append(row.tokens[0])
                positions.append(start)
                slots.append(row.blocks[start // bs] * bs + start % bs)
            else:
                end = start + len(row.tokens)
                tokens.extend(row.tokens)
                positions.extend(range(start, end))
                slots.extend(self.slots(row.blocks, start, end))
            last[i] = len(tokens) - 1
        n = len(tokens)
        packed = long_tensor(tokens + positions + slots, device)  # one tensor, three views
        write = packed[2 * n :]
        x = self.embed(packed[:n])  # [T, hidden]
        cos, sin = self.rotary(x[None], packed[None, n : 2 * n])
        cos, sin = cos[0, :, None], sin[0, :, None]  # [T, 1, D]: the same for every head
        for layer, (keys, values), (key_blocks, value_blocks) in zip(
                self.layers, self._slots, self._blocks, strict=True):
            q, k, v = self._packed_qkv(layer, layer.ln1(x), cos, sin)
            keys.index_copy_(0, write, k)
            values.index_copy_(0, write, v)
            attn = attend(plan, q, k, v, key_blocks, value_blocks, self.scale)
            x = self._finish(layer, x, attn.reshape(n, -1))
        wanted = [last[i] for i, row in enumerate(rows) if row.wants_logits]
        return self._logits(x.index_select(0, long_tensor(wanted, device)))

    def _packed_qkv(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor,
                    sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[T, hidden] -> q [T, heads, D], k and v [T, kv_heads, D], rotated (the same
        arithmetic as DecoderParts._attend_qkv, without its batch dimension)."""
        n, d = h.shape[0], self.head_dim
        nq, nkv = self.num_heads * d, self.num_kv_heads * d
        qkv = F.linear(h, layer.qkv_w, layer.qkv_b)
        q = qkv[:, :nq].view(n, self.num_heads, d)
        k = qkv[:, nq : nq + nkv].view(n, self.num_kv_heads, d)
        v = qkv[:, nq + nkv :].view(n, self.num_kv_heads, d)
        if layer.q_norm is not None and layer.k_norm is not None:
            q, k = layer.q_norm(q), layer.k_norm(k)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v
