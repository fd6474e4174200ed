"""A Llama-family decoder's pieces around attention, called directly: what every batched
forward of ours (the slot engines', the paged engine's) shares.

Works for Llama-family decoders (Qwen2, Llama, Mistral; Qwen3's q/k norms too). The q/k/v
and gate/up projections are fused once per model: one matmul instead of three.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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


# What these pieces compute exactly: a Llama-family decoder (pre-norm, rotary, SwiGLU-style
# MLP without bias, full causal attention), Qwen3's q/k norms included.
SERVED_ARCHITECTURES = frozenset({"qwen2", "qwen3", "llama", "mistral"})
# RoPE whose frequencies are fixed per model. "dynamic" and "longrope" recompute them from the
# longest sequence in a forward call, so a batch would rotate a request by its neighbours.
STATIC_ROPE = frozenset({"default", "linear", "llama3"})


def unsupported(config: Any) -> str:
    """What of this transformers config the batched forwards lack ("" if nothing): a model is
    refused at construction rather than served with wrong tokens."""
    arch = getattr(config, "model_type", None)
    if arch not in SERVED_ARCHITECTURES:
        return (f"architecture {arch!r} (mixture-of-experts, soft-capping, fused projections "
                f"and other layers are not implemented; served: "
                f"{', '.join(sorted(SERVED_ARCHITECTURES))})")
    window = getattr(config, "sliding_window", None)
    sliding = window and (arch == "mistral" or getattr(config, "use_sliding_window", False))
    if sliding or any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return f"sliding-window attention (sliding_window={window}) is not implemented"
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
    if rope_type not in STATIC_ROPE:
        return (f"RoPE scaling {rope_type!r} is not implemented (served: "
                f"{', '.join(sorted(STATIC_ROPE))})")
    if getattr(config, "mlp_bias", False):
        return "MLP biases (mlp_bias=True) are not implemented"
    return ""


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderParts:
    """A decoder's pieces, fused, around attention: embedding, q/k/v with rotary, the rest of
    each layer, the head. Subclasses decide how attention reads and writes the KV cache."""

    def __init__(self, model: Any) -> None:  # a transformers causal LM (untyped attributes)
        config: Any = model.config
        lacking = unsupported(config)
        if lacking:
            raise ValueError(f"model: {type(self).__name__} cannot serve it: {lacking}")
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
