"""The native kernel's entries as torch ops, for the compiled paged step
(engines.paged.compiled.step_graph): torch.compile cannot trace a ctypes call, so the graph
calls these ops and inductor leaves them as calls.

Registered with torch.library.Library rather than torch.library.custom_op: the latter's
Python wrapper cost ~30 us a call, more than the decode kernel itself (~15-25 us a layer on
the tiny preset's 16 seats); through the dispatcher straight to these functions a call costs
a few microseconds. Both run under inference mode only (the engines' forward), so neither
has an autograd formula.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from engines.core import native

_LIB = torch.library.Library("batching_engines", "DEF")
_LIB.define("chunk_attention(Tensor q, Tensor positions, Tensor rows, Tensor tables, "
            "Tensor keys, Tensor values, float scale) -> Tensor")
_LIB.define("decode_attention(Tensor q, Tensor positions, Tensor tables, Tensor keys, "
            "Tensor values, float scale) -> Tensor")


def decodes(group: int, block_size: int) -> bool:
    """Whether decode_attention takes a model with `group` query heads a KV head over blocks
    of `block_size`."""
    return group in (1, 2, 4, 8) and block_size % 16 == 0


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


@functools.cache
def _entry(name: str) -> Callable[..., int]:
    fn: Callable[..., int] = getattr(native.library(), name)
    return fn


def _pools(keys: torch.Tensor, values: torch.Tensor) -> tuple[int, object, int, object, int]:
    """Pointers and stride arrays of a layer's pools: keys transposed per block [blocks,
    kv_heads, D, block_size], values [blocks, block_size, kv_heads, D]."""
    k, v, kv_heads = _layouts(keys.shape, keys.stride(), values.shape, values.stride())
    return keys.data_ptr(), k, values.data_ptr(), v, kv_heads


@functools.cache
def _layouts(k_shape: tuple[int, ...], k_stride: tuple[int, ...], v_shape: tuple[int, ...],
             v_stride: tuple[int, ...]) -> tuple[object, object, int]:
    """The stride arrays of pools of these shapes and strides, made once: every layer of every
    step asks (a few microseconds a call saved, on calls of ~15-40 us)."""
    k, kv_heads = native.layout_of(k_shape, k_stride, transposed=True)
    v, _ = native.layout_of(v_shape, v_stride)
    return native.strides(k), native.strides(v), kv_heads


def chunk_attention(q: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor,
                    tables: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """The step's multi-token rows: q [T, heads, D] their packed tokens, row after row;
    positions [T]; rows [R, L] each row's token indices (its first is where it starts; the
    next row's first, where it ends); tables [R, blocks]. Returns [T, heads, D] in q's
    order, each token over its row's keys up to its position."""
    q, positions, rows, tables = (_contiguous(x) for x in (q, positions, rows, tables))
    out = torch.empty_like(q)
    kp, ks, vp, vs, kv_heads = _pools(keys, values)
    args = (q.data_ptr(), q.stride(0), q.stride(1), q.shape[0], rows.data_ptr(),
            rows.stride(0), rows.shape[0], positions.data_ptr(), tables.data_ptr(),
            tables.stride(0), kp, ks, vp, vs, out.data_ptr(), out.stride(0), out.stride(1),
            q.shape[1], kv_heads, q.shape[2], scale)
    native.run(_entry("rows_attention"), args, q.shape[0] * q.shape[1])
    return out


def decode_attention(q: torch.Tensor, positions: torch.Tensor, tables: torch.Tensor,
                     keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """The step's one-token rows: q [T, heads, D], token i at positions[i] over its table
    row tables[i] up to that position, the pools read in place. Returns [T, heads, D]. Only
    where decodes(heads // kv_heads, block_size)."""
    q, positions, tables = _contiguous(q), _contiguous(positions), _contiguous(tables)
    out = torch.empty_like(q)
    kp, ks, vp, vs, kv_heads = _pools(keys, values)
    args = (q.data_ptr(), q.stride(0), q.stride(1), q.shape[0], positions.data_ptr(),
            tables.data_ptr(), tables.stride(0), kp, ks, vp, vs, out.data_ptr(),
            out.stride(0), out.stride(1), q.shape[1], kv_heads, q.shape[2], scale)
    # A decode reads a whole table: 16 query rows' worth of work a token, for the split.
    native.run(_entry("decode_attention"), args, q.shape[0] * 16)
    return out


def _same_shape(q: torch.Tensor, *args: object) -> torch.Tensor:
    return torch.empty_like(q)


_LIB.impl("chunk_attention", chunk_attention, "CPU")
_LIB.impl("decode_attention", decode_attention, "CPU")
torch.library.register_fake("batching_engines::chunk_attention", _same_shape, lib=_LIB)
torch.library.register_fake("batching_engines::decode_attention", _same_shape, lib=_LIB)
