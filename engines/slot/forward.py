"""Batched prefill and decode over a SlotCache, calling the model's submodules directly.

Per-row positions and an attention mask cut to each row's true length (the masked design
of the serving series' continuous-batching part, docs/references.md). Works for
Llama-family decoders (Qwen2, Llama, Mistral; Qwen3's q/k norms too). The q/k/v and gate/up
projections are fused once per model: one matmul instead of three.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engines.cache import SlotCache


def _cat_bias(*linears: nn.Linear) -> torch.Tensor | None:
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat(
        [
            lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
            for lin in linears
        ]
    )


@dataclass(slots=True)
class _Layer:
    ln1: nn.Module
    ln2: nn.Module
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    gate_up_w: torch.Tensor
    down_w: torch.Tensor
    act: Callable[[torch.Tensor], torch.Tensor]
    q_norm: nn.Module | None
    k_norm: nn.Module | None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


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


class DecoderParts:
    """A decoder's pieces, fused, around attention: embedding, q/k/v with rotary, the rest of
    each layer, the head. Subclasses decide how attention reads and writes the KV cache."""

    def __init__(self, model: Any) -> None:  # a transformers causal LM (untyped attributes)
        config: Any = model.config
        window = getattr(config, "sliding_window", None)
        if getattr(config, "use_sliding_window", False) and window:
            raise ValueError(
                f"model: sliding-window attention is not supported by {type(self).__name__}"
            )
        decoder: Any = model.model
        self.embed: nn.Module = decoder.embed_tokens
        self.norm: nn.Module = decoder.norm
        self.rotary: nn.Module = decoder.rotary_emb
        self.lm_head: nn.Module = model.lm_head
        self.num_heads: int = config.num_attention_heads
        self.num_kv_heads: int = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None)
        self.head_dim: int = head_dim or config.hidden_size // self.num_heads
        self.num_layers: int = config.num_hidden_layers
        attn0 = decoder.layers[0].self_attn
        self.scale = float(getattr(attn0, "scaling", self.head_dim**-0.5))
        self.layers = _fused_layers(model)

    def _attend_qkv(
        self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[b, s, hidden] -> q [b, H, s, D], k and v [b, Hkv, s, D], rotated."""
        b, s, _ = h.shape
        qkv = F.linear(h, layer.qkv_w, layer.qkv_b)
        nq, nkv, d = (
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
            self.head_dim,
        )
        q = qkv[..., :nq].view(b, s, self.num_heads, d)
        k = qkv[..., nq : nq + nkv].view(b, s, self.num_kv_heads, d)
        v = qkv[..., nq + nkv :].view(b, s, self.num_kv_heads, d)
        if layer.q_norm is not None and layer.k_norm is not None:
            q, k = layer.q_norm(q), layer.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def _finish_layer(self, layer: _Layer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        b, _, s, _ = attn.shape
        return self._finish(layer, x, attn.transpose(1, 2).reshape(b, s, -1))

    def _finish(self, layer: _Layer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The layer after attention: output projection and residual, then the MLP and its
        residual. x [..., hidden]; attn [..., heads * head_dim], heads side by side."""
        x = x + F.linear(attn, layer.o_w, layer.o_b)
        gate, up = F.linear(layer.ln2(x), layer.gate_up_w).chunk(2, dim=-1)
        return x + F.linear(layer.act(gate) * up, layer.down_w)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm_head(self.norm(x))
        return logits


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
        self, tokens: torch.Tensor, prompts: list[tuple[int, torch.Tensor]], cache: SlotCache
    ) -> torch.Tensor:
        """Decode live rows 0..n-1 (`tokens` [n], may be empty) and prefill each (slot, prompt)
        in ONE pass: the projections and MLP run once over every token packed together; only
        attention is split (one masked call for the decode rows, one causal call per prompt).
        Returns logits [n + len(prompts), vocab]: decode rows, then each prompt's last token.
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
        return self._logits(x[0, last])


_FUSED: weakref.WeakKeyDictionary[Any, list[_Layer]] = weakref.WeakKeyDictionary()


def _fused_layers(model: Any) -> list[_Layer]:
    # Fused weights are built once per model object and shared by every engine over it.
    if model in _FUSED:
        return _FUSED[model]
    layers = []
    with torch.no_grad():
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            layers.append(
                _Layer(
                    ln1=layer.input_layernorm,
                    ln2=layer.post_attention_layernorm,
                    qkv_w=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                    qkv_b=_cat_bias(attn.q_proj, attn.k_proj, attn.v_proj),
                    o_w=attn.o_proj.weight,
                    o_b=attn.o_proj.bias,
                    gate_up_w=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                    down_w=mlp.down_proj.weight,
                    act=mlp.act_fn,
                    q_norm=getattr(attn, "q_norm", None),
                    k_norm=getattr(attn, "k_norm", None),
                )
            )
    _FUSED[model] = layers
    return layers
