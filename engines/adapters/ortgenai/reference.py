"""The reference at onnxruntime-genai's int4 precision: our SequentialEngine over the int4
model's own weights, dequantized to float32 (`--reference-engine
engines.adapters.ortgenai.reference:sequential_int4`, for `ortgenai.variants:ortgenai_int4`).

The builder's `-p int4 -e cpu` stores each matrix weight as a `com.microsoft.MatMulNBits`
node's initializers (read here with `onnx`, as the contrib operator's spec defines them):
`B`, uint8 of shape (N, blocks, block_size * bits / 8), the codes of each block along K packed
two to a byte, the lower nibble first; `scales`, one per (row, block); `zero_points`, optional,
uint8 packed the same way, 2 ** (bits - 1) where absent (the builder's symmetric default).
The weight is (code - zero point) x scale, an (N, K) matrix: a torch Linear's `weight` as it
is. Every value is exact in float32 (a 4-bit code times a float32 scale), so this reference
holds the engine's weights to the bit, and the norms, embeddings and biases the builder left
in float32 are the checkpoint's.

What it does not do: at `accuracy_level` 4 (the builder's default for int4 on a CPU)
onnxruntime quantizes the activations to int8, per block of K with a scale each, and computes
each product in integers; this reference multiplies float32 activations. What stays between
the two is that int8 rounding of the activations, the rounding CTranslate2's int8 and
llama.cpp's Q8_0 products make too: compare tie-aware with int8's tolerance (0.25, explicit:
`--parity-tolerance=0.25`; both declare int4 weights, so the derived tolerance would be
int4's, 4.0, which forgives nearly any token of the tiny preset's flat distributions).
docs/engines.md ("At deployment precision", note (c)) has the measurement.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engines.adapters.ortgenai.convert import ortgenai_dir
from engines.models import DEFAULT_PRESET, DEFAULT_SEED, load_model, preset_max_model_len
from engines.protocol import Capabilities, Engine
from engines.sequential import SequentialEngine

__all__ = ["Int4Reference", "dequantize", "dequantized_model", "independent_int4", "int4_weights",
           "sequential_int4"]


def dequantize(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, *, n: int,
               k: int, bits: int, block_size: int) -> np.ndarray:
    """One MatMulNBits weight as a float32 (N, K) matrix (the module docstring's layout)."""
    if bits != 4:
        raise ValueError(f"bits: {bits}; only 4-bit MatMulNBits weights are read")
    blocks = -(-k // block_size)
    if b.shape != (n, blocks, block_size // 2):
        raise ValueError(f"B: shape {b.shape}, expected {(n, blocks, block_size // 2)} for "
                         f"N={n}, K={k}, block_size={block_size}")
    codes = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(n, blocks, block_size)
    if zero_points is None:
        zero = np.full((n, blocks), 2 ** (bits - 1), dtype=np.float32)
    elif zero_points.dtype == np.uint8:
        packed = zero_points.reshape(n, -1)
        zero = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, -1)[:, :blocks]
    else:
        raise ValueError(f"zero_points: dtype {zero_points.dtype}; only packed uint8 is read")
    scale = scales.astype(np.float32).reshape(n, blocks)
    weight = (codes.astype(np.float32) - zero[..., None].astype(np.float32)) * scale[..., None]
    return weight.reshape(n, blocks * block_size)[:, :k]


def _hf_names(prefix: str, rows: int, config: Any) -> list[tuple[str, int]]:
    """transformers' weight names for a MatMulNBits weight whose initializer name starts with
    `prefix` (`model.layers.0.attn.qkv_proj`), with the rows each takes: the builder fuses q,
    k and v into one qkv_proj and names attention `attn`."""
    name = prefix.replace(".attn.", ".self_attn.")
    if name.endswith(".qkv_proj"):
        head = config.hidden_size // config.num_attention_heads
        q, kv = config.num_attention_heads * head, config.num_key_value_heads * head
        if q + 2 * kv != rows:
            raise ValueError(f"{prefix}: {rows} rows, expected q {q} + k {kv} + v {kv}")
        base = name.removesuffix("qkv_proj")
        return [(f"{base}q_proj.weight", q), (f"{base}k_proj.weight", kv),
                (f"{base}v_proj.weight", kv)]
    return [(f"{name}.weight", rows)]


def int4_weights(model_onnx: str | Path, config: Any) -> dict[str, torch.Tensor]:
    """Every MatMulNBits weight of a built model.onnx, dequantized, by transformers' name."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model_onnx)).graph
    inits = {t.name: t for t in graph.initializer}
    out: dict[str, torch.Tensor] = {}
    for node in graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        b, scales = (numpy_helper.to_array(inits[i]) for i in node.input[1:3])
        zero = node.input[3] if len(node.input) > 3 else ""  # "": an omitted optional input
        weight = dequantize(b, scales, numpy_helper.to_array(inits[zero]) if zero else None,
                            n=attrs["N"], k=attrs["K"], bits=attrs.get("bits", 4),
                            block_size=attrs["block_size"])
        prefix = node.input[1].split(".MatMul")[0]
        start = 0
        for name, rows in _hf_names(prefix, attrs["N"], config):
            out[name] = torch.from_numpy(weight[start:start + rows].copy())
            start += rows
    return out


@functools.lru_cache(maxsize=4)
def dequantized_model(preset: str = DEFAULT_PRESET, seed: int = DEFAULT_SEED) -> Any:
    """The preset's float32 model with every Linear weight the int4 build quantized replaced
    by its dequantized value; built once (engines only read weights)."""
    model = copy.deepcopy(load_model(preset, seed=seed))
    weights = int4_weights(ortgenai_dir(preset, seed, "int4") / "model.onnx", model.config)
    state = model.state_dict()
    for name, w in weights.items():
        if name not in state or tuple(state[name].shape) != tuple(w.shape):
            raise ValueError(f"{name}: the int4 model's weight of shape {tuple(w.shape)} has "
                             f"no such weight in the {preset!r} model")
    model.load_state_dict(weights, strict=False)
    return model.eval()


class Int4Reference(SequentialEngine):
    """SequentialEngine over dequantized int4 weights (sequential_int4's); declares int4
    weights and a float32 KV cache, as ortgenai_int4 does, so that the suite compares the two
    tie-aware."""

    name = "sequential_int4"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), dtype="int4",
                                   kv_cache_dtype="float32")

    def independent_twin(self) -> Callable[[], Engine] | None:
        """engines.protocol.IndependentTwin: the independent reference over the same weights,
        by name (the sequential one's own would be a partial over the module, which a repro
        script cannot name)."""
        return independent_int4


def independent_int4() -> Engine:
    """engines.independent's reference over sequential_int4's dequantized weights: its
    independent twin, serving the features the suite routes there."""
    from engines.independent import IndependentEngine

    return IndependentEngine(dequantized_model(),
                             max_model_len=preset_max_model_len(DEFAULT_PRESET),
                             seed=DEFAULT_SEED)


def sequential_int4() -> Int4Reference:
    """The reference for engines.adapters.ortgenai.variants:ortgenai_int4 (the default preset
    and seed, as that variant builds them)."""
    return Int4Reference(dequantized_model(), max_model_len=preset_max_model_len(DEFAULT_PRESET),
                         seed=DEFAULT_SEED)
