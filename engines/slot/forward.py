"""Batched prefill and decode over a SlotCache, calling the model's submodules directly.

Per-row positions and an attention mask cut to each row's true length (the masked design
of the serving series' continuous-batching part, docs/references.md). The decoder's pieces
around attention, fused, are engines.core.decoder's.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from engines.core.decoder import DecoderParts
from engines.slot.cache import SlotCache


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    *,
    fold_groups: bool | None = None,
) -> torch.Tensor:
    """One query token per row: q [n, H, 1, D] against keys/values [n, Hkv, W, D] under a
    boolean mask [n, 1, 1, W]; returns [n, H, 1, D].

    On CUDA (fold_groups defaults to q.is_cuda) no fused kernel takes a boolean mask together
    with enable_gqa (flash attention takes no mask, the memory-efficient one no GQA), so SDPA
    would fall back to its math kernel. Each KV head's group of query heads is folded into the
    query length instead: q [n, Hkv, H/Hkv, D] is plain attention over the same keys, the mask
    broadcasts over the group, and the memory-efficient kernel runs. The CPU call is unchanged.
    """
    if not (q.is_cuda if fold_groups is None else fold_groups):
        return F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=scale, enable_gqa=True
        )
    n, heads, _, dim = q.shape
    kv_heads = keys.shape[1]
    # Query head i reads KV head i // (heads / kv_heads), as enable_gqa does.
    folded = q.reshape(n, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=mask, scale=scale)
    return out.reshape(n, heads, 1, dim)


class SlotForward(DecoderParts):
    """The only slot-engine piece that runs the model: decode the live prefix, prefill slots."""

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        """One token for each live row 0..n-1 (`tokens` [n]); return logits [n, vocab].

        Row i's token sits at position lengths[i]; its KV is written there and the row attends
        to columns 0..lengths[i] only.
        """
        n = tokens.shape[0]
        lengths = cache.lengths[:n]
        width = max(lengths) + 1
        device = tokens.device
        pos = torch.tensor(lengths, device=device)
        rows = torch.arange(n, device=device)
        mask = (torch.arange(width, device=device)[None, :] <= pos[:, None])[:, None, None, :]
        x = self.embed(tokens[:, None])
        cos, sin = self.rotary(x, pos[:, None])
        for i, layer in enumerate(self.layers):
            q, k, v = self._attend_qkv(layer, layer.ln1(x), cos, sin)
            keys, values = cache.keys(i), cache.values(i)
            keys[rows, :, pos] = k[:, :, 0]
            values[rows, :, pos] = v[:, :, 0]
            attn = decode_attention(
                q, keys[:n, :, :width], values[:n, :, :width], mask, self.scale
            )
            x = self._finish_layer(layer, x, attn)
        for i in range(n):
            cache.lengths[i] += 1
        return self._logits(x[:, 0])

    @torch.inference_mode()
    def mixed(
        self, tokens: torch.Tensor, prompts: list[tuple[int, torch.Tensor]], cache: SlotCache,
        *, every: dict[int, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Decode live rows 0..n-1 (`tokens` [n], may be empty) and prefill each (slot, prompt)
        in ONE pass: the projections and MLP run once over every token packed together; only
        attention is split (one masked call for the decode rows, one causal call per prompt).
        Returns logits [n + len(prompts), vocab]: decode rows, then each prompt's last token.
        `every` (prompt logprobs): for each slot it names, filled with the logits of every
        prompt position, [size, vocab], from the same pass.
        """
        n = tokens.shape[0]
        device = tokens.device
        lengths = cache.lengths
        sizes = [int(p.shape[0]) for _, p in prompts]
        packed = torch.cat([tokens, *(p for _, p in prompts)])
        rows = torch.cat(
            [torch.arange(n, device=device)]
            + [
                torch.full((size,), slot, device=device)
                for (slot, _), size in zip(prompts, sizes, strict=True)
            ]
        )
        pos = torch.cat(
            [torch.tensor(lengths[:n], dtype=torch.long, device=device)]
            + [torch.arange(size, device=device) for size in sizes]
        )
        width = max(lengths[:n], default=0) + 1
        mask = (torch.arange(width, device=device)[None, :] <= pos[:n, None])[:, None, None, :]
        x = self.embed(packed[None])
        cos, sin = self.rotary(x, pos[None])
        bounds = [n]
        for size in sizes:
            bounds.append(bounds[-1] + size)
        for i, layer in enumerate(self.layers):
            q, k, v = self._attend_qkv(layer, layer.ln1(x), cos, sin)  # [1, heads, T, D]
            keys, values = cache.keys(i), cache.values(i)
            keys[rows, :, pos] = k[0].transpose(0, 1)
            values[rows, :, pos] = v[0].transpose(0, 1)
            parts = []
            if n:
                attn = decode_attention(
                    q[0, :, :n].transpose(0, 1).unsqueeze(2),
                    keys[:n, :, :width],
                    values[:n, :, :width],
                    mask,
                    self.scale,
                )
                parts.append(attn[:, :, 0].transpose(0, 1))
            for start, end in itertools.pairwise(bounds):
                attn = F.scaled_dot_product_attention(
                    q[:, :, start:end],
                    k[:, :, start:end],
                    v[:, :, start:end],
                    is_causal=True,
                    scale=self.scale,
                    enable_gqa=True,
                )
                parts.append(attn[0])
            x = self._finish_layer(layer, x, torch.cat(parts, dim=1)[None])
        for r in range(n):
            lengths[r] += 1
        for (slot, _), size in zip(prompts, sizes, strict=True):
            lengths[slot] = size
        last = torch.tensor(list(range(n)) + [end - 1 for end in bounds[1:]], device=device)
        for (slot, _), start, end in zip(prompts, bounds[:-1], bounds[1:], strict=True):
            if every is not None and slot in every:
                every[slot] = self._logits(x[0, start:end])
        return self._logits(x[0, last])
