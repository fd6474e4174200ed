"""The paged forward as one compiled graph a step (`PagedEngine(compiled=...)`).

The graph is the forward's own arithmetic (engines.paged.forward) with attention done
differently: no plan of buckets and chunks. A one-token row (a decode) is a query of its own
over its request's block table, up to its position (a [tokens, blocks] table gathered once a
step, masked per token): one attention for all of them, which inductor fuses into loops that
read the pool's blocks in place (no gathered copy): keys are stored transposed per block
([blocks, kv_heads, head_dim, block_size]), so that q.k is a vertical reduction over head_dim
with a block's 16 keys in one vector register. A multi-token row (a prompt chunk, drafts)
attends through the native causal kernel (engines.core.native_ops.chunk_attention, an op of
its own: each row over its own prefix, read through its table) where that kernel applies;
elsewhere it gathers its keys and values once and its tokens attend in one SDPA
(_row_attention), padded to the longest row. Every other small op (norms, RoPE, residuals,
the MLP's activation) fuses into a few loops between the matmuls. A decode reads its group's
whole width and an SDPA chunk row is padded, so the graph runs only steps whose padded
query-key pairs stay under MAX_PAIRS (native rows do not count: their work is causal); a
larger step runs the eager forward, whose causal chunks do less work.

Two modes:
- "step" (the CPU's): every step under MAX_PAIRS, decode or mixed, one graph dynamic in the
  token count and the table width.
- "graphs" (CUDA's, runnable on a CPU): decode-only steps padded to a bucket of batch sizes
  (vLLM's capture sizes: 1, 2, 4, then multiples of 8) over the tables' full width, so that
  every bucket has one static shape; on CUDA each is captured as a CUDA graph
  (torch.compile's "reduce-overhead" mode) and replayed. Padded rows write their K/V to a
  scratch block past the pool and their logits are dropped. Other steps run eagerly.

Compilation costs tens of seconds on a CPU (per process, per shape kind; inductor caches on
disk), so it is off by default: a short run or a test suite that builds hundreds of engines
would pay it for nothing.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from engines.core import native_ops  # noqa: F401  (registers torch.ops.batching_engines)
from engines.core.ops import linear, rms_norm

COMPILE_MODES = ("off", "step", "graphs")
# Decode batch buckets: vLLM's default CUDA-graph capture sizes (1, 2, 4, 8, 16, 24, ...).
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))
# Query-key pairs (tokens x table width) above which a step runs eagerly: a prefill of many
# long prompts (the closed mix's first step: 1,829 tokens x 256) would compute every token
# against the longest table.
MAX_PAIRS = 1 << 16

# Per layer: (ln1 w, qkv w, qkv b, o w, o b, ln2 w, gate_up w, down w, q_norm w, k_norm w).
Weights = tuple[torch.Tensor | None, ...]


def bucket(rows: int, limit: int) -> int:
    """The smallest capture size holding `rows` (at most `limit`)."""
    for size in CAPTURE_SIZES:
        if size >= rows:
            return min(size, limit)
    return limit


def _attention(q: torch.Tensor, positions: torch.Tensor, tables: torch.Tensor,
               keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """q [T, heads, D], each token over its table row [T, blocks] up to its position."""
    n, h, d = q.shape
    nb = tables.shape[1]
    hkv, bs = keys.shape[1], keys.shape[3]
    width = nb * bs
    hidden = torch.arange(width, device=q.device)[None] > positions[:, None]  # [T, W]
    # scores [T, blocks, kv_heads, group, block_size]: q.k over head_dim per block.
    scores = (q.view(n, 1, hkv, h // hkv, d, 1) * keys[tables][:, :, :, None]).sum(-2)
    scores = scores.permute(0, 2, 3, 1, 4).reshape(n, hkv, h // hkv, width) * scale
    probs = torch.softmax(scores.masked_fill(hidden[:, None, None], float("-inf")), -1)
    # p.v summed within each block first, then over blocks: the inner loop then runs over a
    # block's tokens with the block's id looked up once (one reduction over the whole width
    # recomputes a block id and offset per token: 2x slower).
    per_block = (probs.view(n, hkv, h // hkv, nb, bs).permute(0, 3, 4, 1, 2)[..., None]
                 * values[tables][:, :, :, :, None]).sum(2)  # [T, blocks, kvh, group, D]
    return per_block.sum(1).reshape(n, h, d)


def _row_attention(q: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor,
                   tables: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                   scale: float) -> torch.Tensor:
    """q [T, heads, D] of multi-token rows (prompt chunks, drafts), row by row: `rows`
    [R, L] the packed index of each row's tokens (a short row repeats its first), `tables`
    [R, blocks]. Each row's keys and values are gathered once and its tokens attend to them
    in one SDPA (ATen's flash kernel, which inductor calls as is): per token, as _attention
    does, a chunk re-reads its whole table for every token. On the closed mix the graph
    steps took 4-10% less time on tiny, 1-7% on small (docs/benchmarks.md). Returns
    [R * L, heads, D]; the caller picks the real tokens."""
    r, length = rows.shape
    h, d = q.shape[1], q.shape[2]
    hkv, bs = keys.shape[1], keys.shape[3]
    width = tables.shape[1] * bs
    k = keys[tables].permute(0, 2, 1, 4, 3).reshape(r, hkv, width, d)  # [R, kvh, W, D]
    v = values[tables].permute(0, 3, 1, 2, 4).reshape(r, hkv, width, d)  # [R, kvh, W, D]
    flat = rows.reshape(-1)
    qr = q.index_select(0, flat).view(r, length, h, d).transpose(1, 2)  # [R, h, L, D]
    seen = (torch.arange(width, device=q.device)[None, None]
            <= positions.index_select(0, flat).view(r, length, 1))  # [R, L, W]
    out = F.scaled_dot_product_attention(qr, k, v, attn_mask=seen[:, None], scale=scale,
                                         enable_gqa=True).transpose(1, 2)
    return out.reshape(r * length, h, d)


def step_graph(tokens: torch.Tensor, positions: torch.Tensor, write_slots: torch.Tensor,
               tables_from: torch.Tensor, owners: torch.Tensor, rows_tables_from: torch.Tensor,
               row_owners: torch.Tensor, rows: torch.Tensor, back: torch.Tensor,
               wanted: torch.Tensor,
               embed: torch.Tensor, rope: torch.Tensor, final: torch.Tensor,
               head_w: torch.Tensor, head_b: torch.Tensor | None,
               layers: Sequence[Weights], kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
               dims: tuple[int, int, int], eps: float, scale: float,
               packed: bool = False, native_rows: bool = False,
               native_decodes: bool = False) -> torch.Tensor:
    """Packed tokens [T] at `positions`, each written to its pool slot (block x block_size +
    offset) `write_slots` and attending to its table up to its position. The first T_a tokens
    (one-token rows: decodes) each have their table row `tables_from[owners]` [T_a, blocks_a];
    the other T - T_a (multi-token rows: chunks, drafts) are R rows, with tables
    `rows_tables_from[row_owners]` [R, blocks_b] (the gathers and the slots' division happen
    here, fused, rather than as eager ops a step), `rows` [R, L] each row's
    token indices among those T - T_a (a short row padded with its first), `back` [T - T_a]
    each such token's index in the R x L layout (see _row_attention). Logits of the packed
    indices `wanted`. kv: each layer's (keys [blocks, kv_heads, D,
    block_size], values [blocks, block_size, kv_heads, D]). `packed`: the weights are
    multiplied by oneDNN from their packed copies (engines.core.ops.linear, the eager
    forward's product: on the small preset 2x MKL's, which F.linear here would call).
    `native_rows`: the multi-token rows attend through the native causal kernel
    (engines.core.native_ops.chunk_attention: each row over its own prefix, no padding), not
    _row_attention's padded SDPA; `rows` then gives each row's first token and `back` is
    unused. `native_decodes`: the one-token rows attend through the native kernel too
    (engines.core.native_ops.decode_attention, reading the pools in place), not _attention's
    inductor loops."""
    mm = linear if packed else F.linear
    h, hkv, d = dims
    n, split = tokens.shape[0], owners.shape[0]
    tables = tables_from.index_select(0, owners)
    rows_tables = rows_tables_from.index_select(0, row_owners)
    block_size = kv[0][0].shape[3]
    write_blocks, write_offsets = write_slots // block_size, write_slots % block_size
    x = embed.index_select(0, tokens)
    cos, sin = rope.index_select(0, positions).unsqueeze(2).unbind(1)
    for i, (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gate_up_w, down_w, qn, kn) in enumerate(layers):
        assert ln1 is not None and qkv_w is not None and o_w is not None
        assert ln2 is not None and gate_up_w is not None and down_w is not None
        qkv = mm(rms_norm(x, ln1, eps), qkv_w, qkv_b)
        if qn is None or kn is None:
            qk = qkv[:, : (h + hkv) * d].view(n, h + hkv, d)
            qk = qk * cos + qk.roll(d // 2, -1) * sin
            q, k = qk[:, :h], qk[:, h:]
        else:
            q = rms_norm(qkv[:, : h * d].view(n, h, d), qn, eps)
            k = rms_norm(qkv[:, h * d : (h + hkv) * d].view(n, hkv, d), kn, eps)
            q = q * cos + q.roll(d // 2, -1) * sin
            k = k * cos + k.roll(d // 2, -1) * sin
        v = qkv[:, (h + hkv) * d :].view(n, hkv, d)
        keys, values = kv[i]
        # In place on the graph's inputs (inductor writes them where they are), every token's
        # before any attends: a chunk's tokens read each other's.
        torch.ops.aten.index_put_(keys, [write_blocks, None, None, write_offsets], k)
        torch.ops.aten.index_put_(values, [write_blocks, write_offsets], v)
        if native_decodes:
            attn = torch.ops.batching_engines.decode_attention(q[:split], positions[:split],
                                                               tables, keys, values, scale)
        else:
            attn = _attention(q[:split], positions[:split], tables, keys, values, scale)
        if rows_tables.shape[0] and native_rows:
            chunks = torch.ops.batching_engines.chunk_attention(
                q[split:], positions[split:], rows, rows_tables, keys, values, scale)
            attn = torch.cat((attn, chunks))
        elif rows_tables.shape[0]:
            chunks = _row_attention(q[split:], positions[split:], rows, rows_tables, keys,
                                    values, scale)
            attn = torch.cat((attn, chunks.index_select(0, back)))
        x = x + mm(attn.reshape(n, h * d), o_w, o_b)
        gate, up = mm(rms_norm(x, ln2, eps), gate_up_w, None).chunk(2, dim=-1)
        x = x + mm(F.silu(gate) * up, down_w, None)
    return mm(rms_norm(x.index_select(0, wanted), final, eps), head_w, head_b)


class CompiledSteps:
    """The compiled callables for a mode (shared by every engine in the process:
    torch.compile caches per function, guarded on shapes, not on which engine's tensors come
    in): `graph` for "step", `bucket_graph(size)` for "graphs"."""

    def __init__(self, mode: str, device: torch.device) -> None:
        if mode not in COMPILE_MODES:
            raise ValueError(f"compiled: {mode!r} is not one of {', '.join(COMPILE_MODES)}")
        self.mode = mode
        self.cuda = device.type == "cuda"
        self.graph: Callable[..., torch.Tensor] | None = None
        if mode == "step":
            # Automatic dynamic shapes: the second shape makes the dims that changed (tokens,
            # table width) dynamic and keeps the model's static (a fully dynamic graph
            # treats head_dim as unknown too, and vectorizes its loops badly).
            self.graph = _compiled("step", dynamic=None, mode=None)

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def bucket_graph(self, size: int) -> Callable[..., torch.Tensor]:
        """The static graph of one decode bucket (a function of its own per bucket:
        torch.compile keeps at most 8 graphs per function, then runs it uncompiled)."""
        return _compiled(f"bucket{size}", dynamic=False,
                         mode="reduce-overhead" if self.cuda else None)


_CACHE: dict[tuple[Any, ...], Callable[..., torch.Tensor]] = {}


def static_inputs(args: Sequence[Any]) -> None:
    """Mark the weights and KV pools among a graph's arguments as static addresses for CUDA
    graphs: a captured graph replays on the tensors it was captured with, so without the mark
    torch.compile copies every weight into a placeholder before each replay, and declines to
    capture a graph that writes a non-static input (the pools)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            torch._dynamo.mark_static_address(arg)
        elif isinstance(arg, (tuple, list)):
            static_inputs(arg)


_LATER_LAYER = re.compile(r"\b(layers|kv)\[[1-9]")


def _guard_filter(entries: Sequence[Any]) -> list[bool]:
    """Keep every guard but those on layers 1.. and their pools: a model's layers all have
    layer 0's shapes, dtypes and layout (and its pools pool 0's), so their guards check
    nothing layer 0's do not, and cost ~1 us a tensor at every step (~40 us of a tiny-preset
    decode step's ~600)."""
    return [not _LATER_LAYER.search(entry.name) for entry in entries]


def _compiled(name: str, *, dynamic: bool | None, mode: str | None,
              fn: Callable[..., torch.Tensor] | None = None, **config: Any
              ) -> Callable[..., torch.Tensor]:
    """step_graph (or `fn`), compiled; `config`: inductor settings (experiments)."""
    key = (name, dynamic, mode, fn, tuple(sorted(config.items())))
    if key not in _CACHE:
        # A code object of its own: torch.compile's cache of graphs is per code object.
        base = fn or step_graph
        copy = types.FunctionType(base.__code__.replace(co_name=f"step_graph_{name}"),
                                  base.__globals__, closure=base.__closure__)
        options: dict[str, Any] = {"guard_filter_fn": _guard_filter, **config}
        _CACHE[key] = torch.compile(copy, dynamic=dynamic, mode=mode, fullgraph=True,
                                    options=options if mode is None else None)
    return _CACHE[key]
