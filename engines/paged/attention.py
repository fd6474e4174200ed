"""Ragged attention over a block KV pool: each row reads its own blocks, nothing else.

Single-query rows (decode, or a one-token span) go by length buckets: rows sorted by length
and cut into groups whose padding stays under PAD_ELEMENTS, one masked SDPA per group.
Prompt chunks go one call each, causal, over the request's cached prefix plus the chunk:
the native kernel (engines.core.native: fp32 on a CPU, ~2x ATen's flash kernel on the
presets' heads, read through the block table with no gathered copy) where it applies, else
one SDPA.
The packed order is the plan's: every group's rows together, then the chunks, so a group's
queries and outputs are slices, not gathers.

Gathers copy whole blocks (one id per block_size tokens, the pool viewed as blocks) into a
dense [rows, width] batch; a row shorter than its group's width reads past its table into
block 0 and is masked. Every mask is a view or rows of one causal table built at start-up.

Why buckets: scripts/ragged_attention.py (at 7426dae, since removed) timed four ways for decode
rows over a scattered pool, gathers included (us per layer call, fp32, one thread; a shared
2-core machine at load 2, so +-20%; lengths: the bench's prompt classes 16/31/61/121/483 round
robin, or all at their mean):

    shape                        rows  lengths      padded  per-row  buckets  segment
    tiny (1 kv head, 2 heads, d32)  8  mixed            79      103       61      231
                                    8  uniform 102      28      102       36      212
                                   32  mixed           276      433      161     1112
                                   32  uniform 135     113      436      117     1101
    small (2 kv, 8 heads, d64)      8  mixed           373      182      158     1117
                                    8  uniform 102     106      167      114     1115
                                   32  mixed          1609      822      572     6430
                                   32  uniform 135     505      775      512     6332

Padded (the slot cache's way: every row as long as the longest) loses 1.3-3x on mixed
lengths; one SDPA per row pays ~12 us a row, which sinks uniform batches; a packed segment
softmax (index_add / index_reduce) is slow on CPU at these head sizes. Buckets are best or
within noise of it in every row: one call for a uniform batch, one per length class for a
mixed one. The gathers cost about as much as the attention itself (memory bound: whole
blocks instead of single tokens did not change that), which is why padding is capped in
elements gathered.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F

from engines.core import native

# Padding (in K elements gathered: tokens x kv_heads x head_dim) a bucket may carry before a
# separate SDPA call is cheaper: 512 tokens on the tiny preset, 128 on the small one, inside
# the flat optimum `scripts/ragged_attention.py --pad-sweep` showed at 7426dae (~128-1024 tokens
# on tiny, <= 128 on small; no cap at all costs 17x on 32 mixed rows of the small preset).
PAD_ELEMENTS = 16384


class Span(Protocol):
    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def start(self) -> int: ...


def bucket_rows(lengths: Sequence[int], pad: int) -> list[list[int]]:
    """Row indices grouped by length, longest first: a row joins the current group while the
    group's padding (tokens gathered and attended for nothing) stays within `pad`."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)
    groups: list[list[int]] = []
    work = 0
    for i in order:
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) - work - lengths[i] <= pad:
            groups[-1].append(i)
            work += lengths[i]
        else:
            groups.append([i])
            work = lengths[i]
    return groups


def long_tensor(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """An int64 tensor from Python ints: through a buffer, 5x faster than torch.tensor(list),
    which is a step's largest fixed cost after the model's own ops on the tiny preset."""
    if not values:
        return torch.empty(0, dtype=torch.long, device=device)
    out = torch.frombuffer(values if isinstance(values, array) else array("q", values),
                           dtype=torch.long)
    return out if device.type == "cpu" else out.to(device)


def causal_table(length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """[length, length] additive causal mask: row p is 0 for keys 0..p and -inf after. Every
    mask a step needs is a view of it (a chunk's) or rows of it (a padded group's), so no
    step builds one (length 512 on the tiny preset: 1 MB; 4352 in bf16: 38 MB)."""
    return torch.full((length, length), float("-inf"), device=device, dtype=dtype).triu_(1)


class Group(NamedTuple):
    size: int  # rows; their queries are the next `size` packed tokens
    width: int  # the longest member's length: every member is padded to it
    blocks: torch.Tensor  # [size * ceil(width / block_size)] block ids, row-major
    mask: torch.Tensor | None  # [size, 1, 1, width], 0 or -inf; None when none is padded


class Chunk(NamedTuple):
    size: int  # tokens; the next `size` packed tokens
    start: int  # tokens of the request before the chunk, already in the pool
    blocks: torch.Tensor | None  # block ids of tokens 0..start+size-1; None when start == 0
    mask: torch.Tensor | None  # [size, start+size], 0 or -inf: causal over prefix + chunk


class AttentionPlan(NamedTuple):
    """The step's attention, built once and used by every layer."""

    order: list[int]  # order[i]: the row whose tokens come i-th in the packed batch
    groups: list[Group]
    chunks: list[Chunk]


def plan_attention(rows: Sequence[Span], table_rows: Sequence[int], tables: torch.Tensor,
                   block_size: int, pad: int, causal: torch.Tensor) -> AttentionPlan:
    """Buckets for the single-query rows, a chunk for each longer span. Row i's block table
    is row table_rows[i] of `tables` (the forward's persistent [rows, blocks] tensor; ids past
    the row's own blocks are any valid block, masked here). `pad`: tokens of padding a bucket
    may carry (see PAD_ELEMENTS); `causal`: a causal_table at least as long as the longest
    row."""
    single: list[int] = []
    chunk_rows: list[int] = []
    for i, row in enumerate(rows):
        (single if len(row.tokens) == 1 else chunk_rows).append(i)
    lengths = [rows[i].start + 1 for i in single]
    buckets = bucket_rows(lengths, pad)
    order = [single[m] for bucket in buckets for m in bucket] + chunk_rows
    # One int64 tensor per step: the table row of every row in packed order, then the mask
    # rows of padded groups; one gather of the tables. Groups and chunks take views of both.
    ids = array("q", [table_rows[i] for i in order])
    padded = [lengths[b[-1]] < lengths[b[0]] for b in buckets]
    for bucket, is_padded in zip(buckets, padded, strict=True):
        if is_padded:  # causal row length-1 masks keys length.. (SDPA wants it additive)
            ids.extend([lengths[m] - 1 for m in bucket])
    packed = long_tensor(ids, causal.device)
    table = tables.index_select(0, packed[: len(order)])
    mask_rows = causal.index_select(0, packed[len(order) :]) if any(padded) else None
    groups = []
    at = masked = 0
    for bucket, is_padded in zip(buckets, padded, strict=True):
        n, w = len(bucket), lengths[bucket[0]]
        mask = None
        if is_padded:
            assert mask_rows is not None
            mask = mask_rows[masked : masked + n, None, None, :w]
            masked += n
        # Flattened once a step (a small copy), so that every layer's gather is one
        # index_select: 2.5x faster than indexing the pool with the 2-d slice.
        ids_of = table[at : at + n, : -(-w // block_size)].reshape(-1)
        groups.append(Group(n, w, ids_of, mask))
        at += n
    chunks = []
    for i in chunk_rows:
        start, size = rows[i].start, len(rows[i].tokens)
        if start == 0:
            chunks.append(Chunk(size, 0, None, None))
        else:  # query t sits at position start + t: causal rows start.., keys 0..start+size
            chunks.append(Chunk(size, start, table[at, : -(-(start + size) // block_size)],
                                causal[start : start + size, : start + size]))
        at += 1
    return AttentionPlan(order, groups, chunks)


def _keys(keys: torch.Tensor, blocks: torch.Tensor, rows: int,
          transposed: bool) -> torch.Tensor:
    """The keys of `blocks` (rows x blocks each, row-major) as [rows, kv_heads, tokens, D],
    from a pool [blocks, block_size, kv_heads, D] or, transposed, [blocks, kv_heads, D,
    block_size] (the compiled step's layout, engines.paged.compiled: one more copy here)."""
    gathered = keys.index_select(0, blocks)
    if transposed:
        kv_heads, dim, bs = keys.shape[1], keys.shape[2], keys.shape[3]
        return gathered.view(rows, -1, kv_heads, dim, bs).permute(0, 2, 1, 4, 3).reshape(
            rows, kv_heads, -1, dim)
    return gathered.view(rows, -1, keys.shape[2], keys.shape[3]).transpose(1, 2)


def attend(plan: AttentionPlan, q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
           keys: torch.Tensor, values: torch.Tensor, scale: float, *,
           transposed: bool = False, native_chunks: bool = False) -> torch.Tensor:
    """q [T, heads, D], k_new/v_new [T, kv_heads, D]: the packed tokens in plan order (their
    K/V already written to the pool); one layer's pool as blocks: values [blocks,
    block_size, kv_heads, D], keys the same or `transposed` (see _keys). `native_chunks`:
    the chunks attend through engines.core.native (the caller's check that its refusal is
    None, made once). Returns [T, heads, D]."""
    parts = []
    at = 0
    kv_heads, dim = values.shape[2], values.shape[3]
    for n, w, blocks, mask in plan.groups:
        # Whole blocks: one copy of block_size tokens per id, not one per token.
        k = _keys(keys, blocks, n, transposed)
        v = values.index_select(0, blocks).view(n, -1, kv_heads, dim).transpose(1, 2)
        if k.shape[2] != w:
            k, v = k[:, :, :w], v[:, :, :w]
        a = F.scaled_dot_product_attention(q[at : at + n].unsqueeze(2), k, v, attn_mask=mask,
                                           scale=scale, enable_gqa=True)
        parts.append(a.squeeze(2))
        at += n
    for c in plan.chunks:
        if native_chunks:  # see engines/core/native.py: ~2x ATen's flash kernel on tiny heads
            parts.append(_native_chunk(c, q[at : at + c.size], k_new[at : at + c.size],
                                       v_new[at : at + c.size], keys, values, scale,
                                       transposed))
            at += c.size
            continue
        qc = q[at : at + c.size].transpose(0, 1)[None]
        if c.blocks is None:  # a prompt's first chunk: its own tokens, causal
            k = k_new[at : at + c.size].transpose(0, 1)[None]
            v = v_new[at : at + c.size].transpose(0, 1)[None]
            a = F.scaled_dot_product_attention(qc, k, v, is_causal=True, scale=scale,
                                               enable_gqa=True)
        else:
            total = c.start + c.size
            k = _keys(keys, c.blocks, 1, transposed)[:, :, :total]
            v = values.index_select(0, c.blocks).flatten(0, 1)[:total].transpose(0, 1)[None]
            a = F.scaled_dot_product_attention(qc, k, v, attn_mask=c.mask, scale=scale,
                                               enable_gqa=True)
        parts.append(a[0].transpose(0, 1))
        at += c.size
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _native_chunk(c: Chunk, q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                  keys: torch.Tensor, values: torch.Tensor, scale: float,
                  transposed: bool) -> torch.Tensor:
    """One chunk through the native kernel: its own K/V when it starts the prompt, else the
    prefix and chunk read from the pool through its block table (no gathered copy)."""
    if c.blocks is None:
        return native.causal_attention(q, native.dense(k_new), native.dense(v_new), 0, scale)
    return native.causal_attention(q, native.pool(keys, c.blocks, transposed=transposed),
                                   native.pool(values, c.blocks), c.start, scale)
