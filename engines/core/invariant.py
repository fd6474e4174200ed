"""Batch-invariant decoding on a CPU: every token's logits and KV depend on the token, its
position and its own keys only, never on the other rows of the step, on how its prompt was
chunked or on where it sits in the packed batch. The batch_invariant_ops idea (Thinking
Machines) on a CPU, for our engines' `batch_invariant` modes (engines.paged.invariant,
engines.slot.invariant), at any dtype (bf16 is what it is for).

What would vary, and what this does instead:

- A product's kernel, blocking and thread split are picked by its shape: fp32 sgemm gives a
  row other bits in a one-row product than in a two-row one (measured on this project's
  AMD EPYC, torch 2.13; its bf16 oneDNN product happened not to, which another CPU's kernels
  need not repeat). Here every op outside attention runs on tiles of exactly TILE tokens
  (the last one zero-padded): every call has one shape whatever the step, so every token
  meets the same kernel at any thread count; inside a tile a token's row is computed as
  every other row is (tests/engines/core/test_invariant.py places one token at every
  position of a tile and in steps of many sizes).
- Attention over a padded batch (the slot engines' width, the paged engine's length buckets)
  or by ATen's flash kernel (blocked by the chunk) reduces over other rows' shapes. Here each
  query token attends over exactly keys 0..its position through the native kernel
  (engines.core.native: every sum in an order fixed by the token's own position), prefill,
  chunk and decode alike, in fp32: queries, keys and values are widened exactly from the
  model's dtype and the output rounded to it once, as a bf16 kernel accumulating in fp32
  does.

Its cost: a prompt's products go as ceil(T / TILE) calls, not one; a decode step of up to
TILE rows is one call as before; every step widens the keys and values its rows read (the
cache stays in the model's dtype). docs/engines.md gives the measured ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from engines.core import native
from engines.core.decoder import DecoderParts
from engines.core.ops import Norm, rope, rope_tables

__all__ = ["TILE", "Span", "TileDecoder", "attend_spans", "padded", "refusal"]

# Tokens a tile: the shape of every product. 16 is the paged engine's default seats, so a
# full decode step is one tile; a prompt chunk of the default 96-token budget is six.
TILE = 16

# A LoRA hook: (layer, projection, its input tile, the tile's first token) -> the delta to add.
Delta = Callable[[int, str, torch.Tensor, int], torch.Tensor]


def padded(n: int) -> int:
    """Tokens a step of n computes: n rounded up to whole tiles (at least one)."""
    return max(1, -(-n // TILE)) * TILE


def refusal(device: torch.device, head_dim: int) -> str | None:
    """Why a model of this head size on this device cannot run batch-invariant, or None: the
    attention is the native kernel's (fp32 on a CPU, head_dim a multiple of 32, built)."""
    return native.refusal(torch.float32, device, head_dim)


class Span(NamedTuple):
    """One row's tokens in a packed step: `size` tokens from packed index `first`, at
    positions start..start+size-1."""

    first: int
    size: int
    start: int


def attend_spans(q: torch.Tensor, spans: Sequence[Span],
                 kv_of: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
                 scale: float) -> torch.Tensor:
    """q [T, heads, D] (the model's dtype); for span i, kv_of(i) gives its keys and values
    [start + size, kv_heads, D] (any strides, the model's dtype, its own tokens' already
    written). Each token attends over keys 0..its position, widened to fp32, through the
    native kernel; returns [T, heads, D] in q's dtype, 0 for tokens of no span (padding)."""
    out = torch.zeros_like(q)
    for i, (first, size, start) in enumerate(spans):
        keys, values = kv_of(i)
        rows = native.causal_attention(
            q[first : first + size].float(), native.dense(keys[: start + size].float()),
            native.dense(values[: start + size].float()), start, scale)
        out[first : first + size] = rows
    return out


@dataclass(slots=True)
class _Layer:
    ln1: Norm
    ln2: Norm
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    gate_up_w: torch.Tensor
    down_w: torch.Tensor
    act: Any
    q_norm: Norm | None
    k_norm: Norm | None


class TileDecoder:
    """A decoder's pieces around attention, each run tile by tile over a packed step of
    padded(T) tokens ([tokens, hidden], no batch dimension)."""

    def __init__(self, parts: DecoderParts, *, max_len: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.heads, self.kv_heads, self.dim = parts.num_heads, parts.num_kv_heads, parts.head_dim
        self.scale = parts.scale
        self.embed_weight: torch.Tensor = parts.embed.weight  # type: ignore[assignment]
        self.rope = rope_tables(parts.rotary, max_len, device, dtype)  # [len, 2, D]
        self.layers = [
            _Layer(ln1=Norm(layer.ln1), ln2=Norm(layer.ln2), qkv_w=layer.qkv_w,
                   qkv_b=layer.qkv_b, o_w=layer.o_w, o_b=layer.o_b,
                   gate_up_w=layer.gate_up_w, down_w=layer.down_w,
                   act=layer.act,
                   q_norm=Norm(layer.q_norm) if layer.q_norm is not None else None,
                   k_norm=Norm(layer.k_norm) if layer.k_norm is not None else None)
            for layer in parts.layers]
        self.final_norm = Norm(parts.norm)
        head: Any = parts.lm_head
        self.head_w: torch.Tensor = head.weight
        self.head_b: torch.Tensor | None = head.bias

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """[padded] token ids -> [padded, hidden] (a gather: exact, row by row)."""
        return self.embed_weight.index_select(0, tokens)

    def qkv(self, i: int, x: torch.Tensor, positions: torch.Tensor, delta: Delta | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer i before attention: x [padded, hidden], positions [padded] -> q [padded,
        heads, D], k and v [padded, kv_heads, D], rotated."""
        layer = self.layers[i]
        h, hkv, d = self.heads, self.kv_heads, self.dim
        n = x.shape[0]
        q = x.new_empty(n, h, d)
        k = x.new_empty(n, hkv, d)
        v = x.new_empty(n, hkv, d)
        tables = self.rope.index_select(0, positions)
        for at in range(0, n, TILE):
            hx = layer.ln1(x[at : at + TILE])
            qkv = F.linear(hx, layer.qkv_w, layer.qkv_b)
            if delta is not None:
                qkv = qkv + delta(i, "qkv", hx, at)
            cos, sin = tables[at : at + TILE].unsqueeze(2).unbind(1)
            qt = qkv[:, : h * d].view(TILE, h, d)
            kt = qkv[:, h * d : (h + hkv) * d].view(TILE, hkv, d)
            if layer.q_norm is not None and layer.k_norm is not None:
                qt, kt = layer.q_norm(qt), layer.k_norm(kt)
            q[at : at + TILE] = rope(qt, cos, sin)
            k[at : at + TILE] = rope(kt, cos, sin)
            v[at : at + TILE] = qkv[:, (h + hkv) * d :].view(TILE, hkv, d)
        return q, k, v

    def finish(self, i: int, x: torch.Tensor, attn: torch.Tensor,
               delta: Delta | None = None) -> torch.Tensor:
        """Layer i after attention: x [padded, hidden], attn [padded, heads * D] -> x."""
        layer = self.layers[i]
        out = torch.empty_like(x)
        for at in range(0, x.shape[0], TILE):
            a = attn[at : at + TILE]
            o = F.linear(a, layer.o_w, layer.o_b)
            if delta is not None:
                o = o + delta(i, "o", a, at)
            xt = x[at : at + TILE] + o
            hx = layer.ln2(xt)
            gate_up = F.linear(hx, layer.gate_up_w)
            if delta is not None:
                gate_up = gate_up + delta(i, "gate_up", hx, at)
            gate, up = gate_up.chunk(2, dim=-1)
            mid = layer.act(gate) * up
            down = F.linear(mid, layer.down_w)
            if delta is not None:
                down = down + delta(i, "down", mid, at)
            out[at : at + TILE] = xt + down
        return out

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> [n, vocab], n any: the rows are padded to whole tiles here."""
        n = x.shape[0]
        if n % TILE:
            x = torch.cat((x, x.new_zeros(padded(n) - n, x.shape[1])))
        parts = [F.linear(self.final_norm(x[at : at + TILE]), self.head_w, self.head_b)
                 for at in range(0, x.shape[0], TILE)]
        return (parts[0] if len(parts) == 1 else torch.cat(parts))[:n]
