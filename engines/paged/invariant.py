"""The paged engine's batch-invariant forward (`PagedEngine(batch_invariant=True)`): a token's
logits and KV are the same bits whichever rows shared its step, however its prompt was
chunked, whether it was decoded or recomputed after a preemption, or read from another
request's cached blocks.

The step's rows are packed in order, padded to whole tiles, and every op outside attention
runs tile by tile (engines.core.invariant.TileDecoder); each row's tokens attend over exactly
their own keys, read from the pool through the row's block table, widened to fp32 and run
through the native kernel (engines.core.invariant.attend_spans): one path for prompt chunks
and decode rows. Padding tokens write the scratch block no request holds and are attended
by nobody. Eager only (the compiled graphs' products and attention depend on the step's
shape).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import torch

from engines.core.invariant import Delta, Span, TileDecoder, attend_spans, padded, refusal
from engines.paged.attention import long_tensor
from engines.paged.forward import PagedForward, Row

__all__ = ["InvariantForward"]


class InvariantForward(PagedForward):
    def __init__(self, model: Any, *, num_blocks: int, block_size: int, max_model_len: int,
                 seats: int = 1) -> None:
        super().__init__(model, num_blocks=num_blocks, block_size=block_size,
                         max_model_len=max_model_len, seats=seats)
        param = next(model.parameters())
        why = refusal(param.device, self.head_dim)
        if why is not None:
            raise ValueError(f"batch_invariant: the invariant forward attends through the "
                             f"native kernel, which cannot run here: {why}")
        self.tiled = TileDecoder(self, max_len=max_model_len, device=param.device,
                                 dtype=param.dtype)
        self.prompt_attention = ("batch-invariant: every token over its own keys through the "
                                 "native causal kernel in fp32, products on tiles of fixed "
                                 "shape (engines.core.invariant)")

    @torch.inference_mode()
    def forward(self, rows: Sequence[Row]) -> torch.Tensor:
        """As PagedForward.forward: logits [positions asked for, vocab], rows in order."""
        device, bs = self.tables.device, self.block_size
        tokens, positions, slots = array("q"), array("q"), array("q")
        spans: list[Span] = []
        for row in rows:
            end = row.start + len(row.tokens)
            spans.append(Span(len(tokens), len(row.tokens), row.start))
            tokens.extend(row.tokens)
            positions.extend(range(row.start, end))
            slots.extend(self.slots(row.blocks, row.start, end))
        n = len(tokens)
        pad = padded(n) - n
        tokens.extend([0] * pad)
        positions.extend([0] * pad)
        slots.extend([self.scratch_block * bs] * pad)  # written, never read
        wanted = array("q", [span.first + o for span, row in zip(spans, rows, strict=True)
                             for o in row.logit_offsets()])
        total = n + pad
        packed = long_tensor(tokens + positions + slots + wanted, device)
        write = packed[2 * total : 3 * total]
        write_blocks, write_offsets = write // bs, write % bs
        tables = [long_tensor(list(row.blocks[: -(-(row.start + len(row.tokens)) // bs)]),
                  device) for row in rows]
        delta = self._delta(rows, total)
        x = self.tiled.embed(packed[:total])
        kv_heads, dim = self.num_kv_heads, self.head_dim
        for i, (keys, values) in enumerate(self._kv):
            q, k, v = self.tiled.qkv(i, x, packed[total : 2 * total], delta)
            keys[write_blocks, write_offsets] = k
            values[write_blocks, write_offsets] = v

            def kv_of(r: int, keys: torch.Tensor = keys, values: torch.Tensor = values
                      ) -> tuple[torch.Tensor, torch.Tensor]:
                return (keys.index_select(0, tables[r]).view(-1, kv_heads, dim),
                        values.index_select(0, tables[r]).view(-1, kv_heads, dim))

            attn = attend_spans(q, spans, kv_of, self.scale)
            x = self.tiled.finish(i, x, attn.view(total, -1), delta)
        return self.tiled.logits(x.index_select(0, packed[3 * total :]))

    def _delta(self, rows: Sequence[Row], total: int) -> Delta | None:
        """The LoRA hook over each padded token's adapter slot (padding: 0, the base model),
        or None when no row has an adapter."""
        lora = self.lora
        index = self._lora_index(rows, range(len(rows)), sum(len(r.tokens) for r in rows))
        if index is None or lora is None:
            return None
        index = torch.cat((index, index.new_zeros(total - index.shape[0])))

        def delta(layer: int, proj: str, x: torch.Tensor, at: int) -> torch.Tensor:
            return lora.delta(layer, proj, x, index[at : at + x.shape[0]])

        return delta
