"""A decoder layer's small pieces in as few tensor ops as their arithmetic allows, for forwards
whose step is bounded by dispatching ops, not by computing them (the tiny preset's: a decode
step's ~50 ops a layer cost ~8 us each and compute next to nothing).

Each piece computes what the transformers module it replaces computes, op for op where the
result must stay bit-identical (the RMSNorm and RoPE here are), so tokens stay those of the
sequential reference, which runs transformers' own modules.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

# Weights at least this large (in elements) are multiplied by oneDNN with a pre-packed weight on
# a CPU: scripts/linear_kernels.py (at 2acb7a4, since removed) measured it 1.2-2.2x faster than
# F.linear's MKL sgemm on the small preset's shapes (16-1829 rows x 512 x 768-8192, fp32, one
# thread; AMD EPYC with AVX-512, where MKL's kernels are not its fastest), and 0.3-0.8x on the
# tiny preset's (64 x 192-1024), whose calls are too small to pay the packed call's overhead.
PACK_ELEMENTS = 1 << 17
# A smaller weight gains from oneDNN too once a call has enough rows (`Linear(by_rows=True)`):
# the packed call costs ~9 us more, then multiplies ~2x faster than MKL's sgemm, so it wins
# from about rows x weight elements = 2^20 on (scripts/linear_kernels.py --rows at e78ec2f, the
# tiny preset's four projections at 16-3,327 rows, fp32, one thread, 2026-12-05: oneDNN took
# 0.40-0.86x MKL's time from there on, 0.98-5.9x below it, decodes included).
ROW_PACK_ELEMENTS = 1 << 20


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Llama/Qwen RMSNorm, the same ops in the same order (so the same bits),
    without a module call or the no-op dtype casts of an fp32 model."""
    if x.dtype == torch.float32:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def norm_parts(module: nn.Module) -> tuple[torch.Tensor, float] | None:
    """(weight, eps) of an RMSNorm module that rms_norm computes exactly, or None (then the
    caller keeps calling the module)."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    name = type(module).__name__
    if isinstance(weight, torch.Tensor) and isinstance(eps, float) and name.endswith("RMSNorm") \
            and not name.startswith(("Gemma", "Olmo")):  # (1 + w) and other variants
        return weight, eps
    return None


class Norm:
    """An RMSNorm computed by rms_norm where that computes the module exactly (norm_parts),
    else by the module itself: what the paged forward and the batch-invariant one call."""

    __slots__ = ("eps", "module", "weight")

    def __init__(self, module: Any) -> None:
        parts = norm_parts(module)
        self.module = None if parts else module
        self.weight: torch.Tensor | None = parts[0] if parts else None
        self.eps: float = parts[1] if parts else 0.0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.module is not None:
            out: torch.Tensor = self.module(x)
            return out
        assert self.weight is not None
        return rms_norm(x, self.weight, self.eps)


def activation(module: Any, hidden_act: str | None) -> Any:
    """The MLP's activation as a plain function where it is SiLU (no module call)."""
    return F.silu if hidden_act == "silu" else module


# Each packed weight's (oneDNN copy, Linear.min_rows), by the weight tensor itself (weakly: an
# engine's weights and their copies go when the engine does), for `linear` inside compiled
# graphs.
_PACKED: WeakIdKeyDictionary = WeakIdKeyDictionary()


class Linear:
    """y = x @ w.T (+ b): F.linear, or oneDNN with the weight packed once on a CPU for weights
    of PACK_ELEMENTS or more; with `by_rows`, smaller weights too, for calls of at least
    ROW_PACK_ELEMENTS / weight elements rows. The packed product sums in another order than
    MKL's, so it moves logits by float rounding (~1e-6 relative), as any batch size does; by
    rows, a token's logits then depend on how many rows its step had (the paged engine turns
    it on only where it compiles, whose attention already rounds per step shape)."""

    __slots__ = ("bias", "min_rows", "packed", "weight")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *,
                 pack: bool | None = None, by_rows: bool = False) -> None:
        self.weight, self.bias = weight, bias
        self.packed: torch.Tensor | None = None
        self.min_rows = 0  # calls with fewer rows multiply by F.linear
        if pack is None:
            large = weight.numel() >= PACK_ELEMENTS
            pack = ((large or by_rows) and weight.device.type == "cpu"
                    and weight.dtype in (torch.float32, torch.bfloat16)
                    and torch.backends.mkldnn.is_available())
            if not large:
                self.min_rows = -(-ROW_PACK_ELEMENTS // max(1, weight.numel()))
        if pack:
            with torch.no_grad():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
            _PACKED[weight] = (self.packed, self.min_rows)

    @property
    def always_packed(self) -> bool:
        return self.packed is not None and self.min_rows == 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None or x.shape[0] < self.min_rows:
            return F.linear(x, self.weight, self.bias)
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias,
                                                                "none", [], "")
        return out


@torch.library.custom_op("engines::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias), by oneDNN where a Linear packed `weight`: the same product
    as Linear's, as one op a compiled graph can call. torch.compile cannot take the packed
    copy itself (an opaque oneDNN tensor; inductor lowers oneDNN's linear only for weights
    it froze into the graph, and a graph here takes its weights as inputs, so that every
    engine in a process shares it): the op looks it up from the plain weight it is given."""
    found = _PACKED.get(weight)
    if found is None or x.shape[0] < found[1]:
        return F.linear(x, weight, bias)
    packed = found[0]
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return out


@linear.register_fake
def _linear_shape(x: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def rope_tables(rotary: nn.Module, length: int, device: torch.device,
                dtype: torch.dtype) -> torch.Tensor:
    """[length, 2, head_dim]: the model's own cos and sin for positions 0..length-1 (its
    rotary module's output, computed once; a position's values do not depend on the others),
    sin with its first half negated, for `rope`."""
    positions = torch.arange(length, device=device)[None]
    probe = torch.empty(1, device=device, dtype=dtype)
    with torch.no_grad():
        cos, sin = rotary(probe, positions)
    half = cos.shape[-1] // 2
    signed = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
    return torch.stack((cos[0], signed), dim=1)


def rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """transformers' x * cos + rotate_half(x) * sin in 4 ops: rotate_half(x) is
    cat(-x2, x1); roll gives cat(x2, x1), and the negation moves to sin's first half (the same
    products, bit for bit)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
