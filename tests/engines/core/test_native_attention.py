"""The native causal kernel (engines.core.native) against ATen's SDPA, and the properties the
engines rely on: a token's output does not depend on the chunk, the thread split or the
block layout it came in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engines.core import native, native_ops
from engines.paged.compiled import _attention

_CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(
    not native.available(),
    reason=f"no native kernel here: {native.describe(torch.float32, _CPU, 32)}")

SHAPES = [(2, 1, 32), (8, 2, 64), (4, 4, 32), (4, 1, 128)]  # heads, kv_heads, head_dim
SPANS = [(1, 0), (5, 0), (17, 3), (120, 0), (226, 256), (33, 100)]  # tokens, start


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    total = start + q.shape[0]
    mask = torch.full((total, total), float("-inf")).triu_(1)[start:]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k[:total].transpose(0, 1)[None],
        v[:total].transpose(0, 1)[None], attn_mask=mask, scale=q.shape[-1] ** -0.5,
        enable_gqa=True)
    return out[0].transpose(0, 1)


def _pool(x: torch.Tensor, ids: torch.Tensor, blocks: int, bs: int) -> torch.Tensor:
    """x [keys, kv_heads, D] scattered into a pool [blocks, bs, kv_heads, D] at block ids."""
    pool = torch.randn(blocks, bs, *x.shape[1:])
    padded = torch.zeros(len(ids) * bs, *x.shape[1:])
    padded[: x.shape[0]] = x
    pool[ids] = padded.view(len(ids), bs, *x.shape[1:])
    return pool


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), SHAPES)
@pytest.mark.parametrize(("n", "start"), SPANS)
def test_matches_sdpa_dense_and_pooled(heads: int, kv_heads: int, dim: int, n: int,
                                       start: int) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + start)
    total, bs = start + n, 16
    q = torch.randn(n, heads, dim, generator=gen)
    k, v = (torch.randn(total, kv_heads, dim, generator=gen) for _ in range(2))
    expected = _sdpa(q, k, v, start)
    scale = dim**-0.5
    dense = native.causal_attention(q, native.dense(k), native.dense(v), start, scale)
    torch.testing.assert_close(dense, expected, rtol=1e-5, atol=1e-5)
    nb = -(-total // bs)
    ids = torch.randperm(nb + 3, generator=gen)[:nb]
    kp, vp = _pool(k, ids, nb + 3, bs), _pool(v, ids, nb + 3, bs)
    pooled = native.causal_attention(q, native.pool(kp, ids), native.pool(vp, ids), start, scale)
    transposed = native.causal_attention(
        q, native.pool(kp.permute(0, 2, 3, 1).contiguous(), ids, transposed=True),
        native.pool(vp, ids), start, scale)
    # The same keys read three ways: the same arithmetic, so the same bits.
    assert torch.equal(pooled, dense) and torch.equal(transposed, dense)


def test_a_token_gets_the_same_bits_however_its_prompt_is_chunked_or_split() -> None:
    # Why the engines can chunk a prompt and batch it freely: each row's sums run in one
    # order that depends only on its own position (ATen's flash kernel blocks by chunk).
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(300, 2, 32, generator=gen)
    k, v = torch.randn(300, 1, 32, generator=gen), torch.randn(300, 1, 32, generator=gen)
    kd, vd = native.dense(k), native.dense(v)
    whole = native.causal_attention(q, kd, vd, 0, 0.2)
    parts = [native.causal_attention(q[a:b], kd, vd, a, 0.2)
             for a, b in [(0, 1), (1, 97), (97, 128), (128, 300)]]
    assert torch.equal(torch.cat(parts), whole)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # the rows split over 3 threads by causal work
        assert torch.equal(native.causal_attention(q, kd, vd, 0, 0.2), whole)
    finally:
        torch.set_num_threads(threads)


def test_the_compiled_steps_op_reads_rows_through_their_tables() -> None:
    gen = torch.Generator().manual_seed(3)
    bs, blocks, heads, kv_heads, dim = 16, 40, 4, 2, 32
    keys = torch.randn(blocks, kv_heads, dim, bs, generator=gen)  # transposed per block
    values = torch.randn(blocks, bs, kv_heads, dim, generator=gen)
    spans = [(0, 20), (37, 5), (100, 64)]  # (start, tokens) of three rows
    q = torch.randn(sum(n for _, n in spans), heads, dim, generator=gen)
    width = 11  # blocks per table row
    tables = torch.stack([torch.randperm(blocks, generator=gen)[:width] for _ in spans])
    positions = torch.cat([torch.arange(s, s + n) for s, n in spans])
    firsts = torch.tensor([0, 20, 25])
    rows = firsts[:, None].expand(3, 64)  # only the first column is read
    out = torch.ops.batching_engines.chunk_attention(q, positions, rows, tables, keys, values,
                                                     0.3)
    for r, (start, n) in enumerate(spans):
        k = keys[tables[r]].permute(0, 3, 1, 2).reshape(-1, kv_heads, dim)
        v = values[tables[r]].reshape(-1, kv_heads, dim)
        got = out[int(firsts[r]) : int(firsts[r]) + n]
        expected = native.causal_attention(q[int(firsts[r]) : int(firsts[r]) + n],
                                           native.dense(k), native.dense(v), start, 0.3)
        assert torch.equal(got, expected)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), SHAPES)
def test_the_decode_op_matches_the_compiled_steps_own_attention(heads: int, kv_heads: int,
                                                                 dim: int) -> None:
    gen = torch.Generator().manual_seed(heads * dim)
    bs, blocks = 16, 60
    keys = torch.randn(blocks, kv_heads, dim, bs, generator=gen)
    values = torch.randn(blocks, bs, kv_heads, dim, generator=gen)
    positions = torch.tensor([0, 1, 15, 16, 17, 100, 143])  # block edges, a long row
    tables = torch.stack([torch.randperm(blocks, generator=gen)[:10] for _ in positions])
    q = torch.randn(len(positions), heads, dim, generator=gen)
    got = torch.ops.batching_engines.decode_attention(q, positions, tables, keys, values, 0.2)
    torch.testing.assert_close(got, _attention(q, positions, tables, keys, values, 0.2),
                               rtol=1e-5, atol=1e-5)
    # Each row alone gets the same bits as in the batch: no row reads another's sums.
    alone = torch.cat([torch.ops.batching_engines.decode_attention(
        q[i : i + 1], positions[i : i + 1], tables[i : i + 1], keys, values, 0.2)
        for i in range(len(positions))])
    assert torch.equal(alone, got)


def test_the_decode_op_refuses_blocks_it_cannot_read_as_vectors() -> None:
    assert native_ops.decodes(2, 16) and not native_ops.decodes(2, 8)
    assert not native_ops.decodes(3, 16)
    keys, values = torch.zeros(4, 1, 32, 8), torch.zeros(4, 8, 1, 32)
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.batching_engines.decode_attention(torch.zeros(1, 2, 32), torch.tensor([3]),
                                                    torch.tensor([[0]]), keys, values, 0.2)


def test_refusals_name_what_the_kernel_does_not_compute() -> None:
    assert native.refusal(torch.float32, _CPU, 32) is None
    assert "bfloat16" in str(native.refusal(torch.bfloat16, _CPU, 32))
    assert "head_dim 48" in str(native.refusal(torch.float32, _CPU, 48))
    assert native.describe(torch.bfloat16, _CPU, 32).startswith("ATen SDPA")


@pytest.mark.parametrize(("env", "said"), [
    ({native.ENV_SWITCH: "0"}, f"ATen SDPA ({native.ENV_SWITCH}=0)"),
    ({"CXX": "false"}, "ATen SDPA (building causal_attention.cpp failed"),
], ids=["switched-off", "compiler-fails"])
def test_without_the_kernel_the_paged_engine_says_why_and_still_serves(
        env: dict[str, str], said: str, tmp_path: Path) -> None:
    code = ("from engines.paged import PagedEngine\n"
            "from engines.protocol import Request, SamplingParams\n"
            "e = PagedEngine()\n"
            "print(e.execution)\n"
            "e.add_request(Request(tuple(range(40)), SamplingParams(max_tokens=3), request_id=0))\n"
            "n = 0\n"
            "while e.has_work():\n"
            "    n += sum(len(o.token_ids) for o in e.step())\n"
            "print(n)\n")
    # A cache of its own, so that a library built by an earlier run is not found.
    full = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, check=True)
    assert said in done.stdout
    assert done.stdout.split()[-1] == "3"
